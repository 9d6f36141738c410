"""The ranks of one case as SimGrid actors: each rank's step loop beside its loader (a
reader that fetches on demand) or its I/O thread (a reader that prefetches), and the
barrier and exchange that end every step; what each piece costs is in :mod:`.costs`."""

import numpy as np

from .costs import WAKE_S, request, run_queue
from .platform import barrier_rounds
from .workload import NodeCache

__all__ = ["Ranks", "COLUMNS", "AGGREGATE_STEP"]

AGGREGATE_STEP = 256        # requests in one rank's step past which that step is aggregated
COLUMNS = ("stall", "wall", "compute", "straggler", "exchange", "records", "nbytes")


class Ranks:
    """The actors of case ``k`` on its ``hosts`` and ``servers``, each standing for
    ``group`` ranks (``per_host`` nodes per host: :func:`hpcio.simulate.engine.layout`);
    they fill ``out`` with per-actor, per-step :data:`COLUMNS` and the requests, bytes and
    bytes per server they issued."""

    def __init__(self, sg, k, case, hosts, servers, plans, out, barrier, group, per_host,
                 tick=None):
        p, w = case.platform, case.workload
        self.sg, self.k, self.case, self.p, self.w = sg, k, case, p, w
        self.hosts, self.servers, self.plans, self.out = hosts, servers, plans, out
        self.barrier, self.group, self.per_host = barrier, group, per_host
        self.tick = tick
        self.queues = [sg.Semaphore(p.server_threads) for _ in servers] \
            if p.server_threads else None
        self.kind, self.pattern = w.pattern
        # a node's client, when it serves few requests at once (grouped: in the count instead)
        self.clients = [sg.Semaphore(p.client_threads) if p.client_threads and group == 1
                        else None for _ in hosts]
        self.actors = -(-w.ranks // group)
        self.members = [min(group, w.ranks - a * group) for a in range(self.actors)]
        self.on = [a * group // (p.ranks_per_node * per_host) for a in range(self.actors)]
        self.exchange = p.exchange_s(w.ranks, w.exchange_bytes) if w.sync else 0.0
        self.cpu = case.params.get("cpu_s", 0.0) * w.batch
        self.wake = WAKE_S if p.cpu_quantum_s and group == 1 else 0.0
        self.runq = [run_queue(sg, case, sg.Semaphore(p.node_cores) if group == 1 else None)
                     for _ in hosts]
        self.aggregate = out["aggregated"] or group > 1
        self.caches = [NodeCache(p.cache_bytes * per_host, case.params.get("window") or 1 << 17)
                       for _ in hosts]
        self.cols = {c: np.zeros((self.actors, w.steps)) for c in COLUMNS}
        out["columns"] = self.cols
        out["group"] = group
        # ranks simulated one by one meet as gloo's barrier does (a dissemination barrier:
        # in round d each tells rank + d and waits for rank - d), each woken once per round,
        # so a rank the node's cores do not run holds up its peers round by round
        self.rounds = [1 << i for i in range(barrier_rounds(self.actors))] \
            if barrier is not None and group == 1 else []
        self.told = {(a, d): sg.Semaphore(0) for a in range(self.actors) for d in self.rounds}

    def start(self):
        """Every actor on its node's host, each running its reader kind's step loop."""
        body = {"demand": self._demand_rank, "prefetch": self._prefetch_rank,
                "workers": self._workers_rank}[self.kind]
        for a in range(self.actors):
            self.sg.Actor.create(f"c{self.k}r{a}", self.hosts[self.on[a]], body, a)

    def _ids(self, a, s):
        """The records actor ``a`` (its group) asks for in step ``s``."""
        return self.plans[a * self.group:a * self.group + self.members[a], s].ravel()

    def _request(self, a, host, parts, count):
        on = self.on[a]
        request(self.sg, self.case, self.servers, self.queues, host, parts, count,
                self.clients[on], self.runq[on])

    def _disseminate(self, a):
        sg, told = self.sg, self.told
        for d in self.rounds:
            told[(a + d) % self.actors, d].release()
            told[a, d].acquire()
            sg.this_actor.sleep_for(self.p.round_s)
            self.runq[self.on[a]](self.wake)

    def _finish(self, a, s, t0, stall):
        """The rest of step ``s`` once its batch is in: compute, then the barrier and the
        exchange; its columns."""
        sg, p, w, cols = self.sg, self.p, self.w, self.cols
        cols["stall"][a, s] = stall
        sg.this_actor.sleep_for(w.compute_s + w.rest_s)
        cols["compute"][a, s] = w.compute_s
        self.runq[self.on[a]](self.wake)   # woken from compute: a core for a moment
        if self.barrier is not None:
            t1 = sg.Engine.clock
            if self.rounds:
                self._disseminate(a)
            else:                       # grouped: the rounds of the ranks, after the last
                self.barrier.wait()
                sg.this_actor.sleep_for(p.barrier_s(w.ranks))
            cols["straggler"][a, s] = sg.Engine.clock - t1
            if self.exchange:
                sg.this_actor.sleep_for(self.exchange)
                cols["exchange"][a, s] = self.exchange
        cols["wall"][a, s] = sg.Engine.clock - t0
        cols["records"][a, s] = w.batch * self.members[a]
        cols["nbytes"][a, s] = w.batch * self.members[a] * w.record_bytes
        if a == 0 and self.tick is not None:
            self.tick()

    def _demand_rank(self, a):
        """The trainer's loader fetches on demand, at most ``w.ahead`` batches ahead of
        the step that asks (``--prefetch``: batch j waits for the step's ask of batch
        j - ahead), so the fetch overlaps compute; the step waits for its batch."""
        sg, w = self.sg, self.w
        host = self.hosts[self.on[a]]
        cache = self.caches[self.on[a]] if self.p.cache_bytes > 0 else None
        ready, asks = sg.Semaphore(0), sg.Semaphore(w.ahead)
        sg.Actor.create(f"ld{a}", host, self._loader, a, host, cache, ready, asks)
        for s in range(w.steps):
            t0 = sg.Engine.clock
            asks.release()
            ready.acquire()
            self._finish(a, s, t0, sg.Engine.clock - t0)

    def _loader(self, a, host, cache, ready, asks):
        """Actor ``a``'s loader: each step's records when the step asks, as the reader's
        pattern turns them into requests, then their CPU."""
        p, w, out = self.p, self.w, self.out
        state = {}
        for s in range(w.steps):
            asks.acquire()
            if w.cold and cache is not None:
                cache.enter(s // w.steps_per_epoch)
            srv, nbytes = self.pattern(w, p, self.case.params, self._ids(a, s), cache, state)
            out["requests"] += len(srv)
            out["bytes"] += float(nbytes.sum())
            out["server_bytes"] += np.bincount(srv, weights=nbytes, minlength=p.servers)
            if len(srv) > AGGREGATE_STEP and not self.aggregate:
                out["aggregated"] = True    # said in the result, as for the whole case
            self._fetch(a, host, srv, nbytes)
            if self.cpu:
                self.runq[self.on[a]](self.cpu * self.members[a])
            ready.release()

    def _fetch(self, a, host, srv, nbytes):
        """One step's requests (server, bytes): one by one, or as one aggregated request
        (the case is, or the step has more than AGGREGATE_STEP)."""
        p = self.p
        if (self.aggregate or len(srv) > AGGREGATE_STEP) and len(srv):
            count = np.bincount(srv, minlength=p.servers)
            total = np.bincount(srv, weights=nbytes, minlength=p.servers)
            used = np.flatnonzero(count)
            at_once = min(self.members[a], p.client_threads * self.per_host or self.members[a])
            self._request(a, host, [(int(j), total[j]) for j in used],
                          -(-int(count.sum()) // at_once))
        else:
            for j, n in zip(srv.tolist(), nbytes.tolist()):
                self._request(a, host, [(j, n)], 1)

    def _workers_rank(self, a):
        """A loader of ``w.prefetch`` worker processes (PyTorch's DataLoader, as DLIO runs
        it): batch j is handed to worker j mod workers once it is asked for, the first
        ``w.ahead`` at the start and one more each time the step takes a batch (the
        DataLoader's prefetch_factor x workers in flight); each worker fetches and decodes
        its batches whole, one after another; the step takes them in order."""
        sg, w = self.sg, self.w
        host = self.hosts[self.on[a]]
        workers = max(1, w.prefetch)
        ahead = max(1, w.ahead)
        issued = [sg.Semaphore(0) for _ in range(w.steps)]
        ready = [sg.Semaphore(0) for _ in range(w.steps)]
        for k in range(workers):
            sg.Actor.create(f"wk{a}.{k}", host, self._worker, a, host, k, workers, issued,
                            ready)
        for j in range(min(ahead, w.steps)):
            issued[j].release()
        for s in range(w.steps):
            t0 = sg.Engine.clock
            ready[s].acquire()
            if s + ahead < w.steps:
                issued[s + ahead].release()
            self._finish(a, s, t0, sg.Engine.clock - t0)

    def _worker(self, a, host, k, workers, issued, ready):
        """Worker ``k`` of actor ``a``'s loader: its batches' records as the pattern asks
        for them (``fn(w, platform, params, ids)``), then their CPU on the node's cores."""
        p, w, out = self.p, self.w, self.out
        # workers drift apart in a real loader (their files, the scheduler); identical ones
        # started together would fetch in lockstep, then decode in lockstep, the link idle
        # while every worker decodes: start them spread over one batch's decoding instead
        self.sg.this_actor.sleep_for((k + a / self.actors) / workers * self.cpu)
        for s in range(k, w.steps, workers):
            issued[s].acquire()
            srv, nbytes = self.pattern(w, p, self.case.params, self._ids(a, s))
            out["requests"] += len(srv)
            out["bytes"] += float(nbytes.sum())
            out["server_bytes"] += np.bincount(srv, weights=nbytes, minlength=p.servers)
            self._fetch(a, host, srv, nbytes)
            if self.cpu:
                self.runq[self.on[a]](self.cpu * self.members[a])
            ready[s].release()

    def _prefetch_rank(self, a):
        """A prefetching reader: an I/O thread keeps ``w.prefetch`` requests in flight,
        each covering whole steps, and spends the reader's CPU for their samples beside
        the step (on the node's cores); the step waits for its bytes."""
        sg, w = self.sg, self.w
        host = self.hosts[self.on[a]]
        requests = self.pattern(w, self.p, self.case.params,
                                [self._ids(a, s) for s in range(w.steps)])
        ready = sg.Semaphore(0)          # one release per step whose bytes are in
        slots = sg.Semaphore(max(1, w.prefetch))
        ends = {last for last, _ in requests}
        sg.Actor.create(f"io{a}", host, self._io, a, host, requests, ready, slots)
        for s in range(w.steps):
            t0 = sg.Engine.clock
            ready.acquire()
            if s in ends:
                slots.release()
            self._finish(a, s, t0, sg.Engine.clock - t0)

    def _io(self, a, host, requests, ready, slots):
        """Actor ``a``'s I/O thread: its requests in order, a step released as its last
        request is in."""
        out = self.out
        first = 0
        for last, parts in requests:
            slots.acquire()
            self._request(a, host, parts, 1)
            if self.cpu:    # the reader's CPU for the steps it brought in, on its thread
                self.runq[self.on[a]](self.cpu * self.members[a] * (last + 1 - first))
            out["requests"] += self.members[a]
            out["bytes"] += sum(n for _, n in parts)
            for j, n in parts:
                out["server_bytes"][j] += n
            for _ in range(first, last + 1):
                ready.release()
            first = last + 1
