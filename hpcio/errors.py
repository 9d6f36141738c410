"""Failure containment: one clear line, a non-zero exit, and every rank ends.

Every command runs its ``main`` under :func:`guard`. Whatever goes wrong on whichever rank,
the job prints one line and ends (an MPI abort, so no rank waits in a collective for one
that died):

* an :class:`HpcioError` (a failure hpcio expected: bad flags, bad data) prints
  ``<cmd>: error: <what>`` (``error (rank R)`` when only that rank saw it); when every
  rank raised it, the ranks meet, finalize MPI and exit 2 instead of aborting, so the
  launcher adds no abort banner to the one line;
* Ctrl-C (KeyboardInterrupt), or a signal :func:`interrupt_on` turned into
  :class:`Interrupted`, prints ``<cmd>: interrupted`` and exits 128 + the signal's number,
  as a shell reports it;
* anything else prints ``<cmd>: rank R: <what failed> (<Type>)`` and writes the traceback
  to ``error-rank-R.txt`` in the run's directory (:func:`report_to`; a temporary file
  before there is one), or to stderr with ``HPCIO_DEBUG=1``.
"""

import errno
import faulthandler
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping

__all__ = ["HpcioError", "lookup", "Interrupted", "guard", "abort", "report_to", "describe", "program",
           "size_message", "interrupt_on"]

_report_dir = None
_prog = "hpcio"  # the running command's name, as its error lines begin
FINISH_WAIT = 10.0  # s: how long ranks that failed alike wait for each other


class HpcioError(Exception):
    """A user-facing error: printed as one line, exit code 2.

    ``everywhere=True`` says every rank raises the same error (bad flags, a check whose
    result was broadcast): then only rank 0 prints it, so 64 ranks give one message.
    ``once`` names a file that ranks meeting the same failure at once, with no rank 0 to
    speak for them (a node gone), race to create: the first prints, the others only end.
    """

    def __init__(self, message, everywhere=False, once=None):
        super().__init__(message)
        self.everywhere = everywhere
        self.once = once


def lookup(table, key, what, choices=None):
    """``table[key]`` (``key`` itself where ``table`` is a list of names), or one line
    worded alike for every registry: ``unknown WHAT 'KEY' (choose from a, b, c)``
    (``choices``: the names to offer, the table's own by default), raised on every rank,
    since every rank looks the name up."""
    try:
        if isinstance(table, Mapping):
            return table[key]
        if key in table:
            return key
        raise KeyError(key)
    except (KeyError, TypeError):
        names = ", ".join(map(str, table if choices is None else choices))
        raise HpcioError(f"unknown {what} {key!r} (choose from {names})",
                         everywhere=True) from None


def _first_to_say(path):
    """True unless another rank already created ``path`` (see HpcioError's ``once``); a
    file that cannot be made lets every rank speak."""
    if path is None:
        return True
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


