"""A training job running in the background, for tests that signal, stop or kill its ranks."""

import glob
import os
import signal
import sys
import time

from .launch import PIPE, spawn
from .mpi import mpiexec

__all__ = ["Job", "rank_pids"]


def _parents():
    """{pid: parent pid} of every process (from /proc)."""
    out = {}
    for st in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(st) as f:
                parts = f.read().rsplit(")", 1)[1].split()
            out[int(st.split("/")[2])] = int(parts[1])
        except (OSError, IndexError, ValueError):
            pass
    return out


def _children(pid, parents=None):
    """Every descendant process id of ``pid``."""
    kids = {}
    for c, p in (parents or _parents()).items():
        kids.setdefault(p, []).append(c)
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None


def rank_pids(pid, module="hpcio.train"):
    """The pids of the ranks (processes running ``module``) under launcher ``pid``, in
    rank order (the launcher starts them in order); a rank's own child that has not yet
    exec'd (git for the run's provenance) still shows the rank's command line, and is
    not a rank."""
    parents = _parents()
    found = {c for c in _children(pid, parents) if module.encode() in (_cmdline(c) or b"")}
    return sorted(c for c in found if parents.get(c) not in found)


class Job:
    """``mpiexec -n n python -m hpcio.train args`` in its own session (so a Ctrl-C can go
    to the whole group, as a terminal sends it); a context manager that leaves nothing
    running: stopped ranks are continued and every process of the job is killed."""

    def __init__(self, n, args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        self.p = spawn([mpiexec(), "-n", n, sys.executable, "-m", "hpcio.train", *args],
                       stdout=PIPE, stderr=PIPE, text=True, env=e, start_new_session=True)
        self.pids, self.cmdlines = [], {}
        self.stdout = self.stderr = ""

    def __enter__(self):
        return self

    def ranks(self, n):
        """The ranks' pids, once all ``n`` are up."""
        deadline = time.monotonic() + 60
        while len(self.pids) < n and time.monotonic() < deadline:
            self.pids = rank_pids(self.p.pid)
            time.sleep(0.1)
        assert len(self.pids) == n, self.pids
        self.cmdlines = {pid: _cmdline(pid) for pid in self.pids}
        return self.pids

    def wait_for(self, path, timeout=90):
        """Wait until ``path`` exists (the job still running)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            assert self.p.poll() is None, self.finish()
            assert time.monotonic() < deadline, f"no {path} after {timeout} s"
            time.sleep(0.1)

    @property
    def returncode(self):
        """The job's exit code (None while it runs)."""
        return self.p.returncode

    def finish(self, timeout=60):
        """Wait for the job; returns its exit code (stdout/stderr kept)."""
        self.stdout, self.stderr = self.p.communicate(timeout=timeout)
        return self.p.returncode

    def __exit__(self, *exc):
        if not self.cmdlines:
            self.cmdlines = {pid: _cmdline(pid) for pid in rank_pids(self.p.pid)}
        if self.p.poll() is None:
            self.p.kill()
        for pid, cmd in self.cmdlines.items():  # a rank left over, and still ours
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    if _cmdline(pid) == cmd:
                        os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        self.p.communicate()
