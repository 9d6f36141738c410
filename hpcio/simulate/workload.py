"""What a measured run says the simulation must replay: the plan, the step's compute, and
the reader's request pattern, with the figures it measured (to calibrate and validate on)."""

import math
import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..analysis.runs import load_run
from ..analysis.tables import run_figures
from ..errors import HpcioError
from ..plan import make_plan
from ..readers.requests import request_bounds, steady_steps

__all__ = ["Workload", "workload_from_run", "PATTERNS", "NodeCache", "server_of"]


@dataclass(frozen=True)
class Workload:
    name: str
    reader: str
    ranks: int
    batch: int
    steps: int
    records: int
    record_bytes: float         # mean record size: the run format keeps no index
    shuffle: str
    seed: int
    compute_s: float            # per step, the run's mean
    rest_s: float               # h2d + exchange + checkpoint + other, per step
    sync: bool                  # steps end together (a gradient exchange)
    prefetch: int               # coordinated: requests in flight ahead of the step
    steady_steps: int           # coordinated: steps per steady request
    faults_per_sample: float    # naive: major faults per record the OS counted
    dataset: str
    measured: Optional[dict] = None  # tables.run_figures of the run

    def at(self, ranks, steps=None, records=None):
        """This workload on ``ranks`` ranks (what a prediction asks), nothing measured."""
        return replace(self, ranks=int(ranks), steps=int(steps or self.steps),
                       records=int(records or self.records), measured=None,
                       name=f"{self.reader}-n{ranks}")

    def plan_ids(self, rank):
        """This rank's record ids per step, (steps, batch), epochs following each other."""
        first = make_plan(self.records, self.ranks, rank, self.batch, epoch=0,
                          seed=self.seed, shuffle=self.shuffle)
        per_epoch = len(first)
        out, epoch = [], 0
        while len(out) < self.steps:
            plan = first if epoch == 0 else make_plan(self.records, self.ranks, rank,
                                                      self.batch, epoch=epoch,
                                                      seed=self.seed, shuffle=self.shuffle)
            out.extend(plan.step(s) for s in range(min(per_epoch, self.steps - len(out))))
            epoch += 1
        return np.stack(out)


def _steady(config, stats, steps, step_bytes):
    """Steps per steady request of a coordinated run: from its ``request_bytes`` option,
    else the smallest steady size whose cut gives the read calls each rank counted."""
    opt = (config.get("reader_options") or {}).get("request_bytes")
    if opt:
        return steady_steps(step_bytes, opt)
    calls = [x.get("calls") for x in stats if x.get("calls")]
    if not calls:
        return steady_steps(step_bytes, 4 << 20)
    want = int(round(float(np.median(calls))))
    for k in range(1, steps + 1):
        if len(request_bounds(steps, k)) - 1 <= want:
            return k
    return steps


def workload_from_run(path):
    """The :class:`Workload` of run directory ``path`` (any run format
    :func:`hpcio.analysis.runs.load_run` reads), or HpcioError saying what it lacks."""
    if not os.path.isdir(path):
        raise HpcioError(f"{path}: not a run directory")
    run = load_run(path)
    fig = run_figures(run)
    if not fig:
        raise HpcioError(f"{path}: no step recorded ({'; '.join(run.problems[:1]) or 'no rank files'})")
    c = run.config
    reader = c.get("reader", "?")
    if reader not in PATTERNS:
        raise HpcioError(f"{path}: the simulation has no request pattern for reader "
                         f"{reader!r} (it has {', '.join(sorted(PATTERNS))})")
    ds = c.get("dataset") or {}
    records, total = ds.get("records"), c.get("dataset_bytes")
    if not records or not total:
        raise HpcioError(f"{path}: config.yaml lacks dataset.records or dataset_bytes")
    s = run.steps
    stats = [(i.get("reader_stats") or {}) for i in run.rank_info if i]
    got = sum(x.get("records", 0) for x in stats)
    faults = sum(x.get("majflt", 0) for x in stats)
    sync = (str(c.get("dist_used", "none")) != "none") or bool(s["straggler_wait"].any())
    return Workload(
        name=run.name, reader=reader, ranks=run.ranks, batch=int(c["batch"]),
        steps=int(s["step"].shape[1]), records=int(records),
        record_bytes=float(total) / int(records), shuffle=c.get("shuffle", "global"),
        seed=int(c.get("seed", 0)), compute_s=fig["compute_s"], rest_s=fig["rest_s"],
        sync=sync, prefetch=int((stats[0].get("prefetch") if stats else None)
                                or c.get("reader_prefetch") or 2),
        steady_steps=_steady(c, stats, int(s["step"].shape[1]), int(c["batch"]) * total
                             / int(records)),
        faults_per_sample=faults / got if got else float("nan"),
        dataset=run.dataset, measured=fig)


def server_of(offset, platform, total):
    """The server holding byte ``offset`` of the dataset: ``file`` spreads its shard
    files (one per server, equal contiguous ranges) whole; ``stripe`` stripes round-robin."""
    if platform.placement == "file":
        return min(int(offset * platform.servers // total), platform.servers - 1)
    return int(offset // platform.stripe_bytes) % platform.stripe_count


class NodeCache:
    """A node's page cache of fixed-size windows, shared by its ranks, least recently used
    out first; ``capacity`` 0 keeps nothing past the record that asked."""

    def __init__(self, capacity_bytes, window):
        self.slots = math.inf if math.isinf(capacity_bytes) else int(capacity_bytes // window)
        self.pages = OrderedDict()

    def missing(self, windows):
        """The windows of ``windows`` not resident; all of them become resident."""
        out = []
        for w in windows:
            if w in self.pages:
                self.pages.move_to_end(w)
            else:
                out.append(w)
                self.pages[w] = True
        while len(self.pages) > self.slots:
            self.pages.popitem(last=False)
        return out


def naive_get(w, platform, params, ids, cache):
    """Naive ``get`` over an mmap: every record's bytes fault in, window by window (the
    kernel's read-around, ``params['window']`` bytes, fitted to the runs' major faults per
    sample); a window another rank of the node brought in costs nothing. Sequential,
    synchronous requests: a list of (server, bytes) for one step's records."""
    win, total = params["window"], w.records * w.record_bytes
    reqs = []
    for r in ids:
        a, b = r * w.record_bytes, (r + 1) * w.record_bytes
        need = range(int(a // win), int((b - 1) // win) + 1)
        for k in (cache.missing(need) if cache is not None else need):
            reqs.append((server_of(k * win, platform, total), win))
    return reqs


def coordinated(w, platform, params, ids_by_step):
    """Coordinated reads, cut by the reader's own rule (hpcio.readers.requests: a ramp
    from one step, doubling up to the steady size), read by one I/O actor up to
    ``prefetch`` requests ahead of the steps. A request's bytes split over the servers
    that hold its records, read in parallel. Returns [(last step covered, [(server,
    bytes), ...]), ...]."""
    total = w.records * w.record_bytes
    bounds = request_bounds(len(ids_by_step), w.steady_steps)
    groups = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        ids = np.concatenate(ids_by_step[lo:hi])
        srv = np.array([server_of(r * w.record_bytes, platform, total) for r in ids])
        parts = [(int(j), float((srv == j).sum() * w.record_bytes)) for j in np.unique(srv)]
        groups.append((int(hi) - 1, parts))
    return groups


# reader name -> (kind, pattern): "demand" patterns are asked per step by the rank itself,
# "prefetch" patterns plan the whole run for an I/O actor beside the rank
PATTERNS = {
    "naive": ("demand", naive_get),
    "coordinated": ("prefetch", coordinated),
}
