"""The check a test makes of a command that must fail with one line."""

from .datasets import error_lines

__all__ = ["one_line"]


def one_line(p, prog="hpcio", rc=None, alone=True, raw=False):
    """The one line a failed command printed. ``p`` (a ``CompletedProcess``, or anything
    with ``returncode``, ``stdout`` and ``stderr``) exited non-zero (``rc``: with that
    status), printed no Python traceback, and exactly one line of its stderr starts with
    ``prog``; ``alone``: no other line either, blank lines and the MPI launcher's notices
    aside (:func:`error_lines`), or only blank lines aside with ``raw``. Returns that
    line."""
    err = p.stderr
    why = f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{err}"
    assert p.returncode not in (0, None) and rc in (None, p.returncode), why
    assert "Traceback" not in err, why
    lines = [ln for ln in err.splitlines() if ln.strip()] if raw else error_lines(err)
    ours = [ln for ln in lines if ln.startswith(prog)]
    assert len(ours) == 1 and (not alone or len(lines) == 1), why
    return ours[0]
