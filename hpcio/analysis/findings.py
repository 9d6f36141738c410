"""Findings: rules over a run's figures, each with its threshold, the numbers that tripped
it and a recommendation.

Two sets, both registries of ``Rule``: Drishti's triggers over what Darshan saw (its
thresholds: Bez et al., "Drishti: Guiding End-Users in the I/O Optimization Journey",
PDSW 2022) and rules for training over the run's own step figures and the coverage of its
trace. A rule returns None when it does not apply or lacks the figures it needs.
"""

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["Rule", "Finding", "RULES", "findings", "drishti"]


@dataclass
class Finding:
    run: str
    rule: str
    source: str       # "Drishti" or "training"
    what: str         # the numbers
    advice: str


@dataclass
class Rule:
    name: str
    source: str
    threshold: str
    check: Callable[[dict, dict, str], Optional[tuple]]  # (figures, darshan figures,
    # reader) -> (what, advice): advice for that reader, never to become itself


def _ok(*xs):
    return all(x is not None and not (isinstance(x, float) and math.isnan(x)) for x in xs)


def _g(d, k):
    return d.get(k) if d else None


def _small(f, d, reader):
    share, n = _g(d, "small_share"), _g(d, "small_reads")
    if _ok(share, n) and share > 0.10 and n > 1000:
        return (f"{n:,.0f} reads under 1 MiB, {100 * share:.0f}% of the POSIX reads (mean "
                f"request {d['mean_request']:,.0f} B)",
                "read larger requests: pack records into bigger files, " + (
                    "shuffle by chunk (--shuffle chunk) so that a rank's records are "
                    "neighbours the reader merges, or raise --reader-option request_bytes"
                    if reader == "coordinated" else
                    "or read runs of neighbouring records at once (the coordinated reader "
                    "merges them)"))


def _random(f, d, reader):
    share = _g(d, "random_share")
    if _ok(share) and share > 0.20 and d.get("reads", 0) > 0:
        return (f"{100 * share:.0f}% of {d['reads']:,.0f} POSIX reads at a lower offset "
                f"than the one before",
                "read in file order: chunk shuffle, or sort each batch's records by offset "
                "before reading")


def _misaligned(f, d, reader):
    share = _g(d, "misaligned_share")
    if _ok(share) and share > 0.10:
        return (f"{100 * share:.0f}% of POSIX operations not aligned to the file system's "
                f"block", "align records (or the requests) to the file system's block size")


def _imbalance(f, d, reader):
    x = _g(d, "rank_bytes_imbalance")
    if _ok(x) and x > 0.30:
        return (f"the ranks' read bytes differ by {100 * x:.0f}% of the largest",
                "give every rank the same bytes per step (balanced shards or records)")


def _straggler_files(f, d, reader):
    x = _g(d, "straggler_share")
    if _ok(x) and x > 0.15:
        return (f"on a file read by several ranks the slowest rank's read time is "
                f"{100 * x:.0f}% above the fastest's",
                "spread the shared file's reads (collective reads with aggregators, or "
                "striping over more servers)")


def _collective(f, d, reader):
    coll, indep = _g(d, "mpiio_coll_reads"), _g(d, "mpiio_indep_reads")
    if _ok(coll, indep) and coll == 0 and indep > 1000:
        return (f"{indep:,.0f} independent MPI-IO reads and no collective one",
                "use collective reads (MPI_File_read_at_all; hpcio's --collective) across "
                "nodes")


def _metadata(f, d, reader):
    x = _g(d, "meta_s_rank_max")
    if _ok(x) and x > 30:
        return (f"{x:.1f} s of metadata operations on one rank",
                "open fewer files (pack them) or keep them open across epochs")


def _stall(f, d, reader):
    x = _g(f, "stall_pct_steady")
    if _ok(x) and x > 10:
        fetch, prep = f["fetch_pct_steady"], f["prep_pct_steady"]
        if fetch < prep:
            advice = "preprocessing is the bottleneck: more --threads, or preprocess offline"
        elif reader == "coordinated":
            advice = ("the reader is the bottleneck: more requests in flight "
                      "(--reader-prefetch), larger requests (--reader-option request_bytes=...), "
                      "or faster storage")
        else:
            advice = ("the reader is the bottleneck: prefetch further ahead and read in "
                      "larger requests (the coordinated reader), or faster storage")
        return (f"steady-state stall {x:.1f}% of the step (fetch {fetch:.1f}%, prep "
                f"{prep:.1f}%), {1000 * f['stall_max_s']:.1f} ms per step on the slowest "
                f"rank", advice)


