"""A bus error in a memory-mapped shard, turned into one line naming the shard.

A page of a mapped file past its end (the file shrank under the map) is a SIGBUS in the C
code that touches it: Python cannot catch it (a ``signal`` handler returns to the faulting
instruction, which faults again), and checking the files before each batch leaves the
instant between the check and the read. So the process is allowed to die, and a witness
outside it says why: while a reader maps shards (:class:`MapWatch`), ``faulthandler``
writes a fatal signal's report into a pipe to a small watcher process instead of stderr;
the watcher, still alive, stats the mapped files and prints the error line the rank would
have printed (``<prog>: error (rank R): <shard>: N bytes, expected M: the file shrank during
the run``), or, when no file changed, the fault with its stacks saved to a file.

Stdlib only, no numpy and no MPI: the watcher imports this module in a fresh interpreter.
"""

import faulthandler
import json
import os
import subprocess
import sys
import tempfile

from .errors import program, size_message

__all__ = ["MapWatch", "main"]

WAIT = 5.0  # s: how long closing waits for the watcher to end
READY = b"+"  # the watcher's word that it has the file list and listens


class MapWatch:
    """While open, a fatal signal in this process (a SIGBUS from a shrunk mapped file,
    any other fatal signal too) ends with one line from the watcher instead of a bare
    signal death. ``files``: (path, size the index says) of the mapped files."""

    def __init__(self, files, rank=0, size=1):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = f"import sys; sys.path.insert(0, {root!r}); from hpcio.mapfault import main; main()"
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", code],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     close_fds=True)
        head = {"prog": program(), "rank": rank, "size": size,
                "files": [[str(p), int(n)] for p, n in files]}
        self.proc.stdin.write(json.dumps(head).encode() + b"\n")
        self.proc.stdin.flush()
        # a fault right after this must find the watcher listening, not still starting:
        # the launcher stops forwarding its line soon after the rank's death
        if self.proc.stdout.read(1) != READY:
            self.proc.wait()
            raise OSError(f"the fault watcher ended at start (exit {self.proc.returncode})")
        self.proc.stdout.close()
        self.was = faulthandler.is_enabled()
        faulthandler.enable(file=self.proc.stdin, all_threads=True)

    def close(self):
        proc, self.proc = getattr(self, "proc", None), None
        if proc is None:
            return
        faulthandler.disable()
        if self.was:  # on again, to stderr (where else it wrote is not known)
            try:
                faulthandler.enable()
            except (AttributeError, OSError, ValueError):  # a stderr without a descriptor
                pass
        proc.stdin.close()  # end of input without a report: the watcher leaves quietly
        try:
            proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _read_head(fd):
    buf = b""
    while b"\n" not in buf:
        chunk = os.read(fd, 65536)
        if not chunk:
            return None, b""
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    return json.loads(line), rest


def _why(files):
    """The line for the first mapped file that is not its indexed size, else None."""
    for path, want in files:
        try:
            size = os.stat(path).st_size
        except OSError as e:
            return f"{path}: {e.strerror} during the run (expected {want} bytes)"
        if size != want:
            return size_message(path, size, want, "during the run")
    return None


def main():
    """The watcher: wait for the rank's report or the end of its input."""
    head, report = _read_head(0)
    if head is None:
        return
    os.write(1, READY)
    while not report:
        chunk = os.read(0, 65536)
        if not chunk:
            return  # the reader closed: no fault
        report += chunk
    where = f" (rank {head['rank']})" if head["size"] > 1 else ""
    why = _why(head["files"])
    if why is None:  # a fatal signal, but every mapped file is as indexed: say which
        first = report.decode(errors="replace").strip().splitlines()[0]
        fd, path = tempfile.mkstemp(prefix=f"hpcio-fault-rank-{head['rank']}-", suffix=".txt")
        with os.fdopen(fd, "wb") as f:
            f.write(report)
            while True:  # the rest of the stacks, until the process is gone
                chunk = os.read(0, 65536)
                if not chunk:
                    break
                f.write(chunk)
        print(f"{head['prog']}: rank {head['rank']}: {first}; stacks in {path}",
              file=sys.stderr, flush=True)
        return
    print(f"{head['prog']}: error{where}: {why}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
