"""The analysis tables, computed from runs read back (:mod:`hpcio.explain.runs`).

* **A** per dataset x reader x format x ranks, over repeats: step time, stall per step (max
  over ranks: what a synchronous allreduce waits on; mean over ranks), stall fraction and
  its fetch/prep split, straggler wait and exchange fractions, AU, samples/s, MiB/s,
  scaling efficiency against the smallest rank count, and the spread of stall and AU over
  repeats. A point's value is :func:`measured` of its repeats (the median), and that is
  the statistic every "measured" figure of the report and of ``hpcio.simulate`` quotes.
* **B** per run, from its Darshan log, over the dataset's files: bytes and reads per rank by
  module, request sizes, random and misaligned shares, collective MPI-IO, per-rank I/O time
  (PyDarshan's ``agg_time_by_slowest``: the slowest rank's read + write + metadata time),
  metadata time, files opened, **coverage** (bytes Darshan saw / bytes delivered) and the
  DXT time split into exposed (inside a step's wait for its batch) and overlapped.
* **C** per run, the OS's view per sample: faults, context switches, rchar, read_bytes and
  page-cache bytes gained, as far as the run's format records them.

Every figure is a plain float (NaN: not measurable for that run), so the tables go to CSV,
Markdown, HTML and JSON alike.
"""

from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

__all__ = ["Table", "run_figures", "table_a", "table_b", "table_c", "darshan_figures",
           "dataset_reads", "dxt_shifts", "exposure", "SMALL", "measured", "MEASURED",
           "STEADY_PARTS"]

SMALL = 1 << 20  # Drishti's small request: < 1 MiB
# below these a rank's bytes or read time is metadata (an index, a manifest): imbalance
# and stragglers among them are not the data's
_MEANINGFUL_BYTES = 1 << 20
_MEANINGFUL_S = 0.01
_SMALL_BINS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")


@dataclass
class Table:
    name: str                 # file stem: table-a.csv
    title: str
    columns: List[tuple]      # (key, label, format)
    rows: List[Dict] = field(default_factory=list)
    note: str = ""
    empty: str = "(no rows)"  # what the table says when it has no row


def _nan(x):
    return float("nan") if x is None else float(x)


MEASURED = "the median over the point's repeats"


def measured(values):
    """A point's measured value from its repeats' values: the median (:data:`MEASURED`). The
    one statistic of every "measured" figure: Table A, the figures' points, the scaling
    fit's check, the simulation's calibration and validation."""
    return float(np.median(np.asarray(values, float)))


# the step split into parts that add up to it, over the steady steps (AU's steps), percent
# of each rank's wall, the mean over ranks: key -> the step columns it sums
# (hpcio.measure.steps)
STEADY_PARTS = {
    "compute_pct_steady": ("compute",),
    "reads_pct_steady": ("fetch", "stall_other"),   # the own wait outside preprocessing
    "prep_pct_steady": ("prep",),
    "exchange_pct_steady": ("exchange",),
    "straggler_pct_steady": ("straggler_wait",),
    "other_pct_steady": ("h2d", "ckpt", "other"),
}


# --- A ---------------------------------------------------------------------------------


