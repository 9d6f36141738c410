"""The summary of a training run from what its ranks flushed, for a run that did not
finish (a crash, a killed rank, a lost node, the watchdog):
``python -m hpcio.results summarize RUNDIR``.

Every rank of ``hpcio.train`` rewrites ``rank-R.npz`` and ``rank-R.json`` (``partial:
true``) at each epoch end and every ``--flush-interval`` seconds. This command reads what
is there, names the ranks that left no files and the ranks whose files are partial (with
the steps each flushed), and writes ``summary.json`` and ``summary.txt`` (atomically) with
the figures of the flushed steps: :func:`hpcio.analysis.summary.summarize` over each rank's
:func:`hpcio.measure.steps.rank_summary`, the ranks that flushed no step left out. A run
that finished keeps the summary it wrote: nothing of it is replaced.
"""

import json
import os
import sys
import zipfile

import numpy as np
import yaml

from .analysis.summary import format_table, summarize
from .cli import ArgumentParser
from .errors import HpcioError, guard
from .measure.results import RunDir
from .measure.steps import rank_summary

__all__ = ["main", "summarize_run", "SOURCE"]

SOURCE = "hpcio.results summarize"  # summary.json's "source" when this command wrote it


def _load_rank(path, r):
    """(arrays, partial) of rank ``r``, or None when it left no step file."""
    npz = os.path.join(path, f"rank-{r}.npz")
    if not os.path.exists(npz):
        return None
    try:
        with np.load(npz) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise HpcioError(f"{npz}: cannot read it ({e})")
    try:
        with open(os.path.join(path, f"rank-{r}.json")) as f:
            partial = bool(json.load(f).get("partial", False))
    except (OSError, ValueError):  # killed between its two files: the steps still count
        partial = True
    return arrays, partial


def _config(path):
    try:
        with open(os.path.join(path, "config.yaml")) as f:
            config = yaml.safe_load(f)
    except FileNotFoundError:
        raise HpcioError(f"{path}: not a run directory of hpcio.train (no config.yaml)")
    except (OSError, yaml.YAMLError) as e:
        raise HpcioError(f"{path}/config.yaml: cannot read it ({e})".splitlines()[0])
    if not isinstance(config, dict) or not isinstance(config.get("ranks"), int):
        raise HpcioError(f"{path}/config.yaml: no rank count: not written by hpcio.train")
    return config


def _kept(path):
    """The summary.json the run itself wrote, if any."""
    try:
        with open(os.path.join(path, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None
    return s if s.get("source") != SOURCE else None


def summarize_run(path):
    """(summary, text, written) for the run directory ``path``; ``written`` is False when
    the run finished and its own summary was kept."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise HpcioError(f"{path}: no such run directory")
    config = _config(path)
    kept = _kept(path)
    if kept is not None:
        try:
            with open(os.path.join(path, "summary.txt")) as f:
                text = f.read()
        except OSError:
            text = ""
        return kept, text + f"  {path}: the run finished; its summary is kept\n", False
    ranks = config["ranks"]
    expected = (config.get("epochs") or 0) * (config.get("steps_per_epoch") or 0)
    missing, partial, flushed, per_rank, used = [], [], {}, [], []
    for r in range(ranks):
        got = _load_rank(path, r)
        if got is None:
            missing.append(r)
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
    for r in range(ranks):
        if r in missing:
            lines.append(f"  rank {r}: missing (no rank-{r}.npz)")
        else:
            state = "partial" if r in partial else "finished"
            lines.append(f"  rank {r}: {flushed[r]} of {expected} steps flushed ({state})")
    lines.append(f"  results: {path}")
    text = "\n".join(lines) + "\n"
    out = RunDir(path)
    out.json("summary.json", summary)
    out.text("summary.txt", text)
    return summary, text, True


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
    _, text, _ = summarize_run(args.rundir)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.results"))
