"""Every process a test starts, started here: ``launch`` (run to the end) and ``spawn``
(in the background). ``conftest.py`` marks a test that reaches either ``mpi`` (found in
its source, its helpers' and its fixtures'), and fails one that starts a process some
other way outside that tier, so ``-m 'not mpi'`` is a suite that launches nothing."""

import subprocess

__all__ = ["launch", "spawn", "PIPE", "DEVNULL", "TimeoutExpired"]

PIPE, DEVNULL, TimeoutExpired = subprocess.PIPE, subprocess.DEVNULL, subprocess.TimeoutExpired


def launch(cmd, timeout=180, capture=True, text=True, **kw):
    """``subprocess.run(cmd)`` with its output captured as text by default; the arguments
    turned into strings (paths, numbers)."""
    return subprocess.run([str(a) for a in cmd], capture_output=capture, text=text,
                          timeout=timeout, **kw)


def spawn(cmd, **kw):
    """``subprocess.Popen(cmd)``: a process the test talks to, signals or kills."""
    return subprocess.Popen([str(a) for a in cmd], **kw)
