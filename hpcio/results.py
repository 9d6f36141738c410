"""The summary of a training run from what its ranks flushed, for a run that did not
finish (a crash, a killed rank, a lost node, the watchdog):
``python -m hpcio.results summarize RUNDIR``.

Every rank of ``hpcio.train`` rewrites ``rank-R.npz`` and ``rank-R.json`` (``partial:
true``) at each epoch end and every ``--flush-interval`` seconds. This command reads what
is there, names the ranks that left no files and the ranks whose files are partial (with
the steps each flushed), and writes ``summary.json`` and ``summary.txt`` (atomically) with
the figures of the flushed steps: :func:`hpcio.analysis.summary.summarize` over each rank's
:func:`hpcio.measure.steps.rank_summary`, the ranks that flushed no step left out. A run
that finished keeps the summary it wrote: nothing of it is replaced, nor a summary file
this command did not write (refused in one line). Rank files are read through
:mod:`hpcio.analysis.schema`: one that cannot be used (a NaN, a wrong type, a FIFO) is named
on stderr, left out of the figures, and the exit code is 1.
"""

import os
import re
import sys

from .analysis import schema
from .analysis.summary import format_table, summarize
from .cli import ArgumentParser
from .errors import HpcioError, guard
from .measure.results import RunDir
from .measure.steps import COMPONENTS, SINCE_EXCHANGE, rank_summary

__all__ = ["main", "summarize_run", "SOURCE"]

SOURCE = "hpcio.results summarize"  # summary.json's "source" when this command wrote it


def _load_rank(path, r, problems):
    """(arrays, partial) of rank ``r``, or None when it left no usable step file (why, in
    ``problems``, when the file is there but unusable)."""
    npz = os.path.join(path, f"rank-{r}.npz")
    try:
        arrays = schema.load_columns(npz, _REQUIRED, _OPTIONAL, _NONNEGATIVE)
    except FileNotFoundError:
        return None
    except schema.Invalid as e:
        problems.append(f"{e}; rank {r} is left out")
        return None
    try:
        info, _ = schema.load(os.path.join(path, f"rank-{r}.json"), "rank")
        partial = bool(info.get("partial", False))
    except (FileNotFoundError, schema.Invalid):  # killed between its two files
        partial = True
    return arrays, partial


_REQUIRED = ("epoch", "step", "wall", "records", "nbytes") + tuple(
    c for c in COMPONENTS if c not in SINCE_EXCHANGE)
_OPTIONAL = tuple(c for c in SINCE_EXCHANGE if c not in _REQUIRED)
_NONNEGATIVE = _REQUIRED + _OPTIONAL


def _config(path):
    cfg = os.path.join(path, "config.yaml")
    try:
        config, _ = schema.load(cfg, "config")
    except FileNotFoundError:
        raise HpcioError(f"{path}: not a run directory of hpcio.train (no config.yaml)") \
            from None
    return config


def _kept(path):
    """The summary.json the run itself wrote, if any."""
    try:
        s, _ = schema.load(os.path.join(path, "summary.json"), "summary")
    except (FileNotFoundError, schema.Invalid):
        return None
    return s if s.get("source") != SOURCE else None


def _ours(path):
    """Why hpcio.results may not write over the summary files in ``path`` (files it did
    not write itself: a user's, or a damaged run's), or None."""
    for name, mine in _MINE.items():
        p = os.path.join(path, name)
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
    "summary.json": lambda head: re.match(rb'\{\s*"source":\s*"' + re.escape(SOURCE.encode())
                                          + rb'"', head) is not None,
    "summary.txt": lambda head: head.startswith(_TITLE),
}


def summarize_run(path):
    """(summary, text, problems) for the run directory ``path``: ``problems`` (one line
    per rank file that could not be used) is None when the run finished and its own
    summary was kept, nothing written."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise HpcioError(f"{path}: no such run directory")
    config = _config(path)
    kept = _kept(path)
    if kept is not None:
        try:
            text = schema.read_bytes(os.path.join(path, "summary.txt"),
                                     schema.LIMITS["json"]).decode("utf-8", "replace")
        except (OSError, schema.Invalid):
            text = ""
        return kept, text + f"  {path}: the run finished; its summary is kept\n", None
    refused = _ours(path)
    if refused:
        raise HpcioError(refused)
    ranks = config["ranks"]
    expected = (config.get("epochs") or 0) * (config.get("steps_per_epoch") or 0)
    missing, partial, flushed, per_rank, used, problems = [], [], {}, [], [], []
    present, unusable = schema.rank_files(path, ranks)["npz"], set()
    for r in range(ranks):
        if r not in present:
            missing.append(r)
            continue
        got = _load_rank(path, r, problems)
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
    figures = summarize(per_rank) if per_rank else None
    complete = not missing and not partial
    summary = {
        "source": SOURCE, "complete": complete, "cut_short": not complete,
        "reader": config.get("reader"), "model": config.get("model"), "ranks": ranks,
        "nodes": config.get("nodes"), "batch": config.get("batch"),
        "epochs_requested": config.get("epochs"),
        "steps_per_epoch": config.get("steps_per_epoch"), "steps_expected": expected,
        "ranks_missing": missing, "ranks_partial": partial,
        "steps_flushed": {str(r): n for r, n in flushed.items()},
        "ranks_summarized": used,
        "exchange": config.get("exchange"),
        "metrics_cover": "the steps flushed by ranks_summarized (per-rank lists follow "
                         "that order)",
        "metrics": figures,
    }
    title = (f"hpcio.results: {config.get('model')} on {ranks} rank(s), reader "
             f"{config.get('reader')}, batch {config.get('batch')}: from the files the "
             f"ranks flushed" + ("" if complete else "  [INCOMPLETE]"))
    lines = [format_table(figures, title) if figures else title + "\n  no step flushed"]
    absent = set(missing) - unusable
    if len(absent) > _LISTED:  # a config claiming a million ranks: one line, not a million
        lines.append(f"  ranks {schema.spans(absent)}: missing (no rank-R.npz)")
    for r in sorted(flushed.keys() | unusable | (absent if len(absent) <= _LISTED else set())):
        if r in flushed:
            state = "partial" if r in partial else "finished"
            lines.append(f"  rank {r}: {flushed[r]} of {expected} steps flushed ({state})")
        else:
            lines.append(f"  rank {r}: " + ("unusable (see below)" if r in unusable
                                            else f"missing (no rank-{r}.npz)"))
    lines.append(f"  results: {path}")
    lines += [f"  {p}" for p in problems]
    text = "\n".join(lines) + "\n"
    summary["problems"] = problems
    out = RunDir(path)
    out.json("summary.json", summary)
    out.text("summary.txt", text)
    return summary, text, problems


def build_parser():
    p = ArgumentParser(prog="python -m hpcio.results",
                       description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("summarize", help="summary.json/txt of a run from its ranks' "
                                         "flushed files, naming missing and partial ranks")
    s.add_argument("rundir", metavar="RUNDIR", help="a run directory of hpcio.train")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    _, text, problems = summarize_run(args.rundir)
    sys.stdout.write(text)
    for p in problems or []:
        print(f"hpcio.results: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.results"))
