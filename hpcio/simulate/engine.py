"""The simulation proper, on SimGrid: ranks are actors on compute hosts, servers are hosts
with a disk, a star of links joins them, and SimGrid shares each disk's and link's bandwidth
among the flows that cross it (max-min fairness, its CM02 model: no TCP factors, so a
latency is the platform's, not 13x it).

SimGrid keeps one engine per process, so every :func:`simulate` runs in a forked child;
many cases (a calibration grid) share one engine run on disjoint hosts, so they cost one
fork. A case whose per-request events would be too many is aggregated: each rank's step
becomes one wait of (requests x latency) and one transfer per server, and the result says so.
"""

import math
import os
import pickle
import sys
import traceback
from dataclasses import dataclass

import numpy as np

from ..errors import HpcioError
from .workload import PATTERNS, NodeCache

__all__ = ["Case", "simulate", "available", "INSTALL_HINT", "AGGREGATE_ABOVE"]

INSTALL_HINT = ("SimGrid's Python module is missing: as root run scripts/install-simgrid.sh "
                "(Debian's python3-simgrid 3.32 linked into the venv), or pip install "
                "simgrid==4.1 (a cmake + boost build)")
AGGREGATE_ABOVE = 200_000   # per-request events in one case past which steps are aggregated
FLOPS = 1e9                 # a core's speed: CPU seconds are executed as FLOPS x s
COLUMNS = ("stall", "wall", "compute", "straggler", "records", "nbytes")


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
    return [w.plan_ids(r) for r in range(w.ranks)]


def _estimate_requests(case, plans):
    w = case.workload
    kind = PATTERNS[w.reader][0]
    if kind == "prefetch":
        return w.ranks * w.steps
    win = case.params.get("window") or 1 << 17
    return int(w.ranks * w.steps * w.batch * (w.record_bytes / win + 1))


def _build(sg, zone, k, case):
    """Hosts, disks and links of case ``k`` (names prefixed, so cases never share)."""
    p, w = case.platform, case.workload
    nodes = -(-w.ranks // p.ranks_per_node)
    hosts = [zone.create_host(f"c{k}n{i}", FLOPS) for i in range(nodes)]
    for h in hosts:
        h.core_count = p.node_cores
    servers = [zone.create_host(f"c{k}s{j}", 1e9) for j in range(p.servers)]
    disks = [h.create_disk(f"c{k}d{j}", p.server_bps, p.server_bps)
             for j, h in enumerate(servers)]
    up = {h.name: zone.create_link(f"c{k}l{h.name}", p.nic_bps).set_latency(p.nic_latency_s)
          for h in hosts + servers}
    for s in servers:
        for h in hosts:
            zone.add_route(s.netpoint, h.netpoint, None, None,
                           [sg.LinkInRoute(up[s.name]), sg.LinkInRoute(up[h.name])], True)
    return hosts, servers, disks


def _request(sg, case, built, host, parts, count=1):
    """One request (``count`` of them back to back, aggregated): the per-request service
    time at each server it reads from, then its bytes off the disks and over the links at
    once (a server streams what it reads). A server serves ``threads`` requests at a time;
    the others queue (what makes many ranks' small requests slow down one another)."""
    _, servers, disks, queues = built
    held = sorted({j for j, n in parts if n > 0}) if queues else []
    for j in held:                      # in server order: no two requests wait on each other
        queues[j].acquire()
    sg.this_actor.sleep_for(case.platform.latency_s * count)
    for j in held:
        queues[j].release()
    acts = []
    for j, n in parts:
        n = int(n)
        if n > 0:
            acts.append(disks[j].read_async(n))
            acts.append(sg.Comm.sendto_async(servers[j], host, n))
    for a in acts:
        a.wait()


def _deploy(sg, k, case, built, plans, out, barrier):
    p, w = case.platform, case.workload
    hosts = built[0]
    if p.server_threads:
        built = built[:3] + ([sg.Semaphore(p.server_threads) for _ in built[1]],)
    else:
        built = built[:3] + (None,)
    kind, pattern = PATTERNS[w.reader]
    cpu = case.params.get("cpu_s", 0.0) * w.batch
    aggregate = out["aggregated"]
    caches = [NodeCache(p.cache_bytes, case.params.get("window") or 1 << 17)
              for _ in hosts]
    cols = {c: np.zeros((w.ranks, w.steps)) for c in COLUMNS}
    out["columns"] = cols
    step_bytes = w.batch * w.record_bytes

    def finish(r, s, t0, stall):
        cols["stall"][r, s] = stall
        sg.this_actor.sleep_for(w.compute_s + w.rest_s)
        cols["compute"][r, s] = w.compute_s
        if barrier is not None:
            t1 = sg.Engine.clock
            barrier.wait()
            cols["straggler"][r, s] = sg.Engine.clock - t1
        cols["wall"][r, s] = sg.Engine.clock - t0
        cols["records"][r, s] = w.batch
        cols["nbytes"][r, s] = step_bytes

    def demand_rank(r):
        host = hosts[r // p.ranks_per_node]
        cache = caches[r // p.ranks_per_node] if p.cache_bytes > 0 else None
        for s in range(w.steps):
            t0 = sg.Engine.clock
            reqs = pattern(w, p, case.params, plans[r][s], cache)
            out["requests"] += len(reqs)
            if aggregate and reqs:
                per = {}
                for j, n in reqs:
                    per[j] = per.get(j, 0) + n
                count = {}
                for j, _ in reqs:
                    count[j] = count.get(j, 0) + 1
                for j, n in per.items():
                    _request(sg, case, built, host, [(j, n)], count[j])
            else:
                for j, n in reqs:
                    _request(sg, case, built, host, [(j, n)])
            if cpu:
                sg.this_actor.execute(cpu * FLOPS)
            finish(r, s, t0, sg.Engine.clock - t0)

    def prefetch_rank(r):
        host = hosts[r // p.ranks_per_node]
        groups = pattern(w, p, case.params, plans[r])
        ready = sg.Semaphore(0)          # one release per step whose bytes are in
        slots = sg.Semaphore(max(1, w.prefetch))

        def io():
            first = 0
            for last, parts in groups:
                slots.acquire()
                _request(sg, case, built, host, parts)
                out["requests"] += 1
                for _ in range(first, last + 1):
                    ready.release()
                first = last + 1
        ends = {last for last, _ in groups}
        sg.Actor.create(f"io{r}", host, io)
        for s in range(w.steps):
            t0 = sg.Engine.clock
            ready.acquire()
            if cpu:
                sg.this_actor.execute(cpu * FLOPS)
            if s in ends:
                slots.release()
            finish(r, s, t0, sg.Engine.clock - t0)

    body = {"demand": demand_rank, "prefetch": prefetch_rank}[kind]
    for r in range(w.ranks):
        sg.Actor.create(f"c{k}r{r}", hosts[r // p.ranks_per_node], body, r)


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
        outs.append({"requests": 0,
                     "aggregated": _estimate_requests(case, plans[-1]) > AGGREGATE_ABOVE})
    zone.seal()
    for k, case in enumerate(cases):
        barrier = sg.Barrier(case.workload.ranks) if case.workload.sync else None
        _deploy(sg, k, case, built[k], plans[k], outs[k], barrier)
    e.run()
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
