"""MPI patterns every command repeats: work on rank 0 with its error raised everywhere,
the node's communicator, array broadcasts, a barrier that does not spin.

mpi4py is imported inside these functions, not at module level: importing it initialises
MPI, and ``--help``, dataset tools and the analysis must work without a launcher.
"""

import ctypes
import os
import sys
import time

import numpy as np

from .errors import HpcioError

__all__ = ["launcher", "rank_size", "on_root", "raise_everywhere", "node_comm", "bcast_array",
           "least_over_ranks", "idle_barrier", "finalize"]


def launcher():
    """``mpiexec`` beside this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def rank_size(comm):
    """(rank, size) of ``comm``; (0, 1) without one."""
    return (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())


def raise_everywhere(comm, err):
    """Raise ``err`` (a message from rank 0, or None) on every rank of ``comm``: one
    line in all, since every rank raises the same error (collective)."""
    if comm is not None and comm.Get_size() > 1:
        err = comm.bcast(err, root=0)
        if err:
            raise HpcioError(err, everywhere=True)
    elif err:
        raise HpcioError(err)


def on_root(comm, fn, share=False):
    """Run ``fn()`` on rank 0 only; an :class:`HpcioError` there is raised on every rank
    (collective). Returns ``fn()``'s value on rank 0, and on every rank with ``share``
    (one pickled broadcast: for small values; arrays go through :func:`bcast_array`)."""
    rank, size = rank_size(comm)
    err, val = None, None
    if rank == 0:
        try:
            val = fn()
        except HpcioError as e:
            err = str(e)
    raise_everywhere(comm, err)
    if share and size > 1:
        val = comm.bcast(val, root=0)
    return val


def node_comm(comm):
    """The ranks of ``comm`` that share this rank's node (``COMM_TYPE_SHARED``, ordered by
    rank); the caller frees it. None without ``comm``."""
    if comm is None:
        return None
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())


def bcast_array(comm, arr, root=0):
    """Broadcast a numpy array with one buffer broadcast (no pickling of its data)."""
    meta = comm.bcast(None if comm.rank != root else (arr.dtype.str, arr.shape), root=root)
    if comm.rank != root:
        arr = np.empty(meta[1], dtype=np.dtype(meta[0]))
    if arr.dtype.kind == "U":
        view = arr.view(np.uint8) if arr.size else np.empty(0, np.uint8)
        comm.Bcast(view, root=root)
    elif arr.size:
        comm.Bcast(np.ascontiguousarray(arr), root=root)
    return arr


def least_over_ranks(comm, arr, root=0):
    """On ``root``, the element-wise least of every rank's float array, cut to the shortest
    (one MIN reduction, no pickling); None on the other ranks. A collective."""
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    n = comm.allreduce(len(arr), op=MPI.MIN)
    out = np.empty(n) if comm.rank == root else None
    comm.Reduce(np.ascontiguousarray(arr[:n], dtype=np.float64), out, op=MPI.MIN, root=root)
    return out


def idle_barrier(comm, poll_s=0.002):
    """A barrier that sleeps while it waits (MPICH's blocking barrier spins a core: on a
    small node that core is taken from the rank being timed)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_s)


def _loaded_mpi_libraries():
    """Paths of the MPI libraries this process has mapped (``libmpi*.so*``)."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                name = os.path.basename(path)
                if name.startswith("libmpi") and ".so" in name and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _c_finalize():
    """``MPI_Finalize`` as a ctypes function, or None. The global scope first: a Darshan
    preload wraps MPI_Finalize there to write its log; then the MPI library mpi4py loaded
    (mpi4py opens it without RTLD_GLOBAL)."""
    for lib in (None, *_loaded_mpi_libraries()):
        try:
            fn = ctypes.CDLL(lib).MPI_Finalize
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_int, []
        return fn
    return None


def finalize():
    """``MPI_Finalize`` with the GIL released, so that a watchdog thread can still end a
    finalize that hangs (a rank stopped after its last write holds the others there for
    ever): mpi4py's ``MPI.Finalize`` keeps the GIL for the whole call, a ctypes call
    releases it. mpi4py's own when no library exports the symbol. Nothing when MPI is not
    running."""
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return
    fn = _c_finalize()
    if fn is None:
        MPI.Finalize()
        return
    rc = fn()
    if rc != 0:
        raise RuntimeError(f"MPI_Finalize failed (MPI error {rc})")
