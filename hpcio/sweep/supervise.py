"""Running one train job under the sweep: its own session, signals to the sweep passed on to
it, and a parent-death signal so that it never runs on unrecorded after the sweep dies."""

import ctypes
import os
import signal
import subprocess

__all__ = ["Forward", "parent_death_signal", "run_job", "PR_SET_PDEATHSIG"]

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Forward:
    """While a run is going, SIGINT and SIGTERM to the sweep are passed to its launcher
    (mpiexec forwards them to the ranks, which stop at the same step and write what they
    measured); the sweep then records the run, and stops. Runs start in a session of their
    own, so a Ctrl-C at the terminal reaches them once, through here. A context manager:
    the sweep's own handlers come back when it ends."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum, self.child = None, None
        self._old = {}

    def __enter__(self):
        self._old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)

    def _handle(self, signum, frame):
        self.signum = signum
        if self.child is not None and self.child.poll() is None:
            try:
                self.child.send_signal(signum)
            except ProcessLookupError:
                pass


def parent_death_signal():
    """A function for ``preexec_fn``: the run gets SIGTERM if the sweep dies (SIGKILL
    included), so it stops and writes what it measured instead of running on unrecorded.
    None where there is no prctl (not Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm():
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the sweep died before the line above
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def run_job(cmd, forward):
    """Run one job, signals forwarded; returns (returncode, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=parent_death_signal())
    forward.child = proc
    try:
        if forward.signum is not None:  # it came while the job was starting
            proc.send_signal(forward.signum)
        _, err = proc.communicate()
    finally:
        forward.child = None
    return proc.returncode, err
