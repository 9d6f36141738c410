"""What the report says about checkpoints: figures and findings from checkpoint run
directories (``python -m hpcio.checkpoint run``) and from training runs that checkpoint an
MLPerf Storage layout (``hpcio.train --checkpoint-every N --checkpoint-workload ...``).

A checkpoint run directory holds ``checkpoint.yaml`` (the resolved options: writer, ranks,
checkpoint ``dir``), ``env.json``, ``summary.json`` (per checkpoint every rank's write and
read seconds) and, when traced, ``darshan/*.darshan`` (put there by whoever traced it).
A training run's figures come from its ``summary.json`` ``checkpoints``, each rank's
``rank-R.json`` checkpoint records and ``rank-R.npz`` step columns ``ckpt`` and ``wall``.

The Darshan figures count only the files under the checkpoint directory: the sizes of the
POSIX writes (``POSIX_SIZE_WRITE_*``) and MPI-IO's (``MPIIO_SIZE_WRITE_AGG_*``), the POSIX
operations Darshan found unaligned to ``POSIX_FILE_ALIGNMENT`` (the file system's block or
stripe as Darshan read it), the files written, opens and metadata seconds per checkpoint.
Each finding states its numbers and where each came from; the rules are a registry
(:data:`CKPT_RULES`) of :class:`hpcio.explain.findings.Rule`.
"""

import glob
import json
import math
import os
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import yaml

from ..errors import HpcioError
from ..measure.darshanlog import read_log
from .findings import Finding, Rule
from .tables import SMALL, Table

__all__ = ["CkptRun", "is_checkpoint_run", "load_checkpoint_run", "split_inputs",
           "from_training", "ckpt_figures", "CKPT_RULES", "ckpt_findings", "ckpt_table"]

CONFIG = "checkpoint.yaml"
SOURCE = "checkpoint"
_WRITE_BINS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M",
               "10M_100M", "100M_1G", "1G_PLUS")
_SMALL_BINS = _WRITE_BINS[:5]  # under SMALL (1 MiB), Drishti's small request

# each rule's threshold, written here only
SMALL_WRITE_SHARE, SMALL_WRITES = 0.10, 100
UNALIGNED_SHARE = 0.10
META_SHARE = 0.10
SLOW_RANK = 1.30
STALL_PCT = 5.0


@dataclass
class CkptRun:
    """One run's checkpoints: what hpcio recorded per rank, and Darshan's logs."""

    path: str
    kind: str                    # "checkpoint" (hpcio.checkpoint run) or "training"
    writer: str
    ranks: int
    directory: str               # where the checkpoints were written
    size_bytes: int
    names: List[str]             # one per checkpoint
    write_rank_s: List[list]     # per checkpoint: every rank's write seconds (or [])
    read_rank_s: List[list] = field(default_factory=list)
    rate_mean: Optional[float] = None    # GiB/s, the mean of the per-checkpoint rates
    mode: str = "sync"
    stall: Optional[dict] = None         # training: ckpt and wall seconds, per rank
    align: Optional[int] = None          # the coordinated writer's region alignment
    logs: list = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def name(self):
        return os.path.basename(os.path.normpath(self.path))


def is_checkpoint_run(path):
    return os.path.isfile(os.path.join(path, CONFIG))


def _sweep_runs(path):
    """The checkpoint run directories a sweep's ``sweep.json`` names as done (a sweep of
    ``--checkpoint-writer``), or [] (a train sweep, or a record it cannot read)."""
    try:
        with open(os.path.join(path, "sweep.json")) as f:
            runs = json.load(f).get("runs") or []
    except (OSError, ValueError, AttributeError):
        return []
    out = []
    for r in runs:
        d = (r or {}).get("run_dir") or ""
        if not os.path.isdir(d):  # a sweep moved as a whole: its runs moved with it
            d = os.path.join(path, "runs", os.path.basename(d))
        if r.get("status") == "done" and is_checkpoint_run(d):
            out.append(os.path.abspath(d))
    return out


