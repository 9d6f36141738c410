"""The simulation proper, on SimGrid: ranks are actors on compute hosts, servers are hosts
whose link carries their bandwidth, a star of links joins them, and SimGrid shares each
link's bandwidth among the flows that cross it (max-min fairness, its CM02 model: no TCP
factors, so a latency is the platform's, not 13x it).

SimGrid keeps one engine per process, so every :func:`simulate` runs in a forked child;
many cases (a calibration grid) share one engine run on disjoint hosts, so they cost one
fork. A case whose per-request events would be too many (or a step of more than
AGGREGATE_STEP requests: a cursor stepping over thousands of records) is aggregated: each
rank's step becomes one request, its requests' latencies back to back and then its bytes
from every server at once, and the result says so.
"""

import os
import pickle
import sys
import traceback
from dataclasses import dataclass

import numpy as np

from ..errors import HpcioError
from .platform import barrier_rounds
from .workload import NodeCache

__all__ = ["Case", "simulate", "available", "layout", "INSTALL_HINT", "AGGREGATE_ABOVE",
           "MAX_ACTORS"]

INSTALL_HINT = ("SimGrid's Python module is missing: as root run scripts/install-simgrid.sh "
                "(Debian's python3-simgrid 3.32 linked into the venv), or pip install "
                "simgrid==4.1 (a cmake + boost build)")
AGGREGATE_ABOVE = 200_000   # per-request events in one case past which steps are aggregated
MAX_ACTORS = 256            # ranks simulated one by one; more are grouped (see layout)
AGGREGATE_STEP = 256        # requests in one rank's step past which that step is aggregated
FLOPS = 1e9                 # a core's speed: CPU seconds are executed as FLOPS x s
WAKE_S = 1e-4               # a rank's CPU each time it wakes (the step loop), run-queue mode
COLUMNS = ("stall", "wall", "compute", "straggler", "exchange", "records", "nbytes")


@dataclass(frozen=True)
class Case:
    platform: object        # platform.Platform
    workload: object        # workload.Workload
    params: dict            # latency/bandwidth already in platform; cpu_s, window


def available():
    """(True, version) when SimGrid's Python module imports here, else (False, why)."""
    import importlib.util
    if importlib.util.find_spec("simgrid") is None:
        return False, INSTALL_HINT
    return True, "simgrid"


def _plan(case):
    w = case.workload
    return w.plans()


def _estimate_requests(case):
    w = case.workload
    kind = w.pattern[0]
    if kind == "prefetch":
        return w.ranks * w.steps
    win = case.params.get("window") or 1 << 17
    return int(w.ranks * w.steps * w.batch * (w.record_bytes / win + 1))


