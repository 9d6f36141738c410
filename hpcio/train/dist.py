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
started by :func:`init_process_group` (:mod:`hpcio.world`, re-exported here): gloo's TCP
transport takes no MPI lock, so the coordinated reader's MPI-IO reads cannot delay it.
"""

import time
from dataclasses import dataclass

from ..errors import HpcioError, lookup
from ..world import World, free_port, init_process_group, init_world, master_address

__all__ = ["World", "init_world", "pick_device", "HOST", "HostDevice", "DISTS", "TorchDist", "HorovodDist",
           "NoDist", "check_dist", "make_dist", "free_port", "master_address",
           "init_process_group", "FirstBucket"]


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
