"""The ranks' clocks: when MPI started on each rank, and how far each node's clock is from
rank 0's.

Darshan's DXT times are seconds since the rank's own Darshan start, which Darshan takes
inside ``MPI_Init``; the log keeps only the smallest of those starts, a minimum over
clocks of different nodes. :func:`mpi_started` stamps the moment ``MPI_Init`` returned on
this rank, on this rank's clock: the rank's Darshan start is that stamp less Darshan's own
set-up, which is the same on every rank, so ``log start + (stamp - smallest stamp)`` is
the rank's Darshan start on its own clock, whatever the skew between starts or the offset
between nodes (``hpcio.explain.tables.dxt_shifts``).

To put several ranks on one time line (a figure of every rank's steps) the nodes' clocks
must agree: :func:`offsets` measures each node's offset from rank 0's clock with MPI
ping-pongs at start (Cristian's method: the reply's stamp against the midpoint of the
round trip with the shortest round trip; the error is at most half that round trip).
"""

import sys
import time

import numpy as np

__all__ = ["mpi_started", "offsets", "ROUNDS"]

ROUNDS = 8  # ping-pongs per node; the one with the shortest round trip is kept
_started = None


def mpi_started():
    """Unix time (this rank's clock) at which ``MPI_Init`` returned: stamped when this
    function first imports mpi4py; if something imported it before, the stamp is later
    than the init by that much (None when it cannot be known)."""
    global _started
    if _started is None:
        fresh = "mpi4py.MPI" not in sys.modules
        from mpi4py import MPI  # noqa: F401  (initialises MPI)
        _started = time.time() if fresh else float("nan")
    return None if _started != _started else _started


def offsets(comm, node, rounds=ROUNDS):
    """(offset_s, rtt_s) of this rank's node: its clock minus rank 0's, and the round trip
    the estimate came from (its error is at most half of it). Rank 0 ping-pongs with each
    node's first rank in turn; each node's first rank shares the result with its node.
    Collective over ``comm`` and ``node`` (the node communicator)."""
    if comm is None or comm.Get_size() == 1:
        return 0.0, 0.0
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    leader = node.Get_rank() == 0
    leaders = np.flatnonzero(np.asarray(comm.allgather(leader)))
    buf = np.zeros(2)
    if comm.Get_rank() == 0:
        est = {0: (0.0, 0.0)}
        for peer in leaders[leaders != 0]:
            best = (np.inf, 0.0)
            for _ in range(rounds):
                t1 = time.time()
                comm.Send(buf[:1], dest=int(peer), tag=71)
                comm.Recv(buf[:1], source=int(peer), tag=72)
                t2 = time.time()
                if t2 - t1 < best[0]:
                    best = (t2 - t1, float(buf[0]) - (t1 + t2) / 2)
            est[int(peer)] = (best[1], best[0])
            buf[:] = est[int(peer)]
            comm.Send(buf, dest=int(peer), tag=73)
        buf[:] = est[0]
    elif leader:
        for _ in range(rounds):
            comm.Recv(buf[:1], source=0, tag=71)
            buf[0] = time.time()
            comm.Send(buf[:1], dest=0, tag=72)
        comm.Recv(buf, source=0, tag=73, status=MPI.Status())
    node.Bcast(buf, root=0)
    return float(buf[0]), float(buf[1])