def split_inputs(paths):
    """(checkpoint run directories, the other inputs): a checkpoint run directory given,
    the done runs of a checkpoint sweep, or those inside a directory given (that directory
    stays an input when it holds anything else hpcio.analyze reads)."""
    ckpts, rest = [], []
    for p in paths:
        if is_checkpoint_run(p):
            ckpts.append(os.path.abspath(p))
            continue
        swept = _sweep_runs(p)
        if swept:
            ckpts += swept
            continue
        subs = sorted(d for d in glob.glob(os.path.join(p, "*")) if is_checkpoint_run(d)
                      or _sweep_runs(d))
        for d in subs:
            ckpts += [os.path.abspath(d)] if is_checkpoint_run(d) else _sweep_runs(d)
        others = [d for d in glob.glob(os.path.join(p, "*"))
                  if os.path.isdir(d) and d not in subs]
        if not subs or others or not os.path.isdir(p):
            rest.append(p)
    return ckpts, rest


def _logs(c, files):
    """The run's Darshan logs of this program and world size (others: a problem each)."""
    for p in files:
        try:
            log = read_log(p, dxt=False)
        except HpcioError as e:
            c.problems.append(f"{e}; left out")
            continue
        if "hpcio.checkpoint" not in log.exe and "hpcio.train" not in log.exe:
            c.problems.append(f"{p}: a log of another program ({log.exe[:80]!r}); left out")
        elif log.nprocs != c.ranks:
            c.problems.append(f"{p}: a log of another run ({log.nprocs} ranks, this run has "
                              f"{c.ranks}); left out")
        elif log.counter_reader is None:
            c.problems.append(f"{p}: no Darshan counter reader (install hpcio[analysis]); "
                              f"its counters are left out")
        else:
            c.logs.append(log)
    if not files:
        c.notes.append("not traced with Darshan (no darshan/*.darshan): the checkpoint "
                       "findings use hpcio's own records only")


def _seconds(v):
    """Every rank's seconds of one checkpoint, or [] when the record holds no list."""
    return v if isinstance(v, list) else []


def load_checkpoint_run(path):
    """A checkpoint run directory read back; HpcioError (one line) when it cannot be."""
    path = os.path.abspath(path)
    try:
        with open(os.path.join(path, CONFIG)) as f:
            config = yaml.safe_load(f)
        with open(os.path.join(path, "summary.json")) as f:
            summary = json.load(f)
    except FileNotFoundError as e:
        raise HpcioError(f"{e.filename}: missing: the checkpoint run did not finish") \
            from None
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise HpcioError(f"{path}: checkpoint run unreadable ({e})") from None
    if not isinstance(config, dict) or not isinstance(summary, dict) \
            or summary.get("source") != "hpcio.checkpoint":
        raise HpcioError(f"{path}: not a run directory of hpcio.checkpoint run")
    per = summary.get("checkpoints") or []
    if not isinstance(per, list) or not all(isinstance(x, dict) for x in per):
        raise HpcioError(f"{os.path.join(path, 'summary.json')}: 'checkpoints' is not a list "
                         f"of per-checkpoint records")
    c = CkptRun(path, "checkpoint", config.get("writer", "?"), int(config.get("ranks", 0)),
                config.get("dir") or "", int(summary.get("checkpoint_bytes") or 0),
                [x.get("name", "?") for x in per],
                [_seconds(x.get("write_rank_s")) for x in per],
                [_seconds(x.get("read_rank_s")) for x in per],
                (summary.get("metric") or {}).get("save_checkpoint_io_mean_GB_per_second"),
                align=(config.get("coordinated") or {}).get("align"))
    _logs(c, sorted(glob.glob(os.path.join(path, "darshan", "*.darshan"))))
    return c


def from_training(run):
    """The checkpoints of a training run (:class:`hpcio.explain.runs.Run`) that wrote an
    MLPerf Storage layout's, or None."""
    cs = (run.summary or {}).get("checkpoints") or {}
    if "per_checkpoint" not in cs:
        return None
    by, size = {}, int(round((cs.get("size_GiB") or 0) * 2 ** 30))
    for r, info in enumerate(run.rank_info):
        for rec in (info or {}).get("checkpoints") or []:
            size = rec.get("checkpoint_bytes") or size
            if rec.get("write_s") is not None:
                by.setdefault(rec["index"], {})[r] = rec["write_s"]
    rows = cs["per_checkpoint"]
    c = CkptRun(run.path, "training", cs.get("writer") or "?", run.ranks,
                run.config.get("checkpoint_dir") or "", size, [x["name"] for x in rows],
                [[by.get(x["index"], {}).get(r) for r in range(run.ranks)]
                 if len(by.get(x["index"], {})) == run.ranks else [] for x in rows],
                rate_mean=cs.get("write_GiB_per_s_mean"), mode=cs.get("mode") or "sync")
    if run.steps:
        c.stall = {"ckpt_s": run.steps["ckpt"].sum(axis=1), "wall_s": run.steps["wall"].sum(axis=1),
                   "per_ckpt_s": [x["stall_s"] for x in rows]}
    c.logs = list(run.logs)
    return c