def layout(platform, ranks):
    """How ``ranks`` are simulated: ``(group, per_host)``, each actor standing for ``group``
    ranks (1 up to :data:`MAX_ACTORS` ranks) and each compute host for ``per_host`` nodes.

    Past MAX_ACTORS, ranks are grouped: an actor asks for its group's records at once, its
    flows carry the group's bytes, its CPU work runs on a host ``group`` times as fast with
    as many fewer cores, and a group of whole nodes runs on one host with their links' and
    caches' sum. Every flow then grows by the same factor, so max-min sharing gives each
    the same fraction of a link as the ungrouped ranks had: bandwidth and queueing stay
    exact; what is lost is the spread between the ranks of a group (the straggler wait
    is taken over groups, not ranks)."""
    rpn = platform.ranks_per_node
    g = -(-ranks // MAX_ACTORS)
    if g <= 1:
        return 1, 1
    if g < rpn:
        g = min(d for d in range(g, rpn + 1) if rpn % d == 0)
        return g, 1
    g = rpn * -(-g // rpn)
    return g, g // rpn


def _build(sg, zone, k, case):
    """Hosts and links of case ``k`` (names prefixed, so cases never share)."""
    p, w = case.platform, case.workload
    group, per_host = layout(p, w.ranks)
    nodes = -(-w.ranks // (p.ranks_per_node * per_host))
    fast = group // per_host            # ranks of a node one actor stands for
    hosts = [zone.create_host(f"c{k}n{i}", FLOPS * fast) for i in range(nodes)]
    for h in hosts:
        h.core_count = max(1, -(-p.node_cores * per_host // fast))
    servers = [zone.create_host(f"c{k}s{j}", FLOPS) for j in range(p.servers)]
    # a server's bandwidth is its link's: what it reads it streams, one flow per request
    up = {h.name: zone.create_link(f"c{k}l{h.name}", p.server_bps if h in servers
                                   else p.nic_bps * per_host).set_latency(p.nic_latency_s)
          for h in hosts + servers}
    for s in servers:
        for h in hosts:
            zone.add_route(s.netpoint, h.netpoint, None, None,
                           [sg.LinkInRoute(up[s.name]), sg.LinkInRoute(up[h.name])], True)
    return hosts, servers


def _request(sg, case, built, host, parts, count=1, client=None, cores=None):
    """One request (``count`` of them back to back, aggregated): the per-request service
    time at each server it reads from, then its bytes from them over the links at once. A
    server serves ``threads`` requests at a time, a node's client ``client_threads``; the
    others queue (what makes many ranks' small requests slow down one another)."""
    _, servers, queues = built
    held = sorted({j for j, n in parts if n > 0}) if queues else []
    if client is not None:              # the node's client first, then servers in order:
        client.acquire()                # no two requests wait on each other
    for j in held:
        queues[j].acquire()
    sg.this_actor.sleep_for(case.platform.latency_s * count)
    for j in held:
        queues[j].release()
    if client is not None:
        client.release()
    acts = []
    for j, n in parts:
        n = int(n)
        if n > 0:
            acts.append(sg.Comm.sendto_async(servers[j], host, n))
    for a in acts:
        a.wait()
    # the reader's bytes cost CPU on the node's cores (its file-system client's, the
    # kernel's), beside its ranks' work
    if cores is not None:
        cores(case.params.get("cpu_s_per_byte", 0.0) * sum(n for _, n in parts))


def _run_queue(sg, case, slots):
    """CPU work on a node's cores: shared fluidly (SimGrid's own sharing) or, with a
    quantum, as a run queue: each burst holds a core for at most one quantum, then queues
    again behind the others, so a short burst (a rank waking) waits for the quanta ahead
    of it even before the cores are saturated."""
    q = case.platform.cpu_quantum_s

    def run(seconds):
        if seconds <= 0:
            return
        if not q or slots is None:
            sg.this_actor.execute(seconds * FLOPS)
            return
        while seconds > 1e-12:
            d = min(q, seconds)
            slots.acquire()
            sg.this_actor.execute(d * FLOPS)
            slots.release()
            seconds -= d
    return run


def _deploy(sg, k, case, built, plans, out, barrier):
    p, w = case.platform, case.workload
    hosts = built[0]
    if p.server_threads:
        built = built[:2] + ([sg.Semaphore(p.server_threads) for _ in built[1]],)
    else:
        built = built[:2] + (None,)
    kind, pattern = w.pattern
    group, per_host = layout(p, w.ranks)
    # a node's client, when it serves few requests at once (grouped: in the count instead)
    clients = [sg.Semaphore(p.client_threads) if p.client_threads and group == 1 else None
               for _ in hosts]
    actors = -(-w.ranks // group)
    members = [min(group, w.ranks - a * group) for a in range(actors)]
    on = [a * group // (p.ranks_per_node * per_host) for a in range(actors)]
    exchange = p.exchange_s(w.ranks, w.exchange_bytes) if w.sync else 0.0
    cpu = case.params.get("cpu_s", 0.0) * w.batch
    wake = WAKE_S if p.cpu_quantum_s and group == 1 else 0.0
    runq = [_run_queue(sg, case, sg.Semaphore(p.node_cores) if group == 1 else None)
            for _ in hosts]
    aggregate = out["aggregated"] or group > 1
    caches = [NodeCache(p.cache_bytes * per_host, case.params.get("window") or 1 << 17)
              for _ in hosts]
    cols = {c: np.zeros((actors, w.steps)) for c in COLUMNS}
    out["columns"] = cols
    out["group"] = group

    # ranks simulated one by one meet as gloo's barrier does (a dissemination barrier: in
    # round d each tells rank + d and waits for rank - d), each woken once per round, so a
    # rank the node's cores do not run holds up its peers round by round
    rounds = [1 << i for i in range(barrier_rounds(actors))] \
        if barrier is not None and group == 1 else []
    told = {(a, d): sg.Semaphore(0) for a in range(actors) for d in rounds}

    def disseminate(a):
        for d in rounds:
            told[(a + d) % actors, d].release()
            told[a, d].acquire()
            sg.this_actor.sleep_for(p.round_s)
            runq[on[a]](wake)

    def ids(a, s):                      # the records a group asks for in step s
        return plans[a * group:a * group + members[a], s].ravel()

    def finish(a, s, t0, stall):
        cols["stall"][a, s] = stall
        sg.this_actor.sleep_for(w.compute_s + w.rest_s)
        cols["compute"][a, s] = w.compute_s
        runq[on[a]](wake)               # woken from compute: a core for a moment
        if barrier is not None:
            t1 = sg.Engine.clock
            if rounds:
                disseminate(a)
            else:                       # grouped: the rounds of the ranks, after the last
                barrier.wait()
                sg.this_actor.sleep_for(p.barrier_s(w.ranks))
            cols["straggler"][a, s] = sg.Engine.clock - t1
            if exchange:
                sg.this_actor.sleep_for(exchange)
                cols["exchange"][a, s] = exchange
        cols["wall"][a, s] = sg.Engine.clock - t0
        cols["records"][a, s] = w.batch * members[a]
        cols["nbytes"][a, s] = w.batch * members[a] * w.record_bytes

    def demand_rank(a):
        """The trainer's loader fetches on demand, at most ``w.ahead`` batches ahead of
        the step that asks (``--prefetch``: batch j waits for the step's ask of batch
        j - ahead), so the fetch overlaps compute; the step waits for its batch."""
        host = hosts[on[a]]
        cache = caches[on[a]] if p.cache_bytes > 0 else None
        state = {}
        ready, asks = sg.Semaphore(0), sg.Semaphore(w.ahead)

        def loader():
            for s in range(w.steps):
                asks.acquire()
                if w.cold and cache is not None:
                    cache.enter(s // w.steps_per_epoch)
                srv, nbytes = pattern(w, p, case.params, ids(a, s), cache, state)
                out["requests"] += len(srv)
                out["bytes"] += float(nbytes.sum())
                out["server_bytes"] += np.bincount(srv, weights=nbytes, minlength=p.servers)
                if len(srv) > AGGREGATE_STEP and not aggregate:
                    out["aggregated"] = True    # said in the result, as for the whole case
                if (aggregate or len(srv) > AGGREGATE_STEP) and len(srv):
                    count = np.bincount(srv, minlength=p.servers)
                    total = np.bincount(srv, weights=nbytes, minlength=p.servers)
                    used = np.flatnonzero(count)
                    at_once = min(members[a], p.client_threads * per_host or members[a])
                    _request(sg, case, built, host, [(int(j), total[j]) for j in used],
                             -(-int(count.sum()) // at_once), clients[on[a]], runq[on[a]])
                else:
                    for j, n in zip(srv.tolist(), nbytes.tolist()):
                        _request(sg, case, built, host, [(j, n)], 1, clients[on[a]],
                                 runq[on[a]])
                if cpu:
                    runq[on[a]](cpu * members[a])
                ready.release()

        sg.Actor.create(f"ld{a}", host, loader)
        for s in range(w.steps):
            t0 = sg.Engine.clock
            asks.release()
            ready.acquire()
            finish(a, s, t0, sg.Engine.clock - t0)

    def prefetch_rank(a):
        host = hosts[on[a]]
        requests = pattern(w, p, case.params, [ids(a, s) for s in range(w.steps)])
        ready = sg.Semaphore(0)          # one release per step whose bytes are in
        slots = sg.Semaphore(max(1, w.prefetch))

        def io():
            first = 0
            for last, parts in requests:
                slots.acquire()
                _request(sg, case, built, host, parts, 1, clients[on[a]], runq[on[a]])
                out["requests"] += members[a]
                out["bytes"] += sum(n for _, n in parts)
                for j, n in parts:
                    out["server_bytes"][j] += n
                for _ in range(first, last + 1):
                    ready.release()
                first = last + 1
        ends = {last for last, _ in requests}
        sg.Actor.create(f"io{a}", host, io)
        for s in range(w.steps):
            t0 = sg.Engine.clock
            ready.acquire()
            if cpu:
                runq[on[a]](cpu * members[a])
            if s in ends:
                slots.release()
            finish(a, s, t0, sg.Engine.clock - t0)

    body = {"demand": demand_rank, "prefetch": prefetch_rank}[kind]
    for a in range(actors):
        sg.Actor.create(f"c{k}r{a}", hosts[on[a]], body, a)


def _run_cases(cases):
    """In the child: every case on one engine; the per-rank, per-step columns back."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(devnull, 2)                 # SimGrid logs its configuration on import
    try:
        import simgrid as sg
        e = sg.Engine(["hpcio.simulate", "--log=root.thres:critical",
                       "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"])
    finally:
        os.dup2(saved, 2)
    zone = sg.NetZone.create_full_zone("world")
    built, plans, outs = [], [], []
    for k, case in enumerate(cases):
        built.append(_build(sg, zone, k, case))
        plans.append(_plan(case))
        outs.append({"requests": 0, "bytes": 0.0,
                     "server_bytes": np.zeros(case.platform.servers),
                     "aggregated": _estimate_requests(case) > AGGREGATE_ABOVE})
    zone.seal()
    for k, case in enumerate(cases):
        actors = -(-case.workload.ranks // layout(case.platform, case.workload.ranks)[0])
        barrier = sg.Barrier(actors) if case.workload.sync else None
        _deploy(sg, k, case, built[k], plans[k], outs[k], barrier)
    e.run()
    for out in outs:
        out["end_s"] = float(out["columns"]["wall"].sum(axis=1).max())
    return outs


def simulate(cases):
    """Simulate ``cases`` (one engine run in a forked child); per case a dict of per-rank,
    per-step ``columns``, ``requests`` (events issued) and ``aggregated`` (bool)."""
    ok, why = available()
    if not ok:
        raise HpcioError(why)
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: one SimGrid engine, then gone
        os.close(rfd)
        try:
            payload = ("ok", _run_cases(cases))
        except BaseException as e:  # carried to the parent, said there as one line
            payload = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
        with os.fdopen(wfd, "wb") as f:
            pickle.dump(payload, f)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise HpcioError(f"the SimGrid engine died (wait status {status})")
    payload = pickle.loads(data)
    if payload[0] != "ok":
        if os.environ.get("HPCIO_DEBUG"):
            sys.stderr.write(payload[2])
        raise HpcioError(f"the simulation failed: {payload[1]}")
    return payload[1]