def run_figures(run):
    """One run's step figures (see the module docstring), from its (ranks, steps) arrays;
    {} when it has none. Two views, each named: *every step* is the definition of the run's
    own summary.json and console table (:mod:`hpcio.measure.steps`), *steady* leaves each
    epoch's first step (pipeline start-up) out, as MLPerf Storage's AU rule does."""
    s = run.steps
    if not s:
        return {}
    m = run.measured
    every = np.ones_like(m)
    stall_all = s["fetch"] + s["prep"] + s["stall_other"]
    stall = stall_all[:, m]
    wall, comp = s["wall"][:, m], s["compute"][:, m]
    step = wall.max(axis=0)
    med = np.median(wall, axis=0)
    ratio = np.divide(step, med, out=np.ones_like(step), where=med > 0)
    first = s["step"][0] == 0

    def pct(x, mask):  # each rank's share of its own wall, the mean over ranks (as
        w = s["wall"][:, mask].sum(axis=1)  # summary.json's split: it adds up to 100)
        ok = w > 0
        return 100.0 * float(np.mean(x[:, mask].sum(axis=1)[ok] / w[ok])) if ok.any() \
            else float("nan")

    def rate(x, mask):  # each rank's rate, summed over ranks (DLIO's throughput)
        w = s["wall"][:, mask].sum(axis=1)
        return float((x[:, mask].sum(axis=1)[w > 0] / w[w > 0]).sum())

    def au(mask):  # compute / wall per rank, the mean over ranks
        w = s["wall"][:, mask].sum(axis=1)
        return 100.0 * float(np.mean(s["compute"][:, mask].sum(axis=1)[w > 0] / w[w > 0])) \
            if (w > 0).any() else float("nan")

    return {
        "steps": int(m.sum()),
        "step_s_median": float(np.median(step)),
        "step_s_p95": float(np.percentile(step, 95)),
        "stall_max_s": float(stall.max(axis=0).mean()),
        "stall_mean_s": float(stall.mean()),
        "stall_pct": pct(stall_all, every),
        "fetch_pct": pct(s["fetch"], every),
        "prep_pct": pct(s["prep"], every),
        "stall_other_pct": pct(s["stall_other"], every),
        "straggler_pct": pct(s["straggler_wait"], every),
        "exchange_pct": pct(s["exchange"], every),
        "stall_pct_steady": pct(stall_all, m),
        "fetch_pct_steady": pct(s["fetch"], m),
        **{k: pct(sum(s[c] for c in cols), m) for k, cols in STEADY_PARTS.items()},
        "first_wait_s": float(stall_all[:, first].max()) if first.any() else float("nan"),
        "compute_s": float(comp.mean()),
        "rest_s": float((s["h2d"] + s["exchange"] + s["ckpt"] + s["other"])[:, m].mean()),
        "straggler_s": float(s["straggler_wait"][:, m].mean()),
        "exchange_s": float(s["exchange"][:, m].mean()),
        "other_s": float((s["h2d"] + s["ckpt"] + s["other"])[:, m].mean()),
        "fetch_s": float(s["fetch"][:, m].mean()),
        "prep_s": float(s["prep"][:, m].mean()),
        "stall_other_s": float(s["stall_other"][:, m].mean()),
        "au_pct": au(m),
        "au_all_pct": au(every),
        "samples_s": rate(s["records"], every),
        "mib_s": rate(s["nbytes"], every) / 2 ** 20,
        "bytes_step_rank": float(s["nbytes"][:, m].mean()),
        "straggler_ratio": float(np.median(ratio)),
        "delivered_bytes": float(s["nbytes"].sum()),
        "records": float(s["records"].sum()),
        "barrier_s": barrier_s(s["straggler_wait"], m),
        "cpu_s_per_sample": cpu_per_sample(run.rank_info),
    }


def barrier_s(wait, m):
    """The step barrier's own cost: per steady step the least straggler wait over ranks
    (the rank arriving last waits only for the barrier), the median over steps; NaN for
    one rank or steps that never waited at one (hpcio.train's summary.json
    ``barrier_s_per_step``, the same definition)."""
    if wait.shape[0] < 2 or not wait.any() or not m.any():
        return float("nan")
    return float(np.median(wait[:, m].min(axis=0)))


def cpu_per_sample(rank_info):
    """The ranks' process CPU (getrusage user + system over their epochs, rank-R.json's
    epochs' counters) per record they counted; NaN where a rank did not record it
    (summary.json's ``client_cpu_s_per_sample``, the same definition)."""
    cpu = records = 0.0
    for i in rank_info:
        eps = (i or {}).get("epochs") or []
        if not eps:
            return float("nan")
        for e in eps:
            c = e.get("counters") or {}
            ru = c.get("rusage") or {}
            if "utime" not in ru:
                return float("nan")
            cpu += ru["utime"] + ru.get("stime", 0.0)
            records += (c.get("reader") or {}).get("records", 0)
    return cpu / records if records else float("nan")