def _startup(f, d, reader):
    every, steady = _g(f, "stall_pct"), _g(f, "stall_pct_steady")
    if _ok(every, steady) and every - steady > 10:
        return (f"stall {every:.1f}% over every step against {steady:.1f}% without each "
                f"epoch's first step: waits for an epoch's first batch of up to "
                f"{f['first_wait_s']:.3f} s",
                "start-up weighs on these short epochs: longer epochs amortise it"
                + ("; with --cache warm or asis the reader reads the next epoch's first "
                   "requests while the current one ends" if reader == "coordinated" else ""))


def _au(f, d, reader):
    x = _g(f, "au_pct")
    if _ok(x) and x < 90:
        return (f"AU {x:.1f}% (MLPerf Storage passes at 90%)",
                "see the stall finding: the accelerator waits for data")


def _coverage(f, d, reader):
    x = _g(d, "coverage")
    if _ok(x) and x < 0.5:
        os_ = f.get("os") or {}
        faults = os_.get("majflt")
        extra = (f"; the OS saw {os_['minflt']:,.1f} minor and {faults:,.2f} major page "
                 f"faults per sample" if _ok(faults) else "")
        return (f"Darshan saw {100 * x:.1f}% of the {f['delivered_bytes']:,.0f} bytes the "
                f"reader delivered{extra}: memory-mapped reads are invisible to it",
                "judge this reader's I/O by the run's own counters (stall, faults, Table C), "
                "not by its Darshan log" + ("" if reader == "coordinated" else
                                            "; or read with pread/MPI-IO (the coordinated "
                                            "reader), which Darshan traces"))


def _stragglers(f, d, reader):
    x = _g(f, "straggler_ratio")
    if _ok(x) and x > 1.15:
        return (f"the slowest rank's step takes {x:.2f}x the median rank's (median over "
                f"steps)", "find what the slow rank waits on (Table B's slowest rank, the "
                           "heatmap); balance the data or the node's load")


def _amplification(f, d, reader):
    x = _g(d, "coverage")
    if _ok(x) and x > 2:
        return (f"the library read {x:.1f}x the bytes delivered ({d['mean_request']:,.0f} B "
                f"per POSIX read)",
                "read only the records' bytes: a layout whose records fill whole requests "
                "(HDF5: turn the sieve buffer down or chunk by record" + (
                    "" if reader == "coordinated" else
                    "; the coordinated reader reads at the index's offsets") + ")")


RULES = [
    Rule("small requests", "Drishti", "< 1 MiB, > 10% of reads and > 1,000", _small),
    Rule("random reads", "Drishti", "> 20% of reads", _random),
    Rule("misaligned", "Drishti", "> 10% of operations", _misaligned),
    Rule("rank imbalance", "Drishti", "> 30% of the largest rank's bytes", _imbalance),
    Rule("shared-file stragglers", "Drishti", "> 15% slowest vs fastest rank",
         _straggler_files),
    Rule("no collective reads", "Drishti", "0 collective past 1,000 MPI-IO reads", _collective),
    Rule("metadata time", "Drishti", "> 30 s per rank", _metadata),
    Rule("stall", "training", "> 10% of the step, steady state", _stall),
    Rule("start-up", "training", "every-step stall > steady-state stall + 10 points",
         _startup),
    Rule("AU", "training", "< 90%", _au),
    Rule("coverage", "training", "Darshan sees < 50% of the bytes delivered", _coverage),
    Rule("stragglers", "training", "max/median rank step time > 1.15", _stragglers),
    Rule("read amplification", "training", "> 2x the bytes delivered", _amplification),
]


def findings(runs, figures):
    """Every rule over every run: [Finding]."""
    out = []
    for run in runs:
        f = figures.get(run.path) or {}
        if not f:
            continue
        for rule in RULES:
            hit = rule.check(f, f.get("darshan"), run.config.get("reader", "?"))
            if hit:
                out.append(Finding(run.name, rule.name, rule.source, *hit))
    return out


def drishti(log_path, workdir):
    """Drishti's own report on a log (``drishti-io``, when installed), as text; None
    without it. It runs in ``workdir`` (inside the report directory: it may write files)."""
    exe = shutil.which("drishti")
    if not exe:
        return None
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ, NO_COLOR="1", TERM="dumb", COLUMNS="110")
    try:
        p = subprocess.run([exe, "--issues", log_path], capture_output=True, text=True,
                           cwd=workdir, env=env, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        return f"drishti failed: {e}"
    return p.stdout.strip() or f"drishti exited {p.returncode}: {p.stderr.strip()[-300:]}"