class Interrupted(KeyboardInterrupt):
    """A signal that ends the command where it stands, as Ctrl-C does (see
    :func:`interrupt_on`); ``signum`` gives the exit code."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupt_on(signals=(signal.SIGTERM,)):
    """From now on ``signals`` raise :class:`Interrupted` in the main thread, so that
    :func:`guard` ends the command with one line and 128 + the signal (Python's default for
    SIGTERM is to die at once with no line). For a phase with nothing to flush: a command
    that has something installs its own handler over this one."""
    def handle(signum, frame):
        raise Interrupted(signum)
    for s in signals:
        signal.signal(s, handle)


def report_to(path):
    """Write tracebacks of unexpected errors into ``path`` (the run's directory) from now on."""
    global _report_dir
    _report_dir = path


def program():
    """The running command's name (``hpcio.train``), as :func:`guard` was given it."""
    return _prog


def size_message(path, size, want, when):
    """The one line for a file of ``size`` bytes where the index says ``want``."""
    how = "shrank" if size < want else "grew"
    return f"{path}: {size} bytes, expected {want}: the file {how} {when}"


def describe(exc):
    """What failed, in one line: ``path: strerror`` for OS errors, the first line of the
    message otherwise, with the exception's type in parentheses."""
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else ""
        what = f"{where}: {exc.strerror}" if where else exc.strerror
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what += " (disk or quota full)"
    elif isinstance(exc, MemoryError):
        what = "out of memory" + (f": {exc}" if str(exc) else "")
    else:
        text = str(exc).strip()
        what = text.splitlines()[0] if text else "failed"
    return f"{what} ({type(exc).__name__})"


def _world():
    """(rank, size, comm) if MPI is initialised, else (0, 1, None)."""
    try:
        from mpi4py import MPI  # mpi4py: importing it starts MPI
    except ImportError:  # pragma: no cover - mpi4py is a dependency
        return 0, 1, None
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return 0, 1, None
    comm = MPI.COMM_WORLD
    return comm.Get_rank(), comm.Get_size(), comm


def _launched_rank():
    """This process's rank as its launcher set it (before MPI starts), else 0."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _end(code, comm, size):
    sys.stdout.flush()
    sys.stderr.flush()
    if comm is not None and size > 1:
        time.sleep(0.5)  # let the launcher forward the message before the abort kills us
        comm.Abort(code)
    os._exit(code)


def _finish_together(code, comm):
    """End without an abort when every rank raised the same error: a barrier (bounded by
    FINISH_WAIT, polled, so a rank that is elsewhere cannot hold the others), then
    MPI_Finalize and exit. Returns only if the others did not come; the caller aborts."""
    req = comm.Ibarrier()
    deadline = time.monotonic() + FINISH_WAIT
    while not req.Test():
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    # MPI_Finalize holds the GIL: a thread still inside MPI could keep it forever, so a
    # C-level timer ends the process (with its stacks on stderr) if it does not return
    faulthandler.dump_traceback_later(FINISH_WAIT, exit=True)
    MPI.Finalize()
    os._exit(code)


def abort(message, code, mpi=True):
    """Print ``message`` (one line) and end the whole job now. Safe from any thread (a
    watchdog), while the main thread is blocked in MPI (mpi4py asks for
    MPI_THREAD_MULTIPLE). ``mpi=False``: end this process only, without MPI_Abort (for a
    process inside MPI_Finalize, where an abort may hang too; the launcher then ends the
    other ranks, as for any rank that exits non-zero)."""
    print(message, file=sys.stderr, flush=True)
    rank, size, comm = _world() if mpi else (0, 1, None)
    _end(code, comm, size)


def _save_traceback(rank, text):
    """Where the traceback went (a file), or None when it went to stderr."""
    if os.environ.get("HPCIO_DEBUG") == "1":
        print(text, file=sys.stderr, end="", flush=True)
        return None
    for d in (_report_dir, tempfile.gettempdir()):
        if not d:
            continue
        name = f"error-rank-{rank}.txt" if d == _report_dir else \
            f"hpcio-error-rank-{rank}-{os.getpid()}.txt"
        path = os.path.join(d, name)
        try:
            with open(path, "w") as f:
                f.write(text)
            return path
        except OSError:
            continue
    return None


def guard(main, prog="hpcio"):
    """Run ``main()``; on any error print one line and end the whole MPI job with a
    non-zero code (see the module docstring).

    Without this, an exception on one rank leaves the others waiting in a collective.
    """
    global _prog
    _prog = prog
    try:
        code = main()
    except HpcioError as e:
        rank, size, comm = _world()
        if (rank == 0 or not e.everywhere) and _first_to_say(e.once):
            if rank > 0 and e.once is None:
                # ranks often meet the same failure together (a shard that changed):
                # rank 0 speaks and aborts first, so the job prints one line
                time.sleep(1.0)
            where = f" (rank {rank})" if size > 1 and not e.everywhere else ""
            print(f"{prog}: error{where}: {e}", file=sys.stderr, flush=True)
        if e.everywhere and comm is not None and size > 1:
            sys.stdout.flush()
            _finish_together(2, comm)
        _end(2, comm, size)
    except KeyboardInterrupt as e:
        rank, size, comm = _world()
        signum = getattr(e, "signum", signal.SIGINT)
        first = rank == 0 and _launched_rank() == 0
        if not first and signum != signal.SIGINT:
            # a signal to the whole job reaches every rank: rank 0 speaks and aborts
            # first, so the job prints one line; one sent to this rank alone is said here
            time.sleep(1.0)
        if first or signum != signal.SIGINT:  # Ctrl-C reaches every rank alike
            by = f" by {signal.Signals(signum).name}" if signum != signal.SIGINT else ""
            print(f"{prog}: interrupted{by}", file=sys.stderr, flush=True)
        _end(128 + signum, comm, size)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            rank, size, comm = _world()
            _end(code, comm, size)
        raise
    except BrokenPipeError:
        # the reader of our output went away (``| head``): nothing to say to anyone,
        # the shell's code for SIGPIPE; stdout pointed at /dev/null so that the
        # interpreter's own flush at exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rank, size, comm = _world()
        _end(128 + signal.SIGPIPE, comm, size)
    except BaseException as e:
        rank, size, comm = _world()
        if rank > 0:
            # the same failure on every rank (a bad value all ranks parsed): rank 0 speaks
            # and aborts first, so the job prints one line
            time.sleep(1.0)
        where = _save_traceback(rank, traceback.format_exc())
        more = f"; traceback in {where}" if where else ""
        print(f"{prog}: rank {rank}: {describe(e)}{more}", file=sys.stderr, flush=True)
        _end(1, comm, size)
    return code