def table_a(runs, figures):
    """Table A: runs grouped by (dataset, reader, format, ranks); medians over repeats, and
    with repeats each shown figure's range (``KEY_min``, ``KEY_max``)."""
    groups = {}
    for run in runs:
        f = figures.get(run.path)
        if f:
            groups.setdefault((run.dataset, run.reader, run.format, run.ranks), []).append(f)
    cols = [("reader", "reader", "{}"), ("format", "format", "{}"), ("ranks", "P", "{}"),
            ("repeats", "runs", "{}"), ("stall_pct", "stall % every step", "{:.1f}"),
            ("fetch_pct", "fetch % every step", "{:.1f}"),
            ("prep_pct", "prep % every step", "{:.1f}"),
            ("straggler_pct", "straggler wait % every step", "{:.1f}"),
            ("exchange_pct", "exchange % every step", "{:.1f}"),
            ("stall_pct_steady", "stall % steady", "{:.1f}"),
            ("first_wait_s", "first-step wait s, max", "{:.3f}"),
            ("au_pct", "AU % MLPerf rule", "{:.1f}"), ("au_all_pct", "AU % every step", "{:.1f}"),
            ("samples_s", "samples/s every step", "{:,.0f}"),
            ("mib_s", "MiB/s every step", "{:,.1f}"),
            ("step_s_median", "step s median, steady", "{:.4f}"),
            ("step_s_p95", "step s p95, steady", "{:.4f}"),
            ("stall_max_s", "stall/step max-rank s, steady", "{:.4f}"),
            ("stall_mean_s", "stall/step mean-rank s, steady", "{:.4f}"),
            ("barrier_ms", "barrier ms/step (last rank's wait)", "{:.2f}"),
            ("cpu_ms_per_sample", "client CPU ms/sample", "{:.3f}"),
            ("efficiency", "scaling eff.", "{:.2f}"), ("dataset", "dataset", "{}")]
    rows = []
    for (ds, reader, fmt, ranks), fs in sorted(groups.items()):
        row = {"dataset": ds, "reader": reader, "format": fmt, "ranks": ranks,
               "repeats": len(fs)}
        for k in fs[0]:
            v = [f[k] for f in fs]
            row[k] = measured(v)
            if len(fs) > 1 and any(k == c[0] for c in cols):
                row[f"{k}_min"], row[f"{k}_max"] = float(min(v)), float(max(v))
        row["barrier_ms"] = 1000 * row.get("barrier_s", float("nan"))
        row["cpu_ms_per_sample"] = 1000 * row.get("cpu_s_per_sample", float("nan"))
        rows.append(row)
    base = {}
    for row in rows:  # sorted by ranks within a series: the first is the smallest
        key = (row["dataset"], row["reader"], row["format"])
        b = base.setdefault(key, row)
        row["efficiency"] = (row["samples_s"] / row["ranks"]) / (b["samples_s"] / b["ranks"]) \
            if b["samples_s"] else float("nan")
    return Table("table-a", "A: per reader x format x ranks (medians over repeats)", cols,
                 rows, "Every step: the definition of the run's summary.json and console "
                       "table (hpcio.measure.steps). Stall: each rank's own wait for its "
                       "batch; straggler wait: the time it then waits in the gradient "
                       "exchange for the slowest rank (0 for runs without one). Steady: "
                       "each epoch's first step (the pipeline's start-up) left out, as "
                       "MLPerf Storage's AU rule does. "
                       "Stall per step: the mean over steady steps of the max (or mean) over "
                       "ranks. First-step wait: the longest wait for an epoch's first batch. "
                       "Scaling efficiency: samples/s per rank against the smallest rank "
                       "count of the same reader and data. Barrier per step: the least "
                       "straggler wait over ranks (the rank arriving last waits for the "
                       "barrier alone), the median over steady steps: what synchronous steps "
                       "cost however fast the storage. Client CPU per sample: the ranks' "
                       "process CPU (getrusage user + system over their epochs) per record. "
                       "With repeats: median (min-max).")


