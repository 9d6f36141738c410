"""What a finished train job says: its status from its exit code and run directory, its
figures, and the line of its stderr that says why it did not finish."""

import signal

from ..measure.rundir import RunDir
from ..measure.schema import Invalid
from .checkpoints import figures as checkpoint_figures

__all__ = ["outcome", "error_line", "figures", "FIGURES"]

# what sweep.json keeps of a finished run's summary
FIGURES = ("au_percent", "compute_percent", "stall_percent", "straggler_wait_percent",
           "exchange_percent", "h2d_percent", "ckpt_percent", "other_percent",
           "samples_per_s", "mib_per_s")

# the line that says why, by kind: hpcio's own, then MPI's fatal error (an abort inside
# MPI_Init is followed by the launcher's lines about killing the others)
WHY = (lambda ln: ln.startswith("hpcio."), lambda ln: "Fatal error" in ln)


def error_line(stderr):
    """The line of a failed run's stderr that says why."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    for kind in WHY:
        first = next((ln for ln in lines if kind(ln)), None)
        if first:
            return first
    return lines[-1] if lines else "failed with no message"


def _summary(run_dir):
    """The run's summary.json, or None."""
    try:
        return RunDir(run_dir).summary()[0]
    except (OSError, Invalid):
        return None


def figures(summary):
    """What sweep.json keeps of a run's summary: a train run's FIGURES, a checkpoint
    run's own (:data:`.checkpoints.FIGURES`)."""
    if (summary or {}).get("source") == "hpcio.checkpoint":
        return checkpoint_figures(summary)
    m = (summary or {}).get("metrics") or {}
    return {k: m.get(k) for k in FIGURES}


def _signalled(returncode):
    """The signal a run's exit code says ended it (128 + n, as hpcio.train and shells
    report it; -n from a launcher a signal ended), or None."""
    n = returncode - 128 if returncode > 128 else -returncode
    try:
        return signal.Signals(n) if n > 0 else None
    except ValueError:
        return None


def outcome(returncode, run_dir, stderr):
    """(status, details) of a finished run: ``done`` for exit 0 with a complete summary,
    and for a complete summary with the exit of a signal that came after it (the signal
    noted); ``cut_short`` for a run a signal stopped after writing what it measured;
    ``interrupted`` for one a signal ended before it wrote a summary; ``failed`` else."""
    summary = _summary(run_dir)
    cut = bool(summary and summary.get("cut_short"))
    sig = _signalled(returncode)
    if summary is not None and not cut and (returncode == 0 or sig is not None):
        late = {"signal": summary.get("signal_after_summary") or sig.name} if sig else {}
        return "done", {"figures": figures(summary), **late}
    if cut or (sig is not None and summary is not None):
        name = (summary or {}).get("signal_name") or (sig.name if sig else None)
        return "cut_short", {"signal": name, "error": error_line(stderr),
                             "figures": figures(summary)}
    if sig is not None:
        return "interrupted", {"signal": sig.name, "error": error_line(stderr)}
    return "failed", {"error": error_line(stderr)}
