"""The sweep directory: where each of its files is, writing them and reading them back.

Layout (every file written atomically: a reader sees the old file or the complete new one)::

    sweep.json      the record: settings, and every run with its point, run directory,
                    status and why, earlier attempts in its ``history``; a search's
                    answer under ``search``. Read back through
                    :mod:`hpcio.measure.schema` (``sweep_record``) to resume
    sweep.lock      held (flock) by the one sweep writing here; names its pid and host
    runs/<point>-r<repeat>[-a<attempt>]/
                    one run directory per attempt (:class:`hpcio.measure.rundir.RunDir`)
    logs/<run>.stderr
                    the whole stderr of a run that did not finish
    simulated/      ``hpcio.simulate predict -o`` past a search's largest count
"""

import fcntl
import os
import socket
import sys
from contextlib import contextmanager

from ..errors import HpcioError
from ..fsutil import atomic_json, atomic_write
from ..measure import schema
from ..measure.schema import Invalid

__all__ = ["SweepDir", "recorded_dirs"]


class SweepDir:
    """A sweep's directory: the names in the module docstring, in one place. The record
    is written whole each time (:meth:`write_record`) and read back checked
    (:meth:`record`): a file that is not a sweep record is one line, and kept."""

    RECORD = "sweep.json"
    LOCK = "sweep.lock"
    RUNS = "runs"
    LOGS = "logs"
    SIMULATED = "simulated"

    def __init__(self, path: str):
        self.path = path

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def record_file(self) -> str:
        return self.file(self.RECORD)

    @property
    def simulated_dir(self) -> str:
        return self.file(self.SIMULATED)

    def run_dir(self, name: str) -> str:
        return os.path.join(self.path, self.RUNS, name)

    def stderr_file(self, run_dir: str) -> str:
        return os.path.join(self.path, self.LOGS, os.path.basename(run_dir) + ".stderr")

    def make(self) -> None:
        """The directory and its runs/; a path that cannot be one is one line."""
        try:
            os.makedirs(self.file(self.RUNS), exist_ok=True)
        except OSError as e:
            raise HpcioError(f"--out {self.path}: cannot make the sweep directory "
                             f"({e.strerror}: {e.filename})") from None

    # --- the record ----------------------------------------------------------------------

    def record(self):
        """sweep.json as written, or None when there is none yet."""
        path = self.record_file
        try:
            return schema.load(path, "sweep_record")[0]
        except FileNotFoundError:
            return None
        except Invalid as e:
            if e.field is None:
                raise HpcioError(f"{path}: unreadable sweep record ({e.problem or e}); move "
                                 f"it away to start over") from None
            why = (f"no {e.field.rsplit('.', 1)[-1]!r} field"
                   if e.problem == "missing" else "a field of the wrong type")
            raise HpcioError(f"{path}: not a sweep record hpcio wrote ({why}); move it away "
                             f"to start over") from None

    def write_record(self, doc: dict) -> None:
        atomic_json(self.record_file, doc)

    def keep_stderr(self, run_dir: str, stderr: str):
        """A run that did not finish: its stderr in full, as logs/<run>.stderr (the run's
        own directory may not exist). Returns the path, or None for an empty stderr."""
        if not stderr.strip():
            return None
        path = self.stderr_file(run_dir)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = stderr.encode()
        atomic_write(path, lambda f: f.write(data))
        return path

    def fresh_run_dir(self, run: dict, name: str, recorded: set) -> str:
        """The directory of this attempt of ``run``: ``name``, ``name-aN`` from the
        attempt number on, the first one not on disk (hpcio.train refuses an existing
        --out). One on disk that the record does not list (a sweep killed before it said
        so) goes into the run's history, so the record names every run directory there
        is."""
        k = run["attempts"]
        while True:
            d = self.run_dir(name + (f"-a{k}" if k > 1 else ""))
            if not os.path.lexists(d):
                return d
            if d not in recorded:
                run.setdefault("history", []).append(
                    {"run_dir": d, "status": "interrupted",
                     "error": "found on disk, not in the record: a sweep ended while it ran"})
                recorded.add(d)
            k += 1

    # --- the lock ------------------------------------------------------------------------

    @contextmanager
    def locked(self):
        """Hold sweep.lock (flock, exclusive) while the block runs: a second sweep into
        this directory is refused in one line. The kernel releases it when the holder
        dies, even by SIGKILL, so no stale lock outlives a sweep; the file stays (removing
        it would race with a sweep opening it). Its descriptor is not inherited by the
        runs. Where the file system has no locks, said in one line, the block runs
        unlocked."""
        fd = self._lock()
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)

    def _lock(self):
        path = self.file(self.LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise HpcioError(f"{self.path}: another sweep is running into it ({holder}); "
                             f"wait for it to end or choose another --out") from None
        except OSError as e:
            os.close(fd)
            print(f"hpcio.sweep: warning: {path}: cannot lock ({e.strerror}): make sure no "
                  f"other sweep writes into {self.path}", file=sys.stderr, flush=True)
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        return fd


def recorded_dirs(doc):
    """Every run directory the record lists, the current attempts' and earlier ones'."""
    return {d for r in doc["runs"] for d in [r.get("run_dir")] +
            [h.get("run_dir") for h in r.get("history", [])] if d}