# --- B ---------------------------------------------------------------------------------


def _per_rank(records, values, nprocs):
    """Sum of ``values`` per rank (0..nprocs-1; shared records, rank -1, split evenly)."""
    own = records.rank >= 0
    out = np.bincount(records.rank[own], weights=values[own], minlength=nprocs)[:nprocs]
    return out + values[~own].sum() / max(nprocs, 1)


def dataset_reads(run, log):
    """The log's DXT reads of the run's dataset, at the lowest layer traced (POSIX under
    MPI-IO)."""
    d = log.dxt[~log.dxt["write"] & np.isin(log.dxt["id"], log.file_ids(run.data_path))]
    posix = d["module"] == 0
    return d[posix] if posix.any() else d


def dxt_shifts(run, log):
    """Each rank's Darshan start, unix seconds on the rank's own clock: DXT time + this =
    the rank's clock. The log keeps only the smallest start (a minimum over the nodes'
    clocks); each rank's stamp of MPI_Init's return (``mpi_init_unix``), less the smallest
    stamp, restores the rest (hpcio.measure.clock says why). Runs without the stamps get
    the log's start for every rank, off by the ranks' start skew and the nodes' offsets."""
    stamps = [i.get("mpi_init_unix") if i else None for i in run.rank_info]
    if stamps and all(isinstance(x, (int, float)) and np.isfinite(x) for x in stamps):
        stamps = np.asarray(stamps, dtype=float)
        return log.start + (stamps - stamps.min())
    return np.full(len(run.rank_info), log.start)


def exposure(run, log):
    """(exposed, overlapped, outside): seconds of the log's dataset reads per (rank, step)
    inside the step's wait for its batch (exposed) and the rest of them (overlapped), and
    the seconds of reads before the first step or after the last (opening the data,
    reading its index). A read counts in the step its midpoint falls in. None without DXT
    or without the ranks' step origins (older run directories)."""
    s = run.steps
    origins = [i.get("origin_unix") if i else None for i in run.rank_info]
    if not s or not len(log.dxt) or any(o is None for o in origins):
        return None
    d = dataset_reads(run, log)
    shifts = dxt_shifts(run, log) - np.asarray(origins, dtype=float)
    ranks, steps = s["t0"].shape
    exposed, overlapped = np.zeros((ranks, steps)), np.zeros((ranks, steps))
    outside = 0.0
    for r in range(min(ranks, log.nprocs)):
        seg = d[d["rank"] == r]
        if not len(seg):
            continue
        a, b = seg["start"] + shifts[r], seg["end"] + shifts[r]
        t0 = s["t0"][r]
        w1 = t0 + s["fetch"][r] + s["prep"][r] + s["stall_other"][r]
        # waited seconds before time t: a piecewise-linear function through the windows
        knots = np.column_stack([t0, w1]).ravel()
        waited = np.concatenate([[0.0], np.cumsum(w1 - t0)]).repeat(2)[1:-1]
        inside = np.interp(b, knots, waited) - np.interp(a, knots, waited)
        k = np.searchsorted(t0, (a + b) / 2, side="right") - 1
        keep = (k >= 0) & ((a + b) / 2 <= t0[-1] + s["wall"][r, -1])
        exposed[r] = np.bincount(k[keep], weights=inside[keep], minlength=steps)
        overlapped[r] = np.bincount(k[keep], weights=(b - a - inside)[keep], minlength=steps)
        outside += float((b - a)[~keep].sum())
    return exposed, overlapped, outside