def _spread(rank_s, names):
    """Per checkpoint the slowest rank's seconds over the median rank's: (median of the
    ratios, worst ratio, its checkpoint, its rank, its seconds, the median's)."""
    best = None
    ratios = []
    for name, secs in zip(names, rank_s):
        s = np.asarray([x for x in secs if isinstance(x, (int, float)) and x >= 0], float)
        if len(s) < 2 or np.median(s) <= 0:
            continue
        ratio = float(s.max() / np.median(s))
        ratios.append(ratio)
        if best is None or ratio > best[1]:
            best = (None, ratio, name, int(s.argmax()), float(s.max()), float(np.median(s)))
    if not ratios:
        return None
    return (float(np.median(ratios)),) + best[1:]


def _darshan(c, log):
    """Darshan's figures of the checkpoint files in ``log``."""
    ids = log.file_ids(c.directory) if c.directory else np.zeros(0, np.uint64)
    n = max(len(c.names), 1)
    out = {"log": os.path.basename(log.path)}
    px = (log.counters.get("POSIX"))
    if px is not None:
        px = px.select(np.isin(px.id, ids))
    if px is not None and len(px):
        writes = px.get("POSIX_WRITES").sum()
        hist = {b: float(px.get(f"POSIX_SIZE_WRITE_{b}").sum()) for b in _WRITE_BINS}
        small = sum(hist[b] for b in _SMALL_BINS)
        ops = writes + px.get("POSIX_READS").sum()
        meta = px.get("POSIX_F_META_TIME")
        io = meta + px.get("POSIX_F_WRITE_TIME") + px.get("POSIX_F_READ_TIME")
        align = px.get("POSIX_FILE_ALIGNMENT")
        out.update({
            "writes": writes, "bytes_written": px.get("POSIX_BYTES_WRITTEN").sum(),
            "write_sizes": hist, "small_writes": small,
            "small_write_share": small / writes if writes else float("nan"),
            "not_aligned": px.get("POSIX_FILE_NOT_ALIGNED").sum(), "ops": ops,
            "not_aligned_share": px.get("POSIX_FILE_NOT_ALIGNED").sum() / ops if ops
            else float("nan"),
            "alignment": int(align.max()) if len(align) else None,
            "files_written": int(len(np.unique(px.id[px.get("POSIX_BYTES_WRITTEN") > 0]))) / n,
            "opens": px.get("POSIX_OPENS").sum() / n,
            "meta_s": float(meta.sum()) / n,
            "meta_share": float(meta.sum() / io.sum()) if io.sum() > 0 else float("nan"),
        })
    mp = log.counters.get("MPI-IO")
    if mp is not None:
        mp = mp.select(np.isin(mp.id, ids))
    if mp is not None and len(mp):
        out["mpiio_writes"] = (mp.get("MPIIO_COLL_WRITES") + mp.get("MPIIO_INDEP_WRITES")).sum()
        out["mpiio_coll_writes"] = mp.get("MPIIO_COLL_WRITES").sum()
        out["mpiio_write_sizes"] = {b: float(mp.get(f"MPIIO_SIZE_WRITE_AGG_{b}").sum())
                                    for b in _WRITE_BINS}
        out["mpiio_bytes_written"] = mp.get("MPIIO_BYTES_WRITTEN").sum()
    return out


