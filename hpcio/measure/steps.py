"""Per-step accounting: the step log every rank keeps, and each rank's totals.

Step accounting (per rank, per step; ``time.perf_counter`` stamps taken back to back, so
the components add up to the step's wall time exactly)::

    t0 step start ─ wait for the next prepared batch ─ t1 ─ host-to-device copy ─ t2
       ─ forward + backward + optimiser step (device-synchronised; DDP's gradient
         allreduce inside it; for ``emulate`` the sleep) ─ t3 ─ emulate's step end:
         barrier ─ t4 ─ allreduce, if asked ─ t5 ─ checkpoint, if due ─ t6 ─ bookkeeping ─ t7
    and t7 is the next step's t0.

==============  =============================================================================
component       definition
==============  =============================================================================
stall           t1 - t0: this rank's *own wait*, training blocked for its batch; split into
fetch           the part of [t0, t1] that overlaps the batch's reader call [t_fetch0, t_fetch1]
prep            the part of [t0, t1] that overlaps its preprocessing [t_fetch1, t_prep1]
stall_other     stall - fetch - prep: hand-over, queueing
h2d             t2 - t1: host-to-device copy (synchronised on GPU; ~0 on CPU)
compute         t3 - t2: what an accelerator would be busy with
straggler_wait  t4 - t3: waiting in the exchange for the slowest rank to arrive: a zero-byte
                barrier that ends when the last rank has entered it
exchange        t5 - t4: the gradient allreduce itself, every rank present (emulate: 0
                unless asked for; on --exchange-fabric the emulated allreduce's sleep)
ckpt            t6 - t5: checkpoint written in this step (0 in most steps; the model's:
                rank 0 only; a --checkpoint-workload's: every rank, async: copy + wait)
other           t7 - t6: harness bookkeeping (records, stop vote, progress bar)
wall            t7 - t0 = fetch + prep + stall_other + h2d + compute + straggler_wait
                + exchange + ckpt + other
==============  =============================================================================

Why a barrier before the allreduce: a blocking allreduce mixes two things, waiting for the
last rank and moving the bytes. The barrier separates them on each rank's own clock, with
no comparison of clocks across nodes (which do not share one). Its price is one
small-message collective per step, charged to ``straggler_wait``: a job whose ranks arrive
together shows that floor (gloo: 69 us in a tight loop, 1.2-1.3 ms per step on a busy
2-core VM where a rank blocked in it must be woken; benchmarks/design.md). A data-parallel
job loses the *maximum* over ranks of the own wait each step; the straggler wait is where
the faster ranks pay for it. Both collectives go over gloo by default, not MPI: with
MPICH's global lock an MPI barrier would also wait for the coordinated reader's MPI-IO
reads on its I/O thread, and charge them to the straggler wait
(:mod:`hpcio.train.exchange`).

Where each is measured: ``emulate`` ends every step in the barrier, as DLIO's step does, so
``straggler_wait`` is measured and ``exchange`` is 0 by default (its compute time stands for
the whole accelerator step, overlapped allreduce included); asked for a gradient allreduce
(:mod:`hpcio.train.exchange`), ``exchange`` is that allreduce after the barrier: measured
over its transport, or, on a declared ``--exchange-fabric``, the sleep for the allreduce's
time there (as the rank saw it: a loaded machine wakes it late). Real models
under DDP overlap the allreduce with backward, bucket by bucket: the exchange and the wait
for stragglers happen inside ``compute`` and cannot be cut out of it without changing what
is measured, so there ``straggler_wait`` and ``exchange`` are 0 and ``compute`` includes
them (Horovod likewise, in the optimiser step). What can be measured there honestly is
``first_bucket_wait`` (not a component: it lies inside ``compute``): from this rank's first
gradient bucket being ready in backward to that bucket's allreduce done, DDP on gloo only
(:class:`hpcio.train.dist.FirstBucket`). On the ranks that reach backward early it is their
wait for the slowest one to arrive, plus one small bucket's transfer; how much of it
backward hid behind its own work, and the wait for later buckets, cannot be told apart
from compute. NCCL completes the allreduce on the GPU's stream: not timed there (0).

With ``--exchange-model none`` the ranks step independently and ``straggler_wait`` and
``exchange`` are exactly 0 (t3 = t4 = t5).

Summary figures (:func:`hpcio.explain.summary.summarize`), computed at the end from the
ranks' :func:`rank_summary`. Throughput and the time split count **every step** (whole
epochs); AU is given both ways, each labelled:

* **samples/s** = sum over ranks of records_r / wall_r over every step of every epoch
  (DLIO's throughput: each rank's rate, summed).
* **MiB/s** = the same with record bytes delivered to the trainer (measured per batch,
  not records x a nominal size), / 2**20.
* **AU, every step** (``au_percent_all_steps``; accelerator utilisation, %) = compute /
  wall over every step; per rank AU_r = sum(compute) / sum(wall), the run's AU the mean
  over ranks (DLIO averages ranks the same way).
* **AU, MLPerf Storage's rule** (``au_percent``) = the same with the **first step of
  every epoch excluded** (DLIO's ``metric_exclude_start_steps = 1``): it carries pipeline
  start-up (the first read cannot overlap any compute). If no step is left after the
  exclusion (1-step epochs), all steps are used and the summary says so
  (``au_excludes_first_step: false``). With short epochs the rule hides most of a
  reader's start-up cost, hence the figure beside it and the next one.
* **first-step wait** = the stall of each epoch's first step (the time to the epoch's
  first batch): per epoch, mean and max over ranks (``per_epoch``), and mean and max over
  ranks and epochs (``first_step_wait_s_mean`` / ``_max``).
* **first-bucket wait** (``first_bucket_wait_s_mean``, DDP on gloo) = first_bucket_wait
  per step, the mean over ranks and every step; 0 where not measured.
* **stall %** = each rank's stall (own wait) over its wall time, every step, the mean
  over ranks, with its fetch / prep / stall_other split; likewise **straggler wait %**,
  exchange %, h2d %, compute %, ckpt %, other %. They add up to 100%, and compute % is
  the AU over every step (the same mean over ranks). The console prints this split, and
  beside it only the AU by MLPerf Storage's rule, labelled so
  (:func:`hpcio.explain.summary.figures_line`).
* **slowest vs fastest rank**: each rank's time over all epochs (sum of its step walls,
  all steps: ``epoch_time_s_*``); max / min over ranks and which ranks.
* **epoch time** (``epoch_s_mean``) = one epoch's wall time on its slowest rank, the mean
  over epochs.

Changed in summary.json: the ``*_percent`` time split was the sum over ranks over the sum
of their walls; it is the mean over ranks of each rank's share now (the same where ranks'
walls are equal, as synchronous steps make them), so that compute % is the AU over every
step. Before that: ``samples_per_s``, ``mib_per_s`` and the ``*_percent``
time split used to leave out each epoch's first step, as AU does; they count every step
now. ``au_percent`` (and its ``_min``, ``_max``, ``_per_rank``, ``per_epoch``) keeps
MLPerf Storage's rule; ``au_percent_all_steps`` (same companions) and the first-step wait
are new. Later: ``straggler_wait``, ``exchange`` (components) and ``first_bucket_wait``
joined the step arrays, their ``*_percent`` and ``first_bucket_wait_s_mean`` the summary;
run directories from before them read back with zeros (their ranks did not exchange).
"""