def darshan_figures(run, log, delivered):
    """Table B's figures for one log of ``run`` (see the module docstring)."""
    ids = log.file_ids(run.data_path)
    P = log.nprocs
    out = {"log": log.path, "counter_reader": log.counter_reader or "none",
           "partial": ",".join(log.partial)}
    mods = {m: rec.select(np.isin(rec.id, ids)) for m, rec in log.counters.items()}
    for mod, key in (("POSIX", "POSIX"), ("STDIO", "STDIO"), ("MPI-IO", "MPIIO"),
                     ("H5D", "H5D")):
        rec = mods.get(mod)
        if rec is None:
            continue
        tag = key.lower()
        out[f"{tag}_bytes_rank"] = rec.get(f"{key}_BYTES_READ").sum() / P
        reads = rec.get(f"{key}_READS") if key != "MPIIO" else (
            rec.get("MPIIO_INDEP_READS") + rec.get("MPIIO_COLL_READS")
            + rec.get("MPIIO_SPLIT_READS") + rec.get("MPIIO_NB_READS"))
        out[f"{tag}_reads_rank"] = reads.sum() / P
    px = mods.get("POSIX")
    if px is not None and len(px):
        reads = px.get("POSIX_READS").sum()
        nbytes = px.get("POSIX_BYTES_READ").sum()
        small = sum(px.get(f"POSIX_SIZE_READ_{b}").sum() for b in _SMALL_BINS)
        seq, consec = px.get("POSIX_SEQ_READS").sum(), px.get("POSIX_CONSEC_READS").sum()
        rw = reads + px.get("POSIX_WRITES").sum()
        t = (px.get("POSIX_F_READ_TIME") + px.get("POSIX_F_WRITE_TIME")
             + px.get("POSIX_F_META_TIME"))
        per_rank = _per_rank(px, t, P)
        per_rank_bytes = _per_rank(px, px.get("POSIX_BYTES_READ"), P)
        meta = _per_rank(px, px.get("POSIX_F_META_TIME"), P)
        out.update({
            "reads": reads, "bytes_read": nbytes,
            "mean_request": nbytes / reads if reads else float("nan"),
            "small_reads": small,
            "small_share": small / reads if reads else float("nan"),
            # Drishti's split: consecutive, sequential (increasing, not adjacent), random
            "random_share": max(reads - seq, 0) / reads if reads else float("nan"),
            "misaligned_share": px.get("POSIX_FILE_NOT_ALIGNED").sum() / rw if rw
            else float("nan"),
            "consecutive_share": consec / reads if reads else float("nan"),
            "agg_time_by_slowest": float(per_rank.max()),
            "slowest_rank": int(per_rank.argmax()), "fastest_rank": int(per_rank.argmin()),
            "io_time_cv": float(per_rank.std() / per_rank.mean()) if per_rank.mean() > 0
            else float("nan"),
            "rank_bytes_imbalance": float((per_rank_bytes.max() - per_rank_bytes.min())
                                          / per_rank_bytes.max())
            if per_rank_bytes.max() >= _MEANINGFUL_BYTES else float("nan"),
            "meta_s_rank_max": float(meta.max()),
            "files_opened": int(len(np.unique(px.id[px.get("POSIX_OPENS") > 0]))),
            "opens_rank": px.get("POSIX_OPENS").sum() / P,
            "mmaps": px.get("POSIX_MMAPS", unmonitored=np.nan).sum(),
            "straggler_share": _stragglers(px),
        })
    mp = mods.get("MPI-IO")
    if mp is not None and len(mp):
        out["mpiio_coll_reads"] = mp.get("MPIIO_COLL_READS").sum()
        out["mpiio_indep_reads"] = mp.get("MPIIO_INDEP_READS").sum()
    seen = out.get("bytes_read", out.get("mpiio_bytes_rank", float("nan")) * P)
    out["coverage"] = seen / delivered if delivered else float("nan")
    return out


