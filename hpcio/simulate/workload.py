"""What a measured run says the simulation must replay: the plan, the step's compute, and
the reader's request pattern, with the figures it measured (to calibrate and validate on)."""

import math
import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..explain.runs import load_run
from ..explain.tables import measured as measured_value, run_figures
from ..errors import HpcioError
from ..plan import BLOCK, WINDOW, epoch_order
from ..readers import PATTERNS
from ..readers.requests import request_bounds, steady_steps

__all__ = ["Workload", "workload_from_run", "median_of_repeats", "PATTERNS", "NodeCache"]


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
    access: Optional[str] = None     # the reader's access option, where it has one
    exchange_bytes: int = 0          # the gradient exchange's allreduce, per step
    exchange_s: float = 0.0          # its measured transfer, per step (mean)
    cold: bool = False               # --cache cold: every node's cache emptied each epoch
    block: int = BLOCK               # chunk shuffle: the run's --block and --window
    window: int = WINDOW
    ahead: int = 0                   # batches the trainer's loader fetches ahead (--prefetch)
    barrier_s: float = 0.0           # the last rank's wait at the step's barrier (median)
    cpu_s_per_sample: float = float("nan")  # the ranks' process CPU per sample, measured

    @property
    def steps_per_epoch(self):
        return max(1, self.records // (self.ranks * self.batch))

    @property
    def pattern(self):
        """(kind, fn) of this workload's reader in :data:`PATTERNS` (``get`` where the
        reader has accesses and none is named)."""
        key = (self.reader, self.access)
        return PATTERNS[key if key in PATTERNS else (self.reader, self.access or "get")]

    @property
    def label(self):
        """The reader as results name it: ``naive`` (get) or ``naive-cursor``."""
        return self.reader if self.access in (None, "get") else f"{self.reader}-{self.access}"

    @property
    def case(self):
        """What predictions and validation rows name: the label, with the shuffle where it is
        not global (``coordinated (none)``); runs of one reader with two shuffles are two
        curves sharing one reader's costs."""
        return self.label if self.shuffle == "global" else f"{self.label} ({self.shuffle})"

    def at(self, ranks, steps=None, records=None):
        """This workload on ``ranks`` ranks (what a prediction asks), nothing measured."""
        return replace(self, ranks=int(ranks), steps=int(steps or self.steps),
                       records=int(records or self.records), measured=None,
                       name=f"{self.case}-n{ranks}")

    def plans(self):
        """Every rank's record ids per step, (ranks, steps, batch), epochs following each
        other: the runs' plans (:func:`hpcio.plan.make_plan`, drop_last), each epoch's
        order drawn once for all ranks."""
        g = self.ranks * self.batch
        per_epoch = self.records // g
        if per_epoch < 1:
            raise HpcioError(f"{self.ranks} ranks x batch {self.batch} need more than the "
                             f"dataset's {self.records:,} records")
        out, epoch, left = [], 0, self.steps
        while left > 0:
            n = min(per_epoch, left)
            order = epoch_order(self.records, epoch, self.seed, self.shuffle, self.block,
                                self.window)
            out.append(order[:n * g].reshape(n, self.ranks, self.batch))
            left -= n
            epoch += 1
        return np.ascontiguousarray(np.concatenate(out).transpose(1, 0, 2))


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
    :func:`hpcio.explain.runs.load_run` reads), or HpcioError saying what it lacks."""
    if not os.path.isdir(path):
        raise HpcioError(f"{path}: not a run directory")
    run = load_run(path)
    fig = run_figures(run)
    if not fig:
        why = "; ".join(run.problems[:1]) or "no rank files"
        raise HpcioError(f"{path}: no step recorded ({why})")
    c = run.config
    reader = c.get("reader", "?")
    opts = c.get("reader_options") or {}
    access = opts.get("access", "get") if (reader, "get") in PATTERNS else None
    if (reader, access) not in PATTERNS:
        known = sorted(r if a is None else f"{r} (access={a})" for r, a in PATTERNS)
        raise HpcioError(f"{path}: the simulation has no request pattern for reader "
                         f"{reader!r}{f' with access={access}' if access else ''} (it has "
                         f"{', '.join(known)})")
    ds = c.get("dataset") or {}
    records, total = ds.get("records"), c.get("dataset_bytes")
    if not records or not total:
        raise HpcioError(f"{path}: config.yaml lacks dataset.records or dataset_bytes")
    s = run.steps
    stats = [(i.get("reader_stats") or {}) for i in run.rank_info if i]
    got = sum(x.get("records", 0) for x in stats)
    faults = sum(x.get("majflt", 0) for x in stats)
    sync = (str(c.get("dist_used", "none")) != "none") or bool(s["straggler_wait"].any())
    xbytes = int((c.get("exchange") or {}).get("bytes") or 0)
    xs = float(np.mean(s["exchange"])) if xbytes and run.ranks > 1 else 0.0
    # the barrier's own cost: what the rank arriving last still waits, step by step
    barrier = fig["barrier_s"] if sync and math.isfinite(fig["barrier_s"]) else 0.0
    return Workload(
        name=run.name, reader=reader, ranks=run.ranks, batch=int(c["batch"]),
        steps=int(s["step"].shape[1]), records=int(records),
        record_bytes=float(total) / int(records), shuffle=c.get("shuffle", "global"),
        seed=int(c.get("seed", 0)), block=int(c.get("block", BLOCK)),
        window=int(c.get("window", WINDOW)), compute_s=fig["compute_s"], rest_s=fig["rest_s"],
        sync=sync, prefetch=int((stats[0].get("prefetch") if stats else None)
                                or c.get("reader_prefetch") or 2),
        steady_steps=_steady(c, stats, int(s["step"].shape[1]), int(c["batch"]) * total
                             / int(records)),
        faults_per_sample=faults / got if got else float("nan"),
        dataset=run.dataset, measured=fig, access=access, exchange_bytes=xbytes,
        exchange_s=xs, cold=c.get("cache") == "cold", ahead=int(c.get("prefetch") or 0),
        barrier_s=barrier, cpu_s_per_sample=fig["cpu_s_per_sample"])


#: what a run measured of its workload, per step: repeats of one point give their median
_MEASURED = ("compute_s", "rest_s", "faults_per_sample", "exchange_s", "steady_steps",
             "prefetch", "barrier_s", "cpu_s_per_sample")


def median_of_repeats(workloads):
    """One workload per point (same reader, shuffle, ranks, plan): repeats of a point
    replay the same plan, so the simulation runs it once and compares it with the median
    of what the repeats measured (per figure; :func:`hpcio.explain.tables.measured`, the
    statistic the report quotes), as interleaved repeats are meant to be read."""
    groups = OrderedDict()
    for w in workloads:
        key = (w.case, w.ranks, w.batch, w.steps, w.records, w.seed, w.dataset, w.sync,
               w.exchange_bytes, w.cold)
        groups.setdefault(key, []).append(w)
    out = []
    for ws in groups.values():
        if len(ws) == 1:
            out.append(ws[0])
            continue
        med = {f: type(getattr(ws[0], f))(measured_value([getattr(w, f) for w in ws]))
               for f in _MEASURED}
        keys = set.intersection(*(set(w.measured) for w in ws))
        measured = {k: measured_value([w.measured[k] for w in ws]) for k in keys
                    if all(isinstance(w.measured[k], (int, float)) for w in ws)}
        out.append(replace(ws[0], name=f"{ws[0].case} n={ws[0].ranks} (median of {len(ws)})",
                           measured=measured, **med))
    return out


class NodeCache:
    """A node's page cache of fixed-size windows, shared by its ranks, least recently used
    out first; ``capacity`` 0 keeps nothing past the record that asked."""

    def __init__(self, capacity_bytes, window):
        self.slots = math.inf if math.isinf(capacity_bytes) else int(capacity_bytes // window)
        self.pages = OrderedDict()
        self.epoch = 0

    def enter(self, epoch):
        """A cold epoch's start: the first of the node's ranks to reach epoch ``epoch``
        empties the cache (the run evicts every node's cache before each epoch)."""
        if epoch > self.epoch:
            self.pages.clear()
            self.epoch = epoch

    def missing(self, windows):
        """The windows of ``windows`` (an int array) not resident, in order; all of them
        become resident."""
        pages, out = self.pages, []
        for w in windows.tolist():
            if w in pages:
                pages.move_to_end(w)
            else:
                out.append(w)
                pages[w] = True
        while len(pages) > self.slots:
            pages.popitem(last=False)
        return np.array(out, dtype=np.int64)
