"""The emulated model's gradient exchange: every step, an allreduce of a buffer the size of
a model's gradients, as data-parallel training does it.

Without it emulated ranks step independently, and a run understates what a job loses at
scale: in real training every rank waits for the slowest rank's batch each step (DLIO puts
a barrier in every step for the same reason). Each step the exchange first waits in a
zero-byte barrier for every rank to arrive (the *straggler wait*), then allreduces the
buffer (the *exchange*); :mod:`hpcio.measure.steps` says why the barrier and what it costs.

The size (``--exchange-bytes N``, or ``--exchange-model``): the named model's float32
gradients, its reference parameter count x 4 bytes; by default the model of the preset the
dataset was made from (:data:`PRESET_MODELS`); ``none``, or data that name no preset,
keeps independent steps.

Transports (``--exchange-via``), in a registry:

* ``gloo`` (default): ``torch.distributed`` over gloo, on host memory. Its TCP transport
  takes no MPI lock. MPICH's MPI_THREAD_MULTIPLE serialises every MPI call of a process
  behind one lock, so while the coordinated reader's I/O thread sits in a blocking MPI-IO
  read, an MPI collective of the training thread waits for that read: the reader's I/O
  would be counted as straggler wait and exchange though it is the harness's doing
  (``benchmarks/mpi_lock.py``: an MPI barrier from 0.01 ms to 5-11 ms beside back-to-back
  16 MiB reads). Gloo also waits blocked rather than spinning, so waiting ranks leave
  their cores to the others. Its price: a slower barrier and large transfer than MPICH's
  shared memory on one node (benchmarks/design.md, "Gradient exchange").
* ``mpi``: ``MPI_Barrier`` + ``MPI_Allreduce`` on a duplicate of the job's communicator,
  host memory: the faster transfer, where the reader's MPI-IO cannot hold it up.

The buffer lives in host memory whatever the device: the emulated model has no device
work, and a host exchange needs no GPU per rank.
"""

import math
import re
import socket
import time

import numpy as np

from ..errors import HpcioError, lookup
from ..measure.probes import mem_available
from .dist import init_process_group
from .models import MODELS

__all__ = ["PRESET_MODELS", "EXCHANGE_MODELS", "TRANSPORTS", "exchange_size",
           "check_fits", "make_exchange", "NoExchange", "GlooExchange", "MpiExchange"]

# the model each synthetic preset's data is trained with (Lim et al. 2016's pairs; ResNet-50
# for ImageNet, as MLPerf's)
PRESET_MODELS = {"mnist": "lenet", "cifar10": "cifar-quick", "imagenet": "resnet50"}
EXCHANGE_MODELS = (*MODELS, "none")
GRAD_BYTES = 4  # float32 gradients

_now = time.perf_counter


def exchange_size(model, nbytes, manifest):
    """(bytes per step or None for no exchange, where the size comes from: words for the
    summary) from ``--exchange-model``, ``--exchange-bytes`` and the data's manifest."""
    if nbytes is not None:
        return int(nbytes), f"{int(nbytes):,} bytes (--exchange-bytes)"
    if model is None:
        preset = manifest.get("preset")
        model = PRESET_MODELS.get(preset)
        if model is None:
            return None, ("none: the data name no preset to take a model from "
                          "(--exchange-model or --exchange-bytes sets one)")
        why = f"the {preset} preset's model"
    else:
        why = "--exchange-model"
    if model == "none":
        return None, "none (--exchange-model none): ranks step independently"
    n = MODELS[model].params * GRAD_BYTES
    return n, f"{n:,} bytes: {model}'s gradients ({why})"


def _too_big(nbytes, world):
    """Why this node cannot hold its ranks' exchange buffers, or None."""
    avail = mem_available()
    need = nbytes * world.local_size
    if avail is not None and need > avail:
        return (f"exchange of {nbytes:,} bytes per step: the {world.local_size} rank(s) on "
                f"{world.hostname} need {need:,} bytes of memory, {avail:,} are available "
                f"(--exchange-bytes / --exchange-model)")
    return None