def _stragglers(px):
    """Drishti's shared-file stragglers, from per-rank records: for each file read by more
    than one rank (for 10 ms or more), (slowest - fastest rank's read time) / slowest; the
    worst file's."""
    own = px.rank >= 0
    ids, inv = np.unique(px.id[own], return_inverse=True)
    if not len(ids):
        return float("nan")
    t = px.get("POSIX_F_READ_TIME")[own]
    n = np.bincount(inv, minlength=len(ids))
    hi = np.full(len(ids), -np.inf)
    lo = np.full(len(ids), np.inf)
    np.maximum.at(hi, inv, t)
    np.minimum.at(lo, inv, t)
    shared = (n > 1) & (hi >= _MEANINGFUL_S)
    return float(((hi - lo)[shared] / hi[shared]).max()) if shared.any() else float("nan")


def table_b(runs, figures):
    """Table B: one row per (run, log) with Darshan figures; also fills
    ``figures[run.path]`` with ``darshan`` (the first log's) and the DXT split."""
    rows = []
    for run in runs:
        f = figures.get(run.path) or {}
        delivered = f.get("delivered_bytes", 0.0)
        for log in run.logs:
            d = darshan_figures(run, log, delivered)
            ex = exposure(run, log)
            if ex is not None:
                e, o, out = ex
                m = run.measured
                d.update(dxt_io_s=e.sum() + o.sum(), dxt_exposed_s=e[:, m].sum(),
                         dxt_exposed_first_s=e[:, ~m].sum(), dxt_overlapped_s=o.sum(),
                         dxt_outside_s=out)
            rows.append({"run": run.name, "reader": run.reader, "ranks": run.ranks, **d})
            f.setdefault("darshan", d)
    cols = [("run", "run", "{}"), ("reader", "reader", "{}"), ("ranks", "P", "{}"),
            ("posix_bytes_rank", "POSIX B/rank", "{:,.0f}"),
            ("posix_reads_rank", "POSIX reads/rank", "{:,.0f}"),
            ("stdio_bytes_rank", "STDIO B/rank", "{:,.0f}"),
            ("mpiio_bytes_rank", "MPI-IO B/rank", "{:,.0f}"),
            ("mpiio_reads_rank", "MPI-IO reads/rank", "{:,.0f}"),
            ("h5d_bytes_rank", "H5D B/rank", "{:,.0f}"),
            ("mean_request", "mean request B", "{:,.0f}"),
            ("small_share", "small (<1 MiB) share", "{:.2f}"),
            ("random_share", "random share", "{:.2f}"),
            ("misaligned_share", "misaligned share", "{:.2f}"),
            ("mpiio_coll_reads", "MPI-IO coll reads", "{:,.0f}"),
            ("mpiio_indep_reads", "MPI-IO indep reads", "{:,.0f}"),
            ("agg_time_by_slowest", "agg_time_by_slowest s", "{:.4f}"),
            ("slowest_rank", "slowest rank", "{}"), ("fastest_rank", "fastest rank", "{}"),
            ("io_time_cv", "CV of rank I/O time", "{:.2f}"),
            ("meta_s_rank_max", "metadata s (max rank)", "{:.4f}"),
            ("files_opened", "files opened", "{}"), ("mmaps", "mmaps", "{:,.0f}"),
            ("coverage", "coverage", "{:.3f}"),
            ("dxt_exposed_first_s", "DXT exposed s, first steps", "{:.3f}"),
            ("dxt_exposed_s", "DXT exposed s, other steps", "{:.3f}"),
            ("dxt_overlapped_s", "DXT overlapped s", "{:.3f}"),
            ("dxt_outside_s", "DXT outside steps s", "{:.3f}"),
            ("counter_reader", "read with", "{}")]
    return Table("table-b", "B: what Darshan saw, per run (the dataset's files only)", cols,
                 rows, note=_B_NOTE, empty=_untraced(runs))


_B_NOTE = ("Coverage = bytes Darshan's POSIX module saw read from the dataset's "
                       "files / bytes the reader delivered to training: below 1 some I/O is "
                       "invisible to Darshan (memory-mapped reads), above 1 the library read "
                       "more than it delivered. DXT exposed: read time inside the steps' waits "
           "for their batch (measured steps).")


