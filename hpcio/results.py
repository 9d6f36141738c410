"""Run directories afterwards: the summary of a run that did not finish, from what its
ranks flushed; runs exported as rows (``summarize``, ``export``).

``python -m hpcio.results summarize RUNDIR``, for a run that did not finish (a crash, a
killed rank, a lost node, the watchdog).

Every rank of ``hpcio.train`` rewrites ``rank-R.npz`` and ``rank-R.json`` (``partial:
true``) at each epoch end and every ``--flush-interval`` seconds. This command reads what
is there, names the ranks that left no files and the ranks whose files are partial (with
the steps each flushed), and writes ``summary.json`` and ``summary.txt`` (atomically) with
the figures of the flushed steps: :func:`hpcio.explain.summary.summarize` over each rank's
:func:`hpcio.measure.steps.rank_summary`, the ranks that flushed no step left out. A run
that finished keeps the summary it wrote: nothing of it is replaced, nor a summary file
this command did not write (refused in one line). Rank files are read through
:mod:`hpcio.measure.schema`: one that cannot be used (a NaN, a wrong type, a FIFO) is named
on stderr, left out of the figures, and the exit code is 1.

``python -m hpcio.results export RUNS... -o results.json|results.csv``: one row per run,
its columns named as MLPerf Storage's report and DLIO's summary name them, with the MLPerf
Storage rules the run meets or breaks (:mod:`hpcio.explain.export` defines each column and
rule), written atomically. RUNS are run directories, sweep directories or directories of
them (:func:`hpcio.explain.runs.expand`); one that holds no run is an error in one line.
"""

import os
import re
import sys

from .measure import schema
from .explain.export import AU_THRESHOLD, export_rows, is_export, output_format, write_rows
from .explain.mlpstorage import write_tree
from .explain.runs import expand
from .explain.summary import au_threshold_percent, run_summary
from .cli import ArgumentParser, au_percent
from .errors import HpcioError, guard
from .outputs import claim_dir, claim_file
from .measure.rundir import RunDir
from .measure.steps import COMPONENTS, SINCE_EXCHANGE, rank_summary

__all__ = ["main", "summarize_run", "export", "SOURCE"]

SOURCE = "hpcio.results summarize"  # summary.json's "source" when this command wrote it


def _load_rank(run, r, problems):
    """(arrays, partial) of rank ``r``, or None when it left no usable step file (why, in
    ``problems``, when the file is there but unusable)."""
    try:
        arrays = run.rank_steps(r, _REQUIRED, _OPTIONAL, _NONNEGATIVE)
    except FileNotFoundError:
        return None
    except schema.Invalid as e:
        problems.append(f"{e}; rank {r} is left out")
        return None
    try:
        info, _ = run.rank_info(r)
        partial = bool(info.get("partial", False))
    except (FileNotFoundError, schema.Invalid):  # killed between its two files
        partial = True
    return arrays, partial


_REQUIRED = ("epoch", "step", "wall", "records", "nbytes") + tuple(
    c for c in COMPONENTS if c not in SINCE_EXCHANGE)
_OPTIONAL = tuple(c for c in SINCE_EXCHANGE if c not in _REQUIRED)
_NONNEGATIVE = _REQUIRED + _OPTIONAL


def _config(run):
    try:
        config, _ = run.config()
    except FileNotFoundError:
        raise HpcioError(f"{run.path}: not a run directory of hpcio.train (no "
                         f"{RunDir.CONFIG})") from None
    return config


def _kept(run):
    """The summary.json the run itself wrote, if any."""
    try:
        s, _ = run.summary()
    except (FileNotFoundError, schema.Invalid):
        return None
    return s if s.get("source") != SOURCE else None


def _ours(run):
    """Why hpcio.results may not write over the summary files in ``run`` (files it did
    not write itself: a user's, or a damaged run's), or None."""
    for name, mine in _MINE.items():
        p = run.file(name)
        if not os.path.lexists(p):
            continue
        try:
            head = schema.read_bytes(p, schema.LIMITS["json"])[:len(_TITLE) + 64]
        except (OSError, schema.Invalid):
            return f"{p}: exists and is not a file hpcio.results wrote"
        if not mine(head):
            return f"{p}: exists and was not written by hpcio.results; not overwritten " \
                   f"(move it away to summarize this run)"
    return None


_TITLE = b"hpcio.results: "
_LISTED = 16  # missing ranks named one per line up to this many
# file: does its beginning show that hpcio.results wrote it?
_MINE = {
    RunDir.SUMMARY: lambda head: re.match(rb'\{\s*"source":\s*"' + re.escape(SOURCE.encode())
                                          + rb'"', head) is not None,
    RunDir.SUMMARY_TEXT: lambda head: head.startswith(_TITLE),
}


