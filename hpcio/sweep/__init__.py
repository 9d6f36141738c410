"""The ``sweep`` command (``python -m hpcio.sweep``): one ``hpcio.train`` job per point of a
sweep, repeats interleaved, resumable, into one sweep directory.

    command.py    the parser, the settings (spec file, then flags) and ``main``
    spec.py       the spec's keys, each checked by one table (SPEC), and the points
    sweepdir.py   the sweep directory (SweepDir): sweep.json, the lock, runs/, logs/
    loop.py       the loop: each attempt recorded before it starts and after it ends
    supervise.py  one train job: its own session, signals forwarded, parent-death signal
    outcome.py    what a finished job says: its status, figures, the line that says why
    search.py     ``--find-max-accelerators``: MLPerf Storage's search as sweep points
"""

from .command import build_parser, main
from .loop import STATUSES
from .outcome import error_line, outcome
from .spec import Point, points
from .sweepdir import SweepDir

__all__ = ["Point", "points", "outcome", "error_line", "keep_stderr", "build_parser", "main",
           "STATUSES", "SweepDir"]


def keep_stderr(out, run_dir, stderr):
    """A run that did not finish: its stderr in full, as logs/<run>.stderr of the sweep
    directory ``out`` (:meth:`SweepDir.keep_stderr`). Returns the path, or None."""
    return SweepDir(out).keep_stderr(run_dir, stderr)