def ckpt_figures(c):
    """The figures the checkpoint rules read (see the module docstring)."""
    f = {"run": c.name, "kind": c.kind, "writer": c.writer, "ranks": c.ranks,
         "checkpoints": len(c.names), "size_GiB": c.size_bytes / 2 ** 30,
         "write_GiB_per_s_mean": c.rate_mean, "mode": c.mode, "align": c.align,
         "records": ("summary.json write_rank_s" if c.kind == "checkpoint"
                     else "rank-R.json checkpoints write_s")}
    for what, rank_s in (("write", c.write_rank_s), ("read", c.read_rank_s)):
        s = _spread(rank_s, c.names)
        if s:
            keys = ("median_ratio", "worst_ratio", "worst_ckpt", "worst_rank", "worst_s",
                    "median_s")
            f.update({f"{what}_{k}": v for k, v in zip(keys, s)})
    if c.stall is not None:
        ck, wall = c.stall["ckpt_s"], c.stall["wall_s"]
        share = ck / np.where(wall > 0, wall, np.nan)
        f.update({"stall_pct": float(100 * np.nanmean(share)),
                  "stall_s": float(ck.mean()), "train_s": float(wall.mean()),
                  "stall_per_ckpt_s": float(np.mean(c.stall["per_ckpt_s"]))
                  if c.stall["per_ckpt_s"] else None})
    if c.logs:
        f["darshan"] = _darshan(c, c.logs[0])
    return f


# --- rules --------------------------------------------------------------------------------

def _g(d, k):
    return d.get(k) if d else None


def _ok(*xs):
    return all(x is not None and not (isinstance(x, float) and math.isnan(x)) for x in xs)


def _hist(sizes):
    return ", ".join(f"{b} B: {v:,.0f}" for b, v in sizes.items() if v)


def _small(f, d, writer):
    share, n = _g(d, "small_write_share"), _g(d, "small_writes")
    if not (_ok(share, n) and share > SMALL_WRITE_SHARE and n > SMALL_WRITES):
        return None
    what = (f"{n:,.0f} of {d['writes']:,.0f} POSIX writes to the checkpoint files are under "
            f"{SMALL >> 20} MiB ({100 * share:.0f}%; Darshan POSIX_SIZE_WRITE_*, {d['log']}: "
            f"{_hist(d['write_sizes'])})")
    if d.get("mpiio_writes"):
        what += (f", made of {d['mpiio_writes']:,.0f} MPI-IO writes "
                 f"({d['mpiio_coll_writes']:,.0f} collective; MPIIO_SIZE_WRITE_AGG_*: "
                 f"{_hist(d['mpiio_write_sizes'])})")
        return (what, "the MPI-IO calls are large but ROMIO writes each piece of their "
                      "scattered memory (a tensor) on its own: pack each round into one "
                      "buffer, or turn collective buffering on (--hint romio_cb_write=enable)")
    return (what, "write each rank's shard in few large requests: the coordinated writer "
                  "(its MPI-IO calls carry up to --round-mib per rank)")


def _unaligned(f, d, writer):
    share = _g(d, "not_aligned_share")
    if _ok(share) and share > UNALIGNED_SHARE:
        mine = (f"; hpcio aligned each rank's region to {f['align']:,} B" if f.get("align")
                else "")
        return (f"{d['not_aligned']:,.0f} of {d['ops']:,.0f} POSIX operations on the "
                f"checkpoint files ({100 * share:.0f}%) start off the file system's "
                f"{d['alignment']:,} B alignment (Darshan POSIX_FILE_NOT_ALIGNED, "
                f"POSIX_FILE_ALIGNMENT, {d['log']}){mine}",
                "start every rank's region and request on the stripe or block (the "
                "coordinated writer's --align, or --hint striping_unit=)")


def _metadata(f, d, writer):
    share, files = _g(d, "meta_share"), _g(d, "files_written")
    if _ok(share, files) and share > META_SHARE and files >= f["ranks"]:
        return (f"{files:,.0f} files written and {d['opens']:,.0f} opens per checkpoint "
                f"({f['ranks']} ranks): {d['meta_s']:.3f} s of metadata per checkpoint, "
                f"{100 * share:.0f}% of the checkpoint files' I/O time (Darshan POSIX_OPENS, "
                f"POSIX_F_META_TIME over META + READ + WRITE, {d['log']})",
                "write fewer, shared files: the coordinated writer (--files 1, or one per "
                "node) in place of a file per rank")