import time

import numpy as np

__all__ = ["STEP_FIELDS", "COMPONENTS", "SINCE_EXCHANGE", "StepLog", "split_stall",
           "rank_summary"]

STEP_FIELDS = ("epoch", "step", "t0", "wall", "fetch", "prep", "stall_other", "h2d",
               "compute", "straggler_wait", "exchange", "ckpt", "other", "records",
               "nbytes", "fetch_s", "prep_s", "first_bucket_wait")
COMPONENTS = ("fetch", "prep", "stall_other", "h2d", "compute", "straggler_wait",
              "exchange", "ckpt", "other")
# fields older run directories lack: they had no exchange, so theirs were 0
SINCE_EXCHANGE = ("straggler_wait", "exchange", "first_bucket_wait")
_COL = {f: i for i, f in enumerate(STEP_FIELDS)}


def split_stall(t0, t1, f0, f1, p1):
    """(fetch, prep, other) parts of the wait [t0, t1]: its overlap with the batch's reader
    call [f0, f1] and with its preprocessing [f1, p1]; the rest is hand-over/queueing."""
    fetch = max(0.0, min(t1, f1) - max(t0, f0))
    prep = max(0.0, min(t1, p1) - max(t0, f1))
    return fetch, prep, (t1 - t0) - fetch - prep