def _untraced(runs):
    """What an empty Table B says: that the runs were not traced (or their logs were
    unusable) and how to trace them."""
    traced = [r for r in runs if r.config.get("darshan") or r.env.get("darshan")]
    if traced:
        return ("No usable Darshan log: the traced runs' logs are missing or were left out "
                "(see Gaps in the input).")
    return ("None of these runs was traced with Darshan, so there is nothing to show here. "
            "To trace a run: python -m hpcio.train ... --darshan LIB --darshan-dxt (also "
            "python -m hpcio.sweep ... --darshan LIB, python -m hpcio.demo --darshan LIB), "
            "with LIB the libdarshan.so built against mpi4py's MPI by scripts/darshan-local.sh "
            "build (.darshan/lib/libdarshan.so); on Slurm, set HPCIO_DARSHAN=LIB for the "
            "jobs/ templates. Each log lands in its run's darshan/.")


# --- C ---------------------------------------------------------------------------------

# column: (label, value from an epoch's counters, scale); summed over ranks and epochs, per
# sample. "os" is hpcio.measure.probes.os_view (sleep = wall - user - system CPU seconds).
OS_COUNTERS = {
    "minflt": ("minor faults", lambda c: c["rusage"]["minflt"], 1),
    "majflt": ("major faults", lambda c: c["rusage"]["majflt"], 1),
    "nvcsw": ("voluntary ctx switches", lambda c: c["rusage"]["nvcsw"], 1),
    "nivcsw": ("involuntary ctx switches", lambda c: c["rusage"]["nivcsw"], 1),
    "sleep_us": ("sleep us", lambda c: c["os"]["sleep_s"], 1e6),
    "cpu_us": ("user+system CPU us", lambda c: c["os"]["user_s"] + c["os"]["system_s"], 1e6),
    "rchar": ("rchar B", lambda c: c["io"]["rchar"], 1),
    "read_bytes": ("read_bytes B", lambda c: c["io"]["read_bytes"], 1),
    "cache_gained": ("page cache gained B", lambda c: c["reader"]["cache_gained_bytes"], 1),
    "opens": ("reader opens", lambda c: c["reader"]["opens"], 1),
}


def _counter(epochs, get):
    """Sum of one counter over epochs, or None when an epoch lacks it (or none is left:
    a rank-R.json whose epochs were unusable)."""
    if not epochs:
        return None
    try:
        return sum(float(get(e["counters"])) for e in epochs)
    except (KeyError, TypeError):
        return None


def table_c(runs, figures):
    """Table C: the OS's counters per sample, and which ones a run's format lacks."""
    rows = []
    for run in runs:
        f = figures.get(run.path) or {}
        infos = [i for i in run.rank_info if i]
        own = [((i.get("summary") or {}).get("all") or {}).get("records") for i in infos]
        records = (sum(own) if own and None not in own else 0) or f.get("records", 0.0)
        row = {"run": run.name, "reader": run.reader, "ranks": run.ranks}
        lacking = []
        for key, (label, get, scale) in OS_COUNTERS.items():
            vals = [_counter(i.get("epochs") or [], get) for i in infos]
            if not infos or any(v is None for v in vals):
                row[key] = float("nan")
                lacking.append(label)
            else:
                row[key] = scale * sum(vals) / records if records else float("nan")
        row["lacks"] = ", ".join(lacking)
        f["os"] = row
        rows.append(row)
    cols = [("run", "run", "{}"), ("reader", "reader", "{}"), ("ranks", "P", "{}")] + \
        [(k, f"{label}/sample", "{:,.2f}") for k, (label, _, _) in OS_COUNTERS.items()] + \
        [("lacks", "not recorded by this run's format", "{}")]
    return Table("table-c", "C: the OS's view per sample delivered (all ranks, all epochs)",
                 cols, rows, "From each rank's rank-R.json: getrusage and /proc/self/io "
                             "deltas over each epoch, sleep (the epoch's wall time off a CPU) "
                             "and the reader's page-cache residency gained; older run "
                             "directories lack some of them.")
