"""Findings: rules over a run's figures, each with its threshold, the numbers that tripped
it and a recommendation.

Two sets, both registries of ``Rule``: Drishti's triggers over what Darshan saw (its
thresholds: Bez et al., "Drishti: Guiding End-Users in the I/O Optimization Journey",
PDSW 2022) and rules for training over the run's own step figures and the coverage of its
trace. A rule returns None when it does not apply or lacks the figures it needs. What the
accelerator waits for is one rule per cause, made from :data:`hpcio.explain.verdict.CAUSES`
(the table that decides a run's cause), so a finding and the run's cause never disagree.
"""

import math
from dataclasses import dataclass
from typing import Callable, Optional

from .tables import SMALL
from .verdict import AU_PASS, CAUSE_PCT, CAUSES, advice, why_not_busy

__all__ = ["Rule", "Finding", "RULES", "findings"]


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


# each rule's threshold, written here only (its text in RULES is made from it)
SMALL_SHARE, SMALL_READS = 0.10, 1000  # POSIX reads under SMALL bytes: share and count
RANDOM_SHARE = 0.20
MISALIGNED_SHARE = 0.10
IMBALANCE = 0.30
FILE_STRAGGLER = 0.15
INDEPENDENT_READS = 1000
METADATA_S = 30
STARTUP_POINTS = 10
AU_PCT = AU_PASS
COVERAGE = 0.5
UNEVEN_RATIO = 1.15
AMPLIFICATION = 2
_SMALL_SIZE = f"{SMALL >> 20} MiB"


def _small(f, d, reader):
    share, n = _g(d, "small_share"), _g(d, "small_reads")
    if _ok(share, n) and share > SMALL_SHARE and n > SMALL_READS:
        return (f"{n:,.0f} reads under {_SMALL_SIZE}, {100 * share:.0f}% of the POSIX reads "
                f"(mean request {d['mean_request']:,.0f} B)",
                "read larger requests: pack records into bigger files, " + (
                    "shuffle by chunk (--shuffle chunk) so that a rank's records are "
                    "neighbours the reader merges, or raise --reader-option request_bytes"
                    if reader == "coordinated" else
                    "or read runs of neighbouring records at once (the coordinated reader "
                    "merges them)"))


def _random(f, d, reader):
    share = _g(d, "random_share")
    if _ok(share) and share > RANDOM_SHARE and d.get("reads", 0) > 0:
        return (f"{100 * share:.0f}% of {d['reads']:,.0f} POSIX reads at a lower offset "
                f"than the one before",
                "read in file order: chunk shuffle, or sort each batch's records by offset "
                "before reading")


def _misaligned(f, d, reader):
    share = _g(d, "misaligned_share")
    if _ok(share) and share > MISALIGNED_SHARE:
        return (f"{100 * share:.0f}% of POSIX operations not aligned to the file system's "
                f"block", "align records (or the requests) to the file system's block size")


def _imbalance(f, d, reader):
    x = _g(d, "rank_bytes_imbalance")
    if _ok(x) and x > IMBALANCE:
        return (f"the ranks' read bytes differ by {100 * x:.0f}% of the largest",
                "give every rank the same bytes per step (balanced shards or records)")


def _straggler_files(f, d, reader):
    x = _g(d, "straggler_share")
    if _ok(x) and x > FILE_STRAGGLER:
        return (f"on a file read by several ranks the slowest rank's read time is "
                f"{100 * x:.0f}% above the fastest's",
                "spread the shared file's reads (collective reads with aggregators, or "
                "striping over more servers)")


def _collective(f, d, reader):
    coll, indep = _g(d, "mpiio_coll_reads"), _g(d, "mpiio_indep_reads")
    if _ok(coll, indep) and coll == 0 and indep > INDEPENDENT_READS:
        return (f"{indep:,.0f} independent MPI-IO reads and no collective one",
                "use collective reads (MPI_File_read_at_all; hpcio's --collective) across "
                "nodes")


