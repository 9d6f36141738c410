"""Failure containment: one clear line, a non-zero exit, and every rank ends."""

import os
import sys
import time
import traceback

__all__ = ["HpcioError", "guard", "abort"]


class HpcioError(Exception):
    """A user-facing error: printed as one line, exit code 2.

    ``everywhere=True`` says every rank raises the same error (bad flags, a check whose
    result was broadcast): then only rank 0 prints it, so 64 ranks give one message.
    """

    def __init__(self, message, everywhere=False):
        super().__init__(message)
        self.everywhere = everywhere


def _world():
    """(rank, size, comm) if MPI is initialised, else (0, 1, None)."""
    try:
        from mpi4py import MPI
    except ImportError:  # pragma: no cover - mpi4py is a dependency
        return 0, 1, None
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return 0, 1, None
    comm = MPI.COMM_WORLD
    return comm.Get_rank(), comm.Get_size(), comm


def _end(code, comm, size):
    sys.stdout.flush()
    sys.stderr.flush()
    if comm is not None and size > 1:
        time.sleep(0.5)  # let the launcher forward the message before the abort kills us
        comm.Abort(code)
    os._exit(code)


def abort(message, code):
    """Print ``message`` (one line) and end the whole job now. Safe from any thread (a
    watchdog), while the main thread is blocked in MPI (mpi4py asks for
    MPI_THREAD_MULTIPLE)."""
    print(message, file=sys.stderr, flush=True)
    rank, size, comm = _world()
    _end(code, comm, size)


def guard(main, prog="hpcio"):
    """Run ``main()``; on any error print one line (or the traceback of an unexpected
    error, once, naming the rank) and end the whole MPI job with a non-zero code.

    Without this, an exception on one rank leaves the others waiting in a collective.
    """
    try:
        code = main()
    except HpcioError as e:
        rank, size, comm = _world()
        if rank == 0 or not e.everywhere:
            where = f" (rank {rank})" if size > 1 and not e.everywhere else ""
            print(f"{prog}: error{where}: {e}", file=sys.stderr, flush=True)
        elif size > 1:
            time.sleep(3.0)  # let rank 0 print and abort first
        _end(2, comm, size)
    except KeyboardInterrupt:
        rank, size, comm = _world()
        if rank == 0:
            print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        _end(130, comm, size)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            rank, size, comm = _world()
            _end(code, comm, size)
        raise
    except BaseException:
        rank, size, comm = _world()
        tb = traceback.format_exc()
        print(f"{prog}: unexpected error on rank {rank} of {size}:\n{tb}",
              file=sys.stderr, flush=True)
        _end(1, comm, size)
    return code
