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
from contextlib import contextmanager
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


@contextmanager
def _quiet():
    """stderr (fd 2) to /dev/null for the block: SimGrid logs its configuration on import
    and on an engine's start."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _simgrid():
    """SimGrid's Python module (optional: Debian's python3-simgrid). Imported in the parent
    before it forks engines (loading it and its libraries once, ~30 ms of CPU each engine
    saved); the engine itself is only ever made in a child."""
    import simgrid
    return simgrid


def _run_cases(cases, tick=None):
    """In the child: every case on one engine; the per-rank, per-step columns back.
    ``tick()`` is called as each case's first actor ends a step (the parent's progress)."""
    with _quiet():
        sg = _simgrid()
        e = sg.Engine(["hpcio.simulate", "--log=root.thres:critical",
                       "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"])
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
            _batch()
            payload = ("ok", _run_cases(cases, lambda: os.write(tw, b".")))
        except BaseException as e:  # carried to the parent, said there as one line
            payload = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
        with os.fdopen(wfd, "wb") as f:
            pickle.dump(payload, f)
        os._exit(0)
    os.close(wfd)
    os.close(tw)
    return pid, rfd, tr


def _batch():
    """This process (and the threads it starts: SimGrid's actors) scheduled as SCHED_BATCH.

    Each simulated call hands the core from the actor's thread to SimGrid's maestro and
    back through semaphores whose release wakes the other thread while holding its mutex:
    a woken thread that preempts the waker at once blocks on that mutex, so a call took
    4.7 context switches (11 us of CPU) where 2 do (7 us, measured on a sleep_for). A batch
    thread does not preempt on wake-up; the hand-off order is SimGrid's, so every result
    is the same."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):    # not Linux, or refused: the default policy
        pass


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


def _pool(chunks, slots, progress):
    """Run ``chunks`` (lists of cases), one forked engine each, at most one per slot (a
    core, or None) at a time, a chunk started as one ends; every answer read as it comes
    (a child never blocks on a full pipe) and every child reaped, also past a failed one
    (no chunk is started after a failure). Their results, in order."""
    sel = selectors.DefaultSelector()
    todo = list(range(len(chunks)))[::-1]
    live, results, failed = {}, [None] * len(chunks), []

    def start(k, slot):
        pid, rfd, tr = _start(chunks[k], slot)
        live[k] = {"pid": pid, "data": bytearray(), "open": 2, "slot": slot}
        sel.register(rfd, selectors.EVENT_READ, (k, False))
        sel.register(tr, selectors.EVENT_READ, (k, True))
    try:
        for slot in slots:
            if todo:
                start(todo.pop(), slot)
        while live:
            for key, _ in sel.select():
                k, is_tick = key.data
                chunk = os.read(key.fd, 1 << 20)
                if chunk:
                    if not is_tick:
                        live[k]["data"] += chunk
                    elif progress is not None:
                        progress.update(len(chunk))
                    continue
                sel.unregister(key.fd)
                os.close(key.fd)
                child = live[k]
                child["open"] -= 1
                if child["open"]:
                    continue
                del live[k]
                try:
                    results[k] = _answer(child["pid"], bytes(child["data"]))
                except HpcioError as e:
                    failed.append(e)
                if todo and not failed:
                    start(todo.pop(), child["slot"])
    finally:
        for key in list(sel.get_map().values()):
            os.close(key.fd)
        sel.close()
    if failed:
        raise failed[0]
    return results


#: cases per engine: an engine's cost grows faster than its cases (one solver for all their
#: flows), and small engines dealt as cores free up balance the cores
CHUNK = 24


def simulate(cases, label=None):
    """Simulate ``cases``; per case a dict of per-rank, per-step ``columns``, ``requests``
    (events issued) and ``aggregated`` (bool). Cases are independent (disjoint hosts), so
    they are dealt round-robin to engines of about :data:`CHUNK` cases, each in a forked
    child, :func:`jobs` of them at once, each on a core of its own: a calibration grid
    takes the machine's cores, not one.
    With ``label``, a progress line (simulated steps done, of all cases) on stderr."""
    ok, why = available()
    if not ok:
        raise HpcioError(why)
    if "simgrid" not in sys.modules:
        with _quiet():
            _simgrid()
    n = max(1, min(jobs(), len(cases)))
    # engines of CHUNK cases; a few cases (a prediction's large ones) one engine each
    m = len(cases) if len(cases) <= 4 * n else max(n, -(-len(cases) // CHUNK))
    cpus = _cpus()
    progress = Progress(sum(c.workload.steps for c in cases), "simulated step", label) \
        if label else None
    slots = [cpus[k % len(cpus)] if len(cpus) >= n else None for k in range(n)]
    try:
        parts = _pool([cases[k::m] for k in range(m)], slots, progress)
    finally:
        if progress is not None:
            progress.close()
    outs = [None] * len(cases)
    for k, part in enumerate(parts):
        outs[k::m] = part
    return outs