class StepLog:
    """This rank's step records in one preallocated float64 array (one row per step):
    recording a step is one row assignment, no growing Python lists on the hot path.
    ``t0`` is relative to ``origin`` (the run's start on this rank). ``lead`` (not saved)
    places the fetch and prep parts inside the wait for a trace: where the first of them
    starts, seconds after t0 (the wait before it is hand-over too)."""

    def __init__(self, capacity, origin=None):
        self.rows = np.zeros((max(int(capacity), 1), len(STEP_FIELDS)), dtype=np.float64)
        self.lead = np.zeros(len(self.rows))
        self.n = 0
        self.origin = time.perf_counter() if origin is None else origin

    def add(self, epoch, step, t0, t1, t2, t3, t4, t5, t6, t7, f0, f1, p1, records, nbytes,
            fetch_s=0.0, prep_s=0.0, first_bucket_wait=0.0):
        """Record one step from its time stamps (see the module docstring)."""
        if self.n == len(self.rows):  # only if the plan was longer than announced
            self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
            self.lead = np.concatenate([self.lead, np.zeros_like(self.lead)])
        fetch, prep, other = split_stall(t0, t1, f0, f1, p1)
        if fetch or prep:
            self.lead[self.n] = max(0.0, (f0 if fetch else f1) - t0)
        self.rows[self.n] = (epoch, step, t0 - self.origin, t7 - t0, fetch, prep, other,
                             t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, records,
                             nbytes, fetch_s, prep_s, first_bucket_wait)
        self.n += 1

    def column(self, name):
        return self.rows[:self.n, _COL[name]]

    def arrays(self):
        """Named columns (ints where the field is a count), for ``np.savez``. Safe on
        another thread while steps are added: ``n`` is read before the rows, and
        :meth:`add` bumps it only after its row is written."""
        n = self.n
        rows = self.rows[:n]
        out = {}
        for f in STEP_FIELDS:
            col = rows[:, _COL[f]]
            out[f] = col.astype(np.int64) if f in ("epoch", "step", "records",
                                                     "nbytes") else col.copy()
        return out


def _included(log_epoch, log_step, first_steps_excluded=True):
    """Mask of the steps that count towards ``au`` (MLPerf Storage's rule): all but each
    epoch's first step."""
    if not first_steps_excluded:
        return np.ones(len(log_step), dtype=bool)
    return log_step != 0


def rank_summary(arrays, exclude_first=True):
    """This rank's totals from its step arrays (see :meth:`StepLog.arrays`): small,
    so ranks can gather them at the end. ``all`` sums every step, ``measured`` the steps
    of MLPerf Storage's AU rule; ``au`` / ``au_all_steps`` are the two AUs."""
    step, epoch = arrays["step"], arrays["epoch"]
    arrays = dict({c: np.zeros(len(step)) for c in SINCE_EXCHANGE}, **arrays)
    mask = _included(epoch, step, exclude_first)
    if exclude_first and not mask.any():
        mask = np.ones(len(step), dtype=bool)
        exclude_first = False
    out = {"steps": int(len(step)), "steps_measured": int(mask.sum()),
           "au_excludes_first_step": bool(exclude_first)}
    for key, m in (("all", np.ones(len(step), dtype=bool)), ("measured", mask)):
        d = {c: float(arrays[c][m].sum()) for c in COMPONENTS + ("wall", "first_bucket_wait")}
        d["records"] = int(arrays["records"][m].sum())
        d["nbytes"] = int(arrays["nbytes"][m].sum())
        out[key] = d
    stall = arrays["fetch"] + arrays["prep"] + arrays["stall_other"]
    epochs = []
    for e in np.unique(epoch):
        em = epoch == e
        mm = em & mask
        wall_m = float(arrays["wall"][mm].sum())
        wall_e = float(arrays["wall"][em].sum())
        first = em & (step == 0)
        epochs.append({"epoch": int(e), "steps": int(em.sum()), "wall": wall_e,
                       "records": int(arrays["records"][em].sum()),
                       "nbytes": int(arrays["nbytes"][em].sum()),
                       "au": float(arrays["compute"][mm].sum() / wall_m) if wall_m else 0.0,
                       "au_all_steps": (float(arrays["compute"][em].sum() / wall_e)
                                        if wall_e else 0.0),
                       "first_step_wait": (float(stall[first].sum()) if first.any()
                                           else None),
                       "stall": float(stall[em].sum()),
                       "straggler_wait": float(arrays["straggler_wait"][em].sum())})
    out["epochs"] = epochs
    m = out["measured"]
    out["au"] = m["compute"] / m["wall"] if m["wall"] else 0.0
    a = out["all"]
    out["au_all_steps"] = a["compute"] / a["wall"] if a["wall"] else 0.0
    out["epoch_time"] = out["all"]["wall"]
    return out