def _slow_rank(f, d, writer):
    x = f.get("write_median_ratio")
    if _ok(x) and x > SLOW_RANK:
        return (f"the slowest rank writes its shard in {x:.2f}x the median rank's time "
                f"(median over {f['checkpoints']} checkpoints; worst: rank "
                f"{f['write_worst_rank']} in {f['write_worst_ckpt']}, {f['write_worst_s']:.3f} s "
                f"against {f['write_median_s']:.3f} s; hpcio's {f['records']}): the "
                f"checkpoint lasts as long as its slowest rank",
                "balance the shards (the layout's bytes per rank) or the ranks' paths to "
                "storage; coordinated writes with aggregators spread one rank's bytes")


def _stall(f, d, writer):
    x = f.get("stall_pct")
    if _ok(x) and x >= STALL_PCT:
        return (f"checkpoints take {x:.1f}% of the training time ({f['stall_s']:.3f} of "
                f"{f['train_s']:.3f} s per rank: the steps' ckpt over their wall, "
                f"rank-R.npz; {f['checkpoints']} checkpoints of {f['size_GiB']:.3f} GiB, "
                f"{f['mode']}, {f['stall_per_ckpt_s']:.3f} s stall each)",
                "checkpoint less often, or asynchronously (--checkpoint-mode async: the step "
                "waits only for the copy to host memory)" if f["mode"] != "async" else
                "checkpoint less often: the step still waits for the previous write")


CKPT_RULES = [
    Rule("small checkpoint writes", SOURCE,
         f"> {SMALL_WRITE_SHARE:.0%} of POSIX writes under {SMALL >> 20} MiB and > "
         f"{SMALL_WRITES}", _small),
    Rule("unaligned checkpoint writes", SOURCE,
         f"> {UNALIGNED_SHARE:.0%} of POSIX operations off the file alignment", _unaligned),
    Rule("file-per-process metadata", SOURCE,
         f">= 1 file per rank and > {META_SHARE:.0%} of I/O time in metadata", _metadata),
    Rule("slowest checkpoint rank", SOURCE, f"max/median rank write time > {SLOW_RANK}",
         _slow_rank),
    Rule("checkpoint stall", SOURCE, f">= {STALL_PCT:g}% of training time", _stall),
]


def ckpt_findings(figures):
    """Every checkpoint rule over every run's checkpoint figures: [Finding]."""
    out = []
    for f in figures:
        for rule in CKPT_RULES:
            hit = rule.check(f, f.get("darshan"), f["writer"])
            if hit:
                out.append(Finding(f["run"], rule.name, rule.source, *hit))
    return out


def ckpt_table(figures):
    """One row per run's checkpoints."""
    rows = []
    for f in figures:
        d = f.get("darshan") or {}
        rows.append({**{k: v for k, v in f.items() if not isinstance(v, dict)},
                     **{k: d.get(k) for k in ("small_write_share", "not_aligned_share",
                                              "files_written", "opens", "meta_share")}})
    cols = [("run", "run", "{}"), ("writer", "writer", "{}"), ("ranks", "P", "{}"),
            ("checkpoints", "checkpoints", "{}"), ("size_GiB", "GiB", "{:.3f}"),
            ("write_GiB_per_s_mean", "write GiB/s", "{:.3f}"),
            ("write_median_ratio", "slowest/median rank", "{:.2f}"),
            ("small_write_share", "small writes", "{:.0%}"),
            ("not_aligned_share", "unaligned ops", "{:.0%}"),
            ("files_written", "files/ckpt", "{:.0f}"), ("opens", "opens/ckpt", "{:.0f}"),
            ("meta_share", "metadata share", "{:.0%}"), ("stall_pct", "stall % of training",
                                                          "{:.1f}")]
    return Table("table-checkpoints", "Checkpoints, per run", cols, rows,
                 "write GiB/s: the mean of the per-checkpoint rates (MLPerf Storage's); "
                 "slowest/median rank: the slowest rank's write seconds over the median "
                 "rank's, median over checkpoints (hpcio's per-rank records); small writes, "
                 "unaligned ops, files, opens and metadata share: Darshan's POSIX counters of "
                 "the files under the checkpoint directory (- without a log); stall: the "
                 "steps' ckpt over their wall (training runs).",
                 empty="No checkpoints among the runs.")
