"""Checkpoint sweeps: with ``--checkpoint-writer`` (spec ``checkpoint_writer``) every point
is one ``python -m hpcio.checkpoint run`` job (writer x rank count) instead of a train job.

A point's ``data`` is the checkpoint's model (the ``--model`` among the options after
``--``, default llama3_8b) and its ``reader`` the writer, so the record, the resume and the
analysis of a sweep stay as they are. Each job writes its checkpoints into
``SWEEP/checkpoints/<run>`` (removed once the job ends: checkpoints are large; its run
directory keeps the figures) and its results into its run directory.
"""

import os
import shlex
import sys

from ..checkpoint.command import build_parser as checkpoint_parser
from ..errors import HpcioError

__all__ = ["OWN", "FIGURES", "model_of", "check_options", "command", "checkpoint_dir",
           "figures", "line"]

OWN = ("--writer", "--dir", "--out")  # the sweep sets these per job
DEFAULT_MODEL = "llama3_8b"


def model_of(words):
    """The ``--model`` among the checkpoint options, or the command's default."""
    for k, w in enumerate(words):
        if w == "--model" and k + 1 < len(words):
            return words[k + 1]
        if w.startswith("--model="):
            return w.split("=", 1)[1]
    return DEFAULT_MODEL


def check_options(words):
    """A bad checkpoint option after ``--`` is one line before any run, as hpcio.checkpoint
    run's own parser says it; the options the sweep sets per job are refused."""
    own = [w for w in words if w.split("=", 1)[0] in OWN]
    if own:
        raise HpcioError(f"{own[0].split('=', 1)[0]} after --: the sweep sets --writer (from "
                         f"--checkpoint-writer), --dir and --out of each checkpoint job",
                         everywhere=True)
    try:
        checkpoint_parser().parse_args(["run", "--dir", "x"] + list(words))
    except HpcioError as e:
        raise HpcioError(f"the checkpoint options after --: {e}", everywhere=True) from None


def command(launch, point, run_dir, ckpt_dir, words):
    """The launcher's words for one checkpoint job of ``point``."""
    return shlex.split(launch) + [
        "-n", str(point.ranks), sys.executable, "-m", "hpcio.checkpoint", "run",
        "--writer", point.reader, "--dir", ckpt_dir, "--out", run_dir] + list(words)


def checkpoint_dir(sweep_dir, run_dir):
    return os.path.join(sweep_dir, "checkpoints", os.path.basename(run_dir))


# what sweep.json keeps of a checkpoint run's summary (its metric, MLPerf Storage's names)
FIGURES = ("checkpoint_size_GB", "save_checkpoint_io_mean_GB_per_second",
           "load_checkpoint_io_mean_GB_per_second")


def figures(summary):
    m = (summary or {}).get("metric") or {}
    return {k: m.get(k) for k in FIGURES}


def line(f):
    """A finished checkpoint run's progress line."""
    def g(k):
        v = f.get(k)
        return "-" if v is None else f"{v:.3f}"
    return (f"{g('checkpoint_size_GB')} GiB per checkpoint: write "
            f"{g('save_checkpoint_io_mean_GB_per_second')} GiB/s, read "
            f"{g('load_checkpoint_io_mean_GB_per_second')} GiB/s (means of the "
            f"per-checkpoint rates)")