class NoExchange:
    """Independent steps: no barrier, no allreduce, both components exactly 0."""

    name = "none"

    def __call__(self, arrived):
        return arrived, arrived

    def close(self):
        pass


class GlooExchange(NoExchange):
    """Barrier and allreduce through torch.distributed's gloo (no MPI lock)."""

    name = "gloo"

    def __init__(self, world, nbytes, said=None):
        import torch  # torch: seconds; the exchange's sizes and names load with the command line
        import torch.distributed as td
        init_process_group(world, "gloo")
        self.td = td
        self.buf = torch.zeros(math.ceil(nbytes / GRAD_BYTES), dtype=torch.float32) \
            if nbytes else None
        self.hosts = _addresses(world)
        self.said = said

    def __call__(self, arrived):
        try:
            self.td.barrier()
            t = _now()
            if self.buf is not None:
                self.td.all_reduce(self.buf)
        except RuntimeError as e:  # gloo's lost peer: say which node, in one line
            raise HpcioError(lost_peer(str(e), self.hosts) or str(e), once=self.said) from None
        return t, _now()

    def close(self):
        if self.td.is_initialized():
            self.td.destroy_process_group()


class MpiExchange(NoExchange):
    """Barrier and allreduce over MPI on a duplicate communicator (see the module
    docstring for the lock it shares with MPI-IO readers)."""

    name = "mpi"

    def __init__(self, world, nbytes, said=None):
        from mpi4py import MPI  # mpi4py: importing it starts MPI
        self.MPI = MPI
        self.comm = world.comm.Dup()
        self.buf = np.zeros(math.ceil(nbytes / GRAD_BYTES), dtype=np.float32) \
            if nbytes else None

    def __call__(self, arrived):
        self.comm.Barrier()
        t = _now()
        if self.buf is not None:
            self.comm.Allreduce(self.MPI.IN_PLACE, self.buf, op=self.MPI.SUM)
        return t, _now()

    def close(self):
        if self.comm is not None:
            self.comm.Free()
            self.comm = None


TRANSPORTS = {cls.name: cls for cls in (GlooExchange, MpiExchange)}

_PEER = re.compile(r"(Connection (?:reset|closed) by peer|Read error|Connection refused)"
                   r".*?\[([0-9A-Fa-f:.]+)\]:\d+|\[([0-9A-Fa-f:.]+)\]:\d+.*?"
                   r"(Connection (?:reset|closed) by peer)")


def _addresses(world):
    """{address: host} of every node of the job, from the hosts' own names (one
    allgather at set-up): a lost connection's address then names its node."""
    names = sorted(set(world.comm.allgather(world.hostname)))
    out = {}
    for name in names:
        try:
            for addr in socket.gethostbyname_ex(name)[2]:
                out[addr] = name
        except OSError:
            continue
    return out


def lost_peer(message, hosts):
    """A one-line account of gloo's lost connection (which node's ranks it lost), or None
    when ``message`` is not one."""
    m = _PEER.search(message)
    if not m:
        return None
    addr = (m.group(2) or m.group(3)).removeprefix("::ffff:")
    host = hosts.get(addr, "an unknown host")
    return (f"the gradient exchange lost its connection to {host} ({addr}): a rank there "
            f"ended or its node went down; what this rank measured is flushed")


def check_fits(nbytes, world):
    """Refuse, on every rank, an exchange some node cannot hold (collective)."""
    problem = None if nbytes is None else _too_big(nbytes, world)
    if world.comm is not None and world.size > 1:
        problem = next((p for p in world.comm.allgather(problem) if p), None)
    if problem:
        raise HpcioError(problem, everywhere=True)


def make_exchange(nbytes, via, world, said=None):
    """The exchange of ``nbytes`` per step over ``via`` (collective); :class:`NoExchange`
    for None or a single rank. ``said``: the file the first rank to lose a peer creates,
    so a node gone is one line for the job (the run directory, shared by the nodes)."""
    if nbytes is None or world.size == 1:
        return NoExchange()
    return lookup(TRANSPORTS, via, "--exchange-via")(world, nbytes, said)
