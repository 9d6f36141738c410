"""Where a command may write its output: never into a run's or a dataset's directory (a
result there would replace what the run or dataset is made of), and never
over a file hpcio did not write, unless ``--force``. A file is hpcio's when the command
that writes it recognises its own schema in it (``ours``): an earlier export, calibration
or prediction is replaced, anything else is refused before any work is done. A sweep's
directory is not one of them: the sweep writes its own simulation there, and its runs
inside it are run directories."""

import os

from .data.dataset import is_dataset
from .errors import HpcioError
from .measure.rundir import RUN_MARKER, RunDir

__all__ = ["holder", "claim_file", "claim_dir"]

#: what makes a directory one hpcio never writes into: (test, what it is)
HOLDERS = [
    (lambda d: RunDir.is_run(d) or os.path.exists(os.path.join(d, RUN_MARKER)), "run"),
    (is_dataset, "dataset"),
]


def holder(path):
    """(kind, directory) of the run or dataset directory that is ``path`` or holds it (the
    nearest), or None."""
    d = os.path.abspath(path)
    while True:
        if os.path.isdir(d):
            for test, kind in HOLDERS:
                if test(d):
                    return kind, d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def _refuse_holder(path, option, start=None):
    h = holder(start or path)
    if h:
        kind, d = h
        raise HpcioError(f"{option} {path}: {'is' if os.path.abspath(path) == d else 'inside'}"
                         f" the {kind} directory {d}: hpcio never writes its outputs into a "
                         f"{kind}'s directory; give a path outside it")


def claim_file(path, option, ours, force=False):
    """Before the work: refuse output file ``path`` (given as ``option``) if it lies in a
    run or dataset directory, is a directory, or exists and ``ours(path)`` does not
    recognise it (unless ``force``)."""
    _refuse_holder(path, option, os.path.dirname(os.path.abspath(path)))
    if os.path.isdir(path):
        raise HpcioError(f"{option} {path}: is a directory: give the file to write")
    if os.path.lexists(path) and not force and not _recognised(ours, path):
        raise HpcioError(f"{option} {path}: exists and hpcio did not write it (--force "
                         f"replaces it)")


def claim_dir(path, option, ours, force=False):
    """Before the work: refuse output directory ``path`` if it is or lies in a run or
    dataset directory, is not a directory, or holds a file of the names in ``ours``
    ({name: recogniser}) that its recogniser does not recognise (unless ``force``)."""
    _refuse_holder(path, option)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise HpcioError(f"{option} {path}: exists and is not a directory")
    for name, test in ours.items():
        f = os.path.join(path, name)
        if os.path.lexists(f) and not force and not _recognised(test, f):
            raise HpcioError(f"{option} {path}: its {name} exists and hpcio did not write it "
                             f"(--force replaces it)")


def _recognised(ours, path):
    try:
        return bool(ours(path))
    except Exception:  # whatever a recogniser meets in a file not its own: not ours
        return False
