"""The simulation proper, on SimGrid: ranks are actors on compute hosts, servers are hosts
whose link carries their bandwidth, a star of links joins them, and SimGrid shares each
link's bandwidth among the flows that cross it (max-min fairness, its CM02 model: no TCP
factors, so a latency is the platform's, not 13x it).

SimGrid keeps one engine per process, so every :func:`simulate` runs in forked children;
many cases (a calibration grid) share an engine run on disjoint hosts, one child per core,
the cases dealt among them. A case whose per-request events would be too many (or a step of more than
AGGREGATE_STEP requests: a cursor stepping over thousands of records) is aggregated: each
rank's step becomes one request, its requests' latencies back to back and then its bytes
from every server at once, and the result says so.

This module runs cases; the machine is built in :mod:`.topology`, the ranks are the actors
of :mod:`.actors`, and what their work costs is :mod:`.costs`' (its WAKE_S is named here
too, beside the run's other constants).
"""

import importlib.util
import os
import pickle
import selectors
import sys
import traceback
from dataclasses import dataclass

import numpy as np

from ..errors import HpcioError
from ..progress import Progress
from .actors import Ranks
from .costs import WAKE_S
from .topology import build

__all__ = ["Case", "simulate", "jobs", "available", "layout", "INSTALL_HINT",
           "AGGREGATE_ABOVE", "MAX_ACTORS", "WAKE_S"]

INSTALL_HINT = ("SimGrid's Python module is missing: as root run scripts/install-simgrid.sh "
                "(Debian's python3-simgrid 3.32 linked into the venv), or pip install "
                "simgrid==4.1 (a cmake + boost build)")
AGGREGATE_ABOVE = 200_000   # per-request events in one case past which steps are aggregated
MAX_ACTORS = 256            # ranks simulated one by one; more are grouped (see layout)


@dataclass(frozen=True)
class Case:
    platform: object        # platform.Platform
    workload: object        # workload.Workload
    params: dict            # latency/bandwidth already in platform; cpu_s, window


def available():
    """(True, version) when SimGrid's Python module imports here, else (False, why)."""
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


def _run_cases(cases, tick=None):
    """In the child: every case on one engine; the per-rank, per-step columns back.
    ``tick()`` is called as each case's first actor ends a step (the parent's progress)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(devnull, 2)                 # SimGrid logs its configuration on import
    try:
        import simgrid as sg  # optional (Debian's python3-simgrid), and only in the child
        e = sg.Engine(["hpcio.simulate", "--log=root.thres:critical",
                       "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"])
    finally:
        os.dup2(saved, 2)
    zone = sg.NetZone.create_full_zone("world")
    built, plans, outs = [], [], []
    for k, case in enumerate(cases):
        built.append(build(sg, zone, k, case, *layout(case.platform, case.workload.ranks)))
        plans.append(_plan(case))
        outs.append({"requests": 0, "bytes": 0.0,
                     "server_bytes": np.zeros(case.platform.servers),
                     "aggregated": _estimate_requests(case) > AGGREGATE_ABOVE})
    zone.seal()
    for k, case in enumerate(cases):
        group, per_host = layout(case.platform, case.workload.ranks)
        actors = -(-case.workload.ranks // group)
        barrier = sg.Barrier(actors) if case.workload.sync else None
        Ranks(sg, k, case, *built[k], plans[k], outs[k], barrier, group, per_host,
              tick).start()
    e.run()
    for out in outs:
        out["end_s"] = float(out["columns"]["wall"].sum(axis=1).max())
    return outs


def jobs():
    """How many engines run at once: the CPUs this process may use (``HPCIO_SIM_JOBS``
    overrides)."""
    given = os.environ.get("HPCIO_SIM_JOBS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def _cpus():
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _start(cases, cpu=None):
    """A forked child running ``cases`` in one engine, pinned to ``cpu`` (SimGrid's actors
    are threads handing the CPU to one another at every simulated call: on one core the
    hand-off needs no other core woken); (pid, the pipe it answers on, the pipe it ticks
    a byte on per simulated step)."""
    rfd, wfd = os.pipe()
    tr, tw = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: one SimGrid engine, then gone
        os.close(rfd)
        os.close(tr)
        try:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})
            payload = ("ok", _run_cases(cases, lambda: os.write(tw, b".")))
        except BaseException as e:  # carried to the parent, said there as one line
            payload = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
        with os.fdopen(wfd, "wb") as f:
            pickle.dump(payload, f)
        os._exit(0)
    os.close(wfd)
    os.close(tw)
    return pid, rfd, tr


def _answer(pid, data):
    """What the child ``pid`` sent (``data``): its cases' results, or an error raised here."""
    _, status = os.waitpid(pid, 0)
    if not data:
        raise HpcioError(f"the SimGrid engine died (wait status {status})")
    payload = pickle.loads(data)
    if payload[0] != "ok":
        if os.environ.get("HPCIO_DEBUG"):
            sys.stderr.write(payload[2])
        raise HpcioError(f"the simulation failed: {payload[1]}")
    return payload[1]


def _gather(children, progress):
    """Read every child's answer and ticks as they come (a child never blocks on a full
    pipe); their answers' bytes, in order."""
    sel = selectors.DefaultSelector()
    data = [bytearray() for _ in children]
    for k, (_, rfd, tr) in enumerate(children):
        sel.register(rfd, selectors.EVENT_READ, (k, False))
        sel.register(tr, selectors.EVENT_READ, (k, True))
    try:
        while sel.get_map():
            for key, _ in sel.select():
                k, is_tick = key.data
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    sel.unregister(key.fd)
                    os.close(key.fd)
                elif is_tick:
                    if progress is not None:
                        progress.update(len(chunk))
                else:
                    data[k] += chunk
    finally:
        for key in list(sel.get_map().values()):
            os.close(key.fd)
        sel.close()
    return [bytes(d) for d in data]


def simulate(cases, label=None):
    """Simulate ``cases``; per case a dict of per-rank, per-step ``columns``, ``requests``
    (events issued) and ``aggregated`` (bool). Cases are independent (disjoint hosts), so
    they are dealt round-robin to :func:`jobs` forked children, one engine each, each on
    a core of its own, run at once: a calibration grid takes the machine's cores, not one.
    With ``label``, a progress line (simulated steps done, of all cases) on stderr."""
    ok, why = available()
    if not ok:
        raise HpcioError(why)
    n = max(1, min(jobs(), len(cases)))
    cpus = _cpus()
    progress = Progress(sum(c.workload.steps for c in cases), "simulated step", label) \
        if label else None
    children = [_start(cases[k::n], cpus[k % len(cpus)] if len(cpus) >= n else None)
                for k in range(n)]
    try:
        data = _gather(children, progress)
    finally:
        if progress is not None:
            progress.close()
    parts, failed = [], []
    for (pid, _, _), d in zip(children, data):  # every child reaped, also past a failed one
        try:
            parts.append(_answer(pid, d))
        except HpcioError as e:
            failed.append(e)
    if failed:
        raise failed[0]
    outs = [None] * len(cases)
    for k, part in enumerate(parts):
        outs[k::n] = part
    return outs
