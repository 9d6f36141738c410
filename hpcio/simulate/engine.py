"""The simulation proper, on SimGrid: ranks are actors on compute hosts, servers are hosts
whose link carries their bandwidth, a star of links joins them, and SimGrid shares each
link's bandwidth among the flows that cross it (max-min fairness, its CM02 model: no TCP
factors, so a latency is the platform's, not 13x it).

SimGrid keeps one engine per process, so every :func:`simulate` runs in forked children
(:mod:`.pool`, one per core, shared by the threads of a prediction); many small cases (a
calibration grid) share an engine run on disjoint hosts, the cases dealt among them. A case whose per-request events would be too many (or a step of more than
AGGREGATE_STEP requests: a cursor stepping over thousands of records) is aggregated: each
rank's step becomes one request, its requests' latencies back to back and then its bytes
from every server at once, and the result says so.

This module runs cases; the machine is built in :mod:`.topology`, the ranks are the actors
of :mod:`.actors`, and what their work costs is :mod:`.costs`' (its WAKE_S is named here
too, beside the run's other constants).
"""

import importlib.util
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..errors import HpcioError
from ..progress import Progress
from . import pool
from .actors import Ranks
from .costs import WAKE_S
from .pool import jobs
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


def _plans(cases):
    """Each case's plan (every rank's record ids per step); cases of one workload (the
    fits a calibration grid or a range tries on it) share one: a plan of 2,000,000 records
    is ~40 ms to draw. Actors only read their rows of it."""
    memo, out = {}, []
    for case in cases:
        w = case.workload
        key = (w.ranks, w.batch, w.steps, w.records, w.seed, w.shuffle, w.block, w.window)
        if key not in memo:
            memo[key] = w.plans()
        out.append(memo[key])
    return out


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


_LOADING = threading.Lock()


def _simgrid():
    """SimGrid's Python module (optional: Debian's python3-simgrid). Imported in the parent
    before it forks engines (loading it and its libraries once, ~30 ms of CPU each engine
    saved); the engine itself is only ever made in a child."""
    import simgrid  # optional, and only when a case is simulated (it loads ns-3 too)
    return simgrid


def _run_cases(cases, tick=None):
    """In the child: every case on one engine; the per-rank, per-step columns back.
    ``tick()`` is called as each case's first actor ends a step (the parent's progress)."""
    with _quiet():
        sg = _simgrid()
        e = sg.Engine(["hpcio.simulate", "--log=root.thres:critical",
                       "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"])
    zone = sg.NetZone.create_full_zone("world")
    built, plans, outs = [], _plans(cases), []
    for k, case in enumerate(cases):
        built.append(build(sg, zone, k, case, *layout(case.platform, case.workload.ranks)))
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


#: cases per engine: an engine's cost grows faster than its cases (one solver for all their
#: flows), and small engines dealt as cores free up balance the cores
CHUNK = 24
#: cases of this many simulated actor-steps (:func:`_cost`) and more, on average, get an
#: engine each: 8 ranks x 100 steps (~1.5 s) is one; ten in one engine made the slowest
#: engine of a phase ten times as long, the other core idle meanwhile
LARGE = 1000


def _cost(case):
    """A case's rough cost, to start the largest engines first: its actors' simulated
    steps (a demand reader's loader is an actor of its own)."""
    w = case.workload
    group, _ = layout(case.platform, w.ranks)
    return -(-w.ranks // group) * w.steps * (1 if w.pattern[0] == "prefetch" else 2)


def simulate(cases, label=None):
    """Simulate ``cases``; per case a dict of per-rank, per-step ``columns``, ``requests``
    (events issued) and ``aggregated`` (bool). Cases are independent (disjoint hosts), so
    they are dealt round-robin to engines of about :data:`CHUNK` cases, each in a forked
    child on a core of its own (:mod:`.pool`, the largest first): a calibration grid takes
    the machine's cores, not one.
    With ``label``, a progress line (simulated steps done, of all cases) on stderr."""
    with _LOADING:      # threads side by side (pool.beside): one imports, the others wait
        ok, why = available()
        if not ok:
            raise HpcioError(why)
        if "simgrid" not in sys.modules:
            with _quiet():
                _simgrid()
    n = max(1, min(jobs(), len(cases)))
    # engines of CHUNK cases; a few cases, or large ones (a prediction's), one engine each
    each = [_cost(c) for c in cases]
    m = len(cases) if len(cases) <= 4 * n or sum(each) >= LARGE * len(cases) else \
        max(n, -(-len(cases) // CHUNK))
    chunks = [cases[k::m] for k in range(m)]
    cost = [sum(each[k::m]) for k in range(m)]
    progress = Progress(sum(c.workload.steps for c in cases), "simulated step", label) \
        if label else None
    try:
        parts = pool.run(_run_cases, chunks, progress,
                         order=sorted(range(m), key=lambda k: -cost[k]))
    finally:
        if progress is not None:
            progress.close()
    outs = [None] * len(cases)
    for k, part in enumerate(parts):
        outs[k::m] = part
    return outs
