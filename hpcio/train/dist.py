"""Ranks, devices and data-parallel set-up, all derived from MPI.

MPI is the one source of truth for who is who: the same code runs under ``mpiexec``,
``mpirun`` and ``srun`` (pmi2/pmix), with no launcher-specific environment variables.
``torch.distributed`` is started from it (rank 0 picks an address and a free port and
broadcasts them over MPI), so no ``torchrun`` and no ``MASTER_ADDR`` juggling in job
scripts; setting ``MASTER_ADDR`` / ``MASTER_PORT`` still overrides the choice.

Backends (``--dist``), in a registry:

* ``torch`` (default): ``torch.distributed`` with NCCL on GPUs, gloo on CPUs, and the model
  wrapped in ``DistributedDataParallel``; on gloo a comm hook times each step's first
  gradient bucket (:class:`FirstBucket`).
* ``horovod``: Horovod's ``DistributedOptimizer`` over MPI. Optional: its last release
  (0.28.1) does not build against PyTorch >= 2.1 as shipped. ``make horovod``
  (scripts/install-horovod.sh) builds it into the venv against torch 2.13 and the venv's
  MPI; by hand::

      pip download --no-deps --no-binary=:all: horovod==0.28.1 && tar xf horovod-0.28.1.tar.gz
      cd horovod-0.28.1
      # C++17 is needed by torch >= 2.1 headers: in CMakeLists.txt and horovod/torch/CMakeLists.txt
      sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \\
          CMakeLists.txt horovod/torch/CMakeLists.txt
      HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \\
          HOROVOD_WITHOUT_MXNET=1 pip install --no-build-isolation .

  It must be compiled with the mpicxx of the MPI mpi4py loads (one libmpi per process).
  ``horovodrun --mpi`` does not recognise MPICH 4's version string: launch with
  ``mpiexec``/``srun`` directly.
* ``none``: no gradient exchange (each rank trains alone; an I/O-only baseline).

The ``emulate`` model has no gradients of its own and uses ``none`` whatever is asked; it
exchanges a gradient-sized buffer itself (:mod:`hpcio.train.exchange`), over a gloo group
started here by :func:`init_process_group`: gloo's TCP transport takes no MPI lock, so the
coordinated reader's MPI-IO reads cannot delay it.
"""

import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

from ..errors import HpcioError, lookup
from ..measure.clock import mpi_started
from ..measure.clock import offsets as clock_offsets
from ..mpiutil import node_comm, on_root

__all__ = ["World", "init_world", "pick_device", "HOST", "HostDevice", "DISTS", "TorchDist", "HorovodDist",
           "NoDist", "check_dist", "make_dist", "free_port", "master_address",
           "init_process_group", "FirstBucket"]


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


@dataclass(frozen=True)
class HostDevice:
    """The host, for a run that imports no torch (an emulated step reads bytes and hands
    them to no device): what the trainer and the results ask of a device."""

    type: str = "cpu"
    index: object = None

    def __str__(self):
        return "cpu"


HOST = HostDevice()


