"""The job's ranks from MPI (:class:`World`), and torch.distributed's default group started
from them (:func:`init_process_group`): what every command that runs ranks needs, below the
training and checkpoint packages that both use it (:mod:`hpcio.train.dist` re-exports it).

``torch.distributed`` is started from MPI (rank 0 picks an address and a free port and
broadcasts them over MPI), so no ``torchrun`` and no ``MASTER_ADDR`` juggling in job
scripts; setting ``MASTER_ADDR`` / ``MASTER_PORT`` still overrides the choice.
"""

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from .errors import HpcioError
from .measure.clock import mpi_started
from .measure.clock import offsets as clock_offsets
from .mpiutil import node_comm, on_root

__all__ = ["World", "init_world", "free_port", "master_address", "init_process_group"]


@dataclass
class World:
    """This process's place in the job: global and node-local rank, node count."""

    comm: object  # MPI.COMM_WORLD
    rank: int
    size: int
    local_rank: int
    local_size: int
    nodes: int
    node: int  # index of this rank's node (0..nodes-1, ordered by the node's lowest rank)
    hostname: str
    node_comm: object = None
    mpi_init_unix: float = None  # when MPI_Init returned, on this rank's clock
    clock_offset_s: float = 0.0  # this node's clock minus rank 0's (measure.clock)
    clock_rtt_s: float = 0.0  # the round trip that offset comes from (error <= half)


def init_world(comm=None):
    """Rank, size and node-local rank from MPI (shared-memory split of the communicator)."""
    started = mpi_started()
    from mpi4py import MPI  # mpi4py: importing it starts MPI (after the clock's own start)
    comm = comm or MPI.COMM_WORLD
    node = node_comm(comm)
    local_rank, local_size = node.rank, node.size
    leader = 1 if local_rank == 0 else 0
    # node index = number of node leaders with a lower rank (one exscan, no gather)
    before = comm.exscan(leader, op=MPI.SUM) or 0  # None on rank 0
    index = node.bcast(before, root=0)
    nodes = comm.allreduce(leader, op=MPI.SUM)
    offset, rtt = clock_offsets(comm, node)
    return World(comm, comm.rank, comm.size, local_rank, local_size, nodes, index,
                 socket.gethostname(), node, started, offset, rtt)


def free_port():
    """A TCP port nobody listens on right now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def master_address(world):
    """The address the other ranks reach rank 0 at: ``MASTER_ADDR`` if set; on one node
    the loopback; else the first non-loopback address rank 0's hostname resolves to (or
    the hostname itself, left to the other nodes' resolver)."""
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    if world.nodes == 1:
        return "127.0.0.1"
    try:
        addrs = socket.gethostbyname_ex(world.hostname)[2]
    except OSError:
        addrs = []
    for a in addrs:
        if not a.startswith("127."):
            return a
    return world.hostname


def _rendezvous(world):
    """(address, port) of rank 0 for torch.distributed's TCP store."""
    try:
        return master_address(world), int(os.environ.get("MASTER_PORT") or free_port())
    except OSError as e:
        raise HpcioError(f"cannot pick an address for torch.distributed: {e}")


def init_process_group(world, backend):
    """torch.distributed's default group over the MPI job's ranks (collective): rank 0's
    address and a free port, broadcast over MPI."""
    import torch.distributed as td  # torch: seconds; only runs that start a group
    addr, port = on_root(world.comm, lambda: _rendezvous(world), share=True)
    td.init_process_group(backend, init_method=f"tcp://{addr}:{port}",
                          rank=world.rank, world_size=world.size,
                          timeout=timedelta(seconds=int(
                              os.environ.get("HPCIO_DIST_TIMEOUT", "600"))))