def _metadata(f, d, reader):
    x = _g(d, "meta_s_rank_max")
    if _ok(x) and x > METADATA_S:
        return (f"{x:.1f} s of metadata operations on one rank",
                "open fewer files (pack them) or keep them open across epochs")


def _cause_rule(c):
    """The finding of cause ``c``: its share of the step at or above CAUSE_PCT."""
    def check(f, d, reader):
        x = _g(f, c.part)
        if _ok(x) and x >= CAUSE_PCT:
            return (f"{x:.1f}% of the step (steady state) goes to {c.what}: "
                    f"{c.detail(f)}", advice(c, reader))
    return check


def _startup(f, d, reader):
    every, steady = _g(f, "stall_pct"), _g(f, "stall_pct_steady")
    if _ok(every, steady) and every - steady > STARTUP_POINTS:
        return (f"stall {every:.1f}% over every step against {steady:.1f}% without each "
                f"epoch's first step: waits for an epoch's first batch of up to "
                f"{f['first_wait_s']:.3f} s",
                "start-up weighs on these short epochs: longer epochs amortise it"
                + ("; with --cache warm or asis the reader reads the next epoch's first "
                   "requests while the current one ends" if reader == "coordinated" else ""))


def _au(f, d, reader):
    x = _g(f, "au_pct")
    if _ok(x) and x < AU_PCT:
        return (f"AU {x:.1f}% (MLPerf Storage passes at {AU_PCT:g}%)", why_not_busy(f))


def _coverage(f, d, reader):
    x = _g(d, "coverage")
    if _ok(x) and x < COVERAGE:
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


def _uneven(f, d, reader):
    x = _g(f, "straggler_ratio")
    if _ok(x) and x > UNEVEN_RATIO:
        return (f"the slowest rank's step takes {x:.2f}x the median rank's (median over "
                f"steps): the ranks do not step together (with a per-step barrier the others "
                f"would wait for it, as straggler wait)",
                "find what the slow rank waits on (Table B's slowest rank, the heatmap); "
                "balance the data or the node's load")


def _amplification(f, d, reader):
    x = _g(d, "coverage")
    if _ok(x) and x > AMPLIFICATION:
        return (f"the library read {x:.1f}x the bytes delivered ({d['mean_request']:,.0f} B "
                f"per POSIX read)",
                "read only the records' bytes: a layout whose records fill whole requests "
                "(HDF5: turn the sieve buffer down or chunk by record" + (
                    "" if reader == "coordinated" else
                    "; the coordinated reader reads at the index's offsets") + ")")


RULES = [
    Rule("small requests", "Drishti",
         f"< {_SMALL_SIZE}, > {SMALL_SHARE:.0%} of reads and > {SMALL_READS:,}", _small),
    Rule("random reads", "Drishti", f"> {RANDOM_SHARE:.0%} of reads", _random),
    Rule("misaligned", "Drishti", f"> {MISALIGNED_SHARE:.0%} of operations", _misaligned),
    Rule("rank imbalance", "Drishti", f"> {IMBALANCE:.0%} of the largest rank's bytes",
         _imbalance),
    Rule("shared-file stragglers", "Drishti", f"> {FILE_STRAGGLER:.0%} slowest vs fastest rank",
         _straggler_files),
    Rule("no collective reads", "Drishti",
         f"0 collective past {INDEPENDENT_READS:,} MPI-IO reads", _collective),
    Rule("metadata time", "Drishti", f"> {METADATA_S} s per rank", _metadata),
] + [
    Rule(c.name, "training", f">= {CAUSE_PCT:g}% of the step, steady state", _cause_rule(c))
    for c in CAUSES
] + [
    Rule("start-up", "training",
         f"every-step stall > steady-state stall + {STARTUP_POINTS} points", _startup),
    Rule("AU", "training", f"< {AU_PCT:g}%", _au),
    Rule("coverage", "training", f"Darshan sees < {COVERAGE:.0%} of the bytes delivered",
         _coverage),
    Rule("uneven ranks", "training", f"max/median rank step time > {UNEVEN_RATIO}", _uneven),
    Rule("read amplification", "training", f"> {AMPLIFICATION}x the bytes delivered",
         _amplification),
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