def summarize_run(path):
    """(summary, text, problems) for the run directory ``path``: ``problems`` (one line
    per rank file that could not be used) is None when the run finished and its own
    summary was kept, nothing written."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise HpcioError(f"{path}: no such run directory")
    run = RunDir(path)
    config = _config(run)
    kept = _kept(run)
    if kept is not None:
        try:
            text = run.summary_text()
        except (OSError, schema.Invalid):
            text = ""
        return kept, text + f"  {path}: the run finished; its summary is kept\n", None
    refused = _ours(run)
    if refused:
        raise HpcioError(refused)
    ranks = config["ranks"]
    expected = (config.get("epochs") or 0) * (config.get("steps_per_epoch") or 0)
    missing, partial, flushed, per_rank, used, problems = [], [], {}, [], [], []
    present, unusable = run.rank_files(ranks)["npz"], set()
    for r in range(ranks):
        if r not in present:
            missing.append(r)
            continue
        got = _load_rank(run, r, problems)
        if got is None:
            missing.append(r)
            unusable.add(r)
            continue
        arrays, part = got
        flushed[r] = int(len(arrays["wall"]))
        if part:
            partial.append(r)
        if flushed[r]:
            per_rank.append(rank_summary(arrays))
            used.append(r)
    complete = not missing and not partial
    head = {
        "source": SOURCE, "complete": complete, "cut_short": not complete,
        "reader": config.get("reader"), "model": config.get("model"), "ranks": ranks,
        "nodes": config.get("nodes"), "batch": config.get("batch"),
        "epochs_requested": config.get("epochs"),
        "steps_per_epoch": config.get("steps_per_epoch"), "steps_expected": expected,
        "ranks_missing": missing, "ranks_partial": partial,
        "steps_flushed": {str(r): n for r, n in flushed.items()},
        "ranks_summarized": used,
        "exchange": config.get("exchange"),
        "workload": config.get("workload"),
        "au_threshold_percent": au_threshold_percent(config.get("au_threshold")),
        "metrics_cover": "the steps flushed by ranks_summarized (per-rank lists follow "
                         "that order)",
    }
    title = (f"hpcio.results: {config.get('model')} on {ranks} rank(s), reader "
             f"{config.get('reader')}, batch {config.get('batch')}: from the files the "
             f"ranks flushed" + ("" if complete else "  [INCOMPLETE]"))
    summary, table = run_summary(head, per_rank, title, {"problems": problems},
                                 empty="no step flushed")
    lines = [table]
    absent = set(missing) - unusable
    if len(absent) > _LISTED:  # a config claiming a million ranks: one line, not a million
        lines.append(f"  ranks {schema.spans(absent)}: missing (no "
                     f"{RunDir.RANK_STEPS.format(rank='R')})")
    for r in sorted(flushed.keys() | unusable | (absent if len(absent) <= _LISTED else set())):
        if r in flushed:
            state = "partial" if r in partial else "finished"
            lines.append(f"  rank {r}: {flushed[r]} of {expected} steps flushed ({state})")
        else:
            lines.append(f"  rank {r}: " + (
                "unusable (see below)" if r in unusable
                else f"missing (no {RunDir.RANK_STEPS.format(rank=r)})"))
    lines.append(f"  results: {path}")
    lines += [f"  {p}" for p in problems]
    text = "\n".join(lines) + "\n"
    run.write_summary(summary, text)
    return summary, text, problems


def build_parser():
    p = ArgumentParser(prog="python -m hpcio.results",
                       description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("summarize", help="summary.json/txt of a run from its ranks' "
                                         "flushed files, naming missing and partial ranks")
    s.add_argument("rundir", metavar="RUNDIR", help="a run directory of hpcio.train")
    e = sub.add_parser("export", help="one row per run (MLPerf Storage / DLIO column "
                                      "names, the rules checked) into a .json or .csv file")
    e.add_argument("runs", nargs="+", metavar="RUNS",
                   help="run directories, sweep directories, or directories of them")
    e.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="results.json (a list of rows) or results.csv")
    e.add_argument("--au-threshold", type=au_percent, default=None,
                   metavar="PERCENT",
                   help="the AU a run must reach (MLPerf Storage: 90 for 3D U-Net and "
                        "ResNet-50, 70 for CosmoFlow; default: each run's own, from its "
                        f"workload, else {AU_THRESHOLD:g})")
    e.add_argument("--mlpstorage", metavar="DIR", default=None,
                   help="also write each run as a leaf of mlpstorage's results layout "
                        "(DIR/SYSTEM/training/MODEL/run/TIMESTAMP/: DLIO's summary.json, "
                        "metadata, dlio_config/) for `mlpstorage reports reportgen`")
    e.add_argument("--system", default="hpcio", metavar="NAME",
                   help="the system name of the --mlpstorage tree (default: hpcio)")
    e.add_argument("--force", action="store_true",
                   help="replace an existing FILE that is not an earlier export")
    return p


def export(paths, output, threshold=None, force=False, mlpstorage=None, system="hpcio"):
    """Write the rows of every run under ``paths`` into ``output``; returns (rows,
    problems). A path that holds no run is an error, before anything is written, and so
    is an ``output`` in a run's or dataset's directory or one hpcio did not write (unless
    ``force``: :func:`hpcio.outputs.claim_file`)."""
    output_format(output)
    dirs, bad, _ = expand(paths)
    if bad:
        raise HpcioError(bad[0] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    claim_file(output, "-o", is_export, force)
    if mlpstorage:
        claim_dir(mlpstorage, "--mlpstorage", {})
    seen = list(dict.fromkeys(d for d, _ in dirs))
    if not seen:
        raise HpcioError(f"{' '.join(paths)}: no finished run to export")
    rows, problems = export_rows(seen, threshold)
    write_rows(rows, output)
    if mlpstorage:
        write_tree(rows, [RunDir(r["run_dir"]).config()[0] for r in rows], mlpstorage,
                   system)
    return rows, problems


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "export":
        rows, problems = export(args.runs, args.output, args.au_threshold, args.force,
                                args.mlpstorage, args.system)
        print(f"hpcio.results: {len(rows)} run(s) written to {args.output}")
        for p in problems:
            print(f"hpcio.results: {p}", file=sys.stderr)
        return 1 if problems else 0
    _, text, problems = summarize_run(args.rundir)
    sys.stdout.write(text)
    for p in problems or []:
        print(f"hpcio.results: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.results"))