def pick_device(world, want="auto"):
    """``cuda:<local rank mod GPUs>`` when a GPU is there (and wanted), else CPU;
    ``host``: :data:`HOST`, without importing torch."""
    if want == "host":
        return HOST
    import torch  # torch: seconds; dist loads with the command line (exchange.py)
    have = torch.cuda.is_available()
    missing = 1 if want == "cuda" and not have else 0
    if world.comm is not None and world.size > 1:
        missing = world.comm.allreduce(missing)  # one message, not one per rank
    if missing:
        raise HpcioError(f"--device cuda: no CUDA device visible to {missing} of "
                         f"{world.size} rank(s)", everywhere=True)
    if want == "cpu" or not have:
        return torch.device("cpu")
    dev = torch.device("cuda", world.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


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


class NoDist:
    """No gradient exchange."""

    name = "none"

    @staticmethod
    def problem():
        """What keeps this backend from running here (one line), or None."""
        return None

    def __init__(self, world, device):
        self.world, self.device = world, device

    def wrap(self, model, optimizer):
        return model, optimizer

    def first_bucket_wait(self):
        """Seconds the last step's first gradient bucket took to be reduced (0: not
        measured)."""
        return 0.0

    def close(self):
        pass


class FirstBucket:
    """DDP comm hook: DDP's own allreduce of each bucket (the mean), and for each step's
    first bucket the time from its being ready to its allreduce done. Backward's first
    bucket is every rank's arrival at the exchange; on the ranks that arrive early, that
    allreduce ends when the last rank arrives, so this is their wait for the slowest
    rank, plus one small bucket's transfer (DDP caps the first bucket at 1 MiB). It is
    measured on each rank's own clock, and inside compute (backward goes on meanwhile).
    Only for gloo: NCCL completes the future on the GPU's stream, where a host clock
    stamp does not say when the bytes arrived."""

    def __init__(self):
        # torch: seconds (see pick_device)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        self.allreduce = allreduce_hook
        self.ready = self.done = None

    def hook(self, state, bucket):
        fut = self.allreduce(state, bucket)
        if bucket.index() != 0:
            return fut
        self.ready = time.perf_counter()

        def stamp(f):
            self.done = time.perf_counter()
            return f.value()
        return fut.then(stamp)

    def take(self):
        """The last step's wait, and forget it."""
        wait = self.done - self.ready if self.ready is not None and self.done else 0.0
        self.ready = self.done = None
        return max(0.0, wait)


def _rendezvous(world):
    """(address, port) of rank 0 for torch.distributed's TCP store."""
    try:
        return master_address(world), int(os.environ.get("MASTER_PORT") or free_port())
    except OSError as e:
        raise HpcioError(f"cannot pick an address for torch.distributed: {e}")


def init_process_group(world, backend):
    """torch.distributed's default group over the MPI job's ranks (collective): rank 0's
    address and a free port, broadcast over MPI."""
    import torch.distributed as td  # torch: seconds (see pick_device)
    addr, port = on_root(world.comm, lambda: _rendezvous(world), share=True)
    td.init_process_group(backend, init_method=f"tcp://{addr}:{port}",
                          rank=world.rank, world_size=world.size,
                          timeout=timedelta(seconds=int(
                              os.environ.get("HPCIO_DIST_TIMEOUT", "600"))))


class TorchDist(NoDist):
    """torch.distributed from MPI: NCCL on GPU, gloo on CPU; DDP around the model."""

    name = "torch"

    def __init__(self, world, device):
        super().__init__(world, device)
        import torch.distributed as td  # torch: seconds (see pick_device)
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        self.td = td
        self.first_bucket = None
        if world.size == 1:
            self.initialised = False
            return
        init_process_group(world, self.backend)
        self.initialised = True

    def wrap(self, model, optimizer):
        if not self.initialised:
            return model, optimizer
        # torch: seconds (see pick_device)
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [self.device.index] if self.device.type == "cuda" else None
        ddp = DDP(model, device_ids=ids, output_device=ids[0] if ids else None)
        if self.backend == "gloo":
            self.first_bucket = FirstBucket()
            ddp.register_comm_hook(None, self.first_bucket.hook)
        return ddp, optimizer

    def first_bucket_wait(self):
        return self.first_bucket.take() if self.first_bucket is not None else 0.0

    def close(self):
        if self.initialised and self.td.is_initialized():
            self.td.destroy_process_group()
            self.initialised = False


class HorovodDist(NoDist):
    """Horovod over the same MPI job: DistributedOptimizer + broadcast of the initial
    state from rank 0. Needs a Horovod built with MPI against this torch (see module
    docstring)."""

    name = "horovod"

    @staticmethod
    def problem():
        try:
            import horovod.torch as hvd  # horovod: optional, and its import starts torch and MPI
        except ImportError as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return (f"--dist horovod: horovod.torch does not import ({why}); build it into "
                    "this venv with `make horovod` (scripts/install-horovod.sh)")
        if not hvd.mpi_built():
            return ("--dist horovod: this Horovod was built without MPI "
                    "(horovod.torch.mpi_built() is False); rebuild it with "
                    "HOROVOD_WITH_MPI=1: `make horovod`")
        return None

    def __init__(self, world, device):
        super().__init__(world, device)
        import horovod.torch as hvd  # horovod: optional, and its import starts torch and MPI
        hvd.init()
        wrong = int(hvd.rank() != world.rank or hvd.size() != world.size)
        if world.size > 1:
            wrong = world.comm.allreduce(wrong)
        if wrong:
            raise HpcioError(f"--dist horovod: Horovod sees rank {hvd.rank()} of "
                             f"{hvd.size()}, MPI {world.rank} of {world.size} (usually: it was "
                             "built against another MPI than mpi4py's)", everywhere=True)
        self.hvd = hvd

    def wrap(self, model, optimizer):
        hvd = self.hvd
        optimizer = hvd.DistributedOptimizer(optimizer,
                                             named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def close(self):
        """Horovod's background thread ends before MPI_Finalize (the trainer finalizes
        explicitly; Horovod's own shutdown at exit would then call into a finalized MPI)."""
        self.hvd.shutdown()


DISTS = {cls.name: cls for cls in (TorchDist, HorovodDist, NoDist)}


def _backend(name):
    return lookup(DISTS, name, "--dist")


def check_dist(name, world):
    """Refuse a backend that cannot run here, before anything is made (collective: every
    rank checks its own installation; the first rank's problem is said once)."""
    problem = _backend(name).problem()
    if world.comm is not None and world.size > 1:
        problem = next((p for p in world.comm.allgather(problem) if p), None)
    if problem:
        raise HpcioError(problem, everywhere=True)


def make_dist(name, world, device):
    """The gradient-exchange backend called ``name`` (collective: every rank calls it)."""
    return _backend(name)(world, device)
