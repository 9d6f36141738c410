"""The emulated step's end: every rank waits for the others in a barrier, as DLIO's step
does, and, when asked, a gradient allreduce follows, its time emulated on a declared fabric
or measured on a transport.

Why a barrier and no gradients by default: DLIO's and MLPerf Storage's ``computation_time``
is an accelerator's whole step, measured on real training, where the gradient allreduce
overlaps the backward pass; an allreduce added after the emulated compute counts the
exchange twice and, on one node, measures the host's memory bandwidth rather than a
network. What synchronous training does add, whatever the model, is that each step lasts
as long as the slowest rank's: so each step ends in a zero-byte barrier, and the time a rank
waits there for the others is its *straggler wait* (:mod:`hpcio.measure.steps` says why a
barrier and what it costs). With one rank there is nothing to wait for, and nothing is done.

What ends the step (``exchange.mode`` in config.yaml and summary.json, with the sizes):

* ``barrier`` (the default; also ``--exchange-bytes 0``): the barrier only.
* ``fabric`` (``--exchange-model M`` or ``--exchange-bytes N``, with ``--exchange-fabric
  BANDWIDTH[,LATENCY]``): after the barrier, a sleep for a ring allreduce of the bytes on
  that fabric, :func:`ring_allreduce_s`: 2(P-1)/P x bytes / bandwidth + 2(P-1) x latency.
  The barrier comes first, so the straggler wait still shows apart from the exchange; no
  buffer is allocated, so any model size emulates on any node.
* ``measured`` (a size without ``--exchange-fabric``): the allreduce is done for real over
  ``--exchange-via`` and timed. Why this, when no fabric is declared: the option asks for
  an allreduce of N bytes, and doing one is what it always did (scripts that pass it keep
  their meaning); on several nodes it measures the job's own network, and a time for a
  fabric nobody declared would be a made-up figure. On one node it measures loopback
  through the host's memory, not a network: the summary says so in its exchange line.
* ``none`` (``--exchange-model none``): ranks step independently, no barrier.

The size: ``--exchange-bytes N``, or ``--exchange-model``: the named model's float32
gradients, its reference parameter count x 4 bytes. Nothing is derived from the data's
preset any more: the step the workloads define has no gradient exchange.

Transports (``--exchange-via``, for the barrier always and a measured allreduce), in a
registry; the default, ``auto``, is ``tcp`` for a step with no bytes to move (the barrier,
a fabric's sleep) and ``gloo`` for a measured allreduce:

* ``tcp``: a zero-byte dissemination barrier over plain TCP sockets (:class:`TcpExchange`):
  gloo's barrier algorithm without torch, so an emulated rank that asks for nothing else of
  torch never imports it (seconds and ~200 MB per rank). Like gloo it takes no MPI lock and
  waits blocked. Barrier only: an allreduce of bytes goes over gloo or MPI.
* ``gloo``: ``torch.distributed`` over gloo, on host memory. Its TCP transport
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

A measured buffer lives in host memory whatever the device: the emulated model has no
device work, and a host exchange needs no GPU per rank.
"""

import math
import re
import socket
import time

import numpy as np

from ..cli import MAX_SECONDS, fabric_text
from ..errors import HpcioError, lookup
from ..measure.probes import mem_available
from .dist import init_process_group
from .models import MODELS

__all__ = ["EXCHANGE_MODELS", "TRANSPORTS", "MODES", "AUTO_VIA", "TcpExchange", "exchange_size", "ring_allreduce_s",
           "exchange_plan", "check_fits", "make_exchange", "NoExchange", "GlooExchange",
           "MpiExchange", "FabricExchange"]

EXCHANGE_MODELS = (*MODELS, "none")
GRAD_BYTES = 4  # float32 gradients
#: what ends an emulated step (the module docstring)
MODES = ("barrier", "fabric", "measured", "none")
AUTO_VIA = "auto"  # --exchange-via's default: tcp with no bytes to move, else gloo

_now = time.perf_counter


def exchange_size(model, nbytes):
    """(bytes per step, or None for independent steps, and where the size comes from: words
    for the summary) from ``--exchange-model`` and ``--exchange-bytes``; neither: 0, the
    barrier alone."""
    if nbytes is not None:
        return int(nbytes), f"{int(nbytes):,} bytes (--exchange-bytes)"
    if model is None:
        return 0, "no gradients"
    if model == "none":
        return None, "none (--exchange-model none): ranks step independently"
    n = MODELS[model].params * GRAD_BYTES
    return n, f"{n:,} bytes: {model}'s gradients (--exchange-model)"


def ring_allreduce_s(ranks, nbytes, bandwidth, latency=0.0):
    """Seconds a ring allreduce of ``nbytes`` takes on ``ranks`` ranks over links of
    ``bandwidth`` bytes/s and ``latency`` s: each rank sends and receives 2(P-1)/P of the
    bytes in 2(P-1) steps (reduce-scatter, then all-gather), each step paying the latency.
    0 for one rank. (:meth:`hpcio.simulate.platform.Platform.exchange_s` charges the same.)"""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / bandwidth + 2 * (ranks - 1) * latency


def exchange_plan(model, nbytes, via, fabric, ranks, nodes=1):
    """What ends each emulated step, for config.yaml, the summary and
    :func:`make_exchange`: {"mode" (:data:`MODES`), "bytes" (per step; None: no
    synchronisation), "via" (the barrier's transport, and the allreduce's when measured),
    "fabric" (the declared fabric and ``allreduce_s``, the per-step time emulated; else
    None), "what" (one line for the summary)}. ``fabric``: a :func:`hpcio.cli.fabric`
    mapping or None. ``via`` ``auto``: ``tcp`` when no bytes move (the barrier, a
    fabric's sleep after it), ``gloo`` for a measured allreduce."""
    size, words = exchange_size(model, nbytes)
    moves = size is not None and size > 0 and fabric is None
    if via == AUTO_VIA:
        via = "gloo" if moves else "tcp"
    elif via == "tcp" and moves:
        raise HpcioError(f"--exchange-via tcp is a barrier only: an allreduce of {size:,} "
                         f"bytes goes over gloo or mpi (or give --exchange-fabric to emulate "
                         f"its time)", everywhere=True)
    if size is None:
        return {"mode": "none", "bytes": None, "via": "none", "fabric": None, "what": words}
    if ranks == 1:
        return {"mode": "none", "bytes": None, "via": "none", "fabric": None,
                "what": "none: one rank"}
    if fabric is not None:
        secs = ring_allreduce_s(ranks, size, fabric["bandwidth_bytes_per_s"],
                                fabric["latency_s"])
        if secs > MAX_SECONDS:
            raise HpcioError(f"--exchange-fabric {fabric_text(fabric)}: an allreduce of "
                             f"{size:,} bytes on {ranks} ranks would take {secs:.3g} s per "
                             f"step (at most {MAX_SECONDS:g})", everywhere=True)
        return {"mode": "fabric", "bytes": size, "via": via,
                "fabric": dict(fabric, allreduce_s=secs),
                "what": f"{words}, emulated on fabric {fabric_text(fabric)}: a ring "
                        f"allreduce of {1000 * secs:.3f} ms per step at {ranks} ranks (a "
                        f"sleep after the barrier over {via})"}
    if size == 0:
        why = "" if nbytes is None else " (--exchange-bytes 0)"
        return {"mode": "barrier", "bytes": 0, "via": via, "fabric": None,
                "what": f"barrier only{why}: a zero-byte barrier over {via} every step, no "
                        f"gradients exchanged (DLIO's step)"}
    where = (" (all ranks on one node: loopback through the host's memory, not a network; "
             "--exchange-fabric emulates one)" if nodes == 1 else "")
    return {"mode": "measured", "bytes": size, "via": via, "fabric": None,
            "what": f"{words}, measured via {via}{where}"}


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
            if self.buf is None:  # the barrier alone: no exchange, exactly
                return t, t
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
        if self.buf is None:  # the barrier alone: no exchange, exactly
            return t, t
        self.comm.Allreduce(self.MPI.IN_PLACE, self.buf, op=self.MPI.SUM)
        return t, _now()

    def close(self):
        if self.comm is not None:
            self.comm.Free()
            self.comm = None


class FabricExchange(NoExchange):
    """The barrier over a transport, then a sleep of ``seconds``: the allreduce's time on a
    declared fabric. The exchange component is the sleep as the rank saw it (a loaded
    machine wakes it late); config.yaml's ``exchange.fabric.allreduce_s`` is the time
    asked for."""

    name = "fabric"

    def __init__(self, barrier, seconds):
        self.barrier, self.seconds = barrier, float(seconds)

    def __call__(self, arrived):
        t, _ = self.barrier(arrived)
        if self.seconds <= 0:
            return t, t
        time.sleep(self.seconds)
        return t, _now()

    def close(self):
        self.barrier.close()


class TcpExchange(NoExchange):
    """A zero-byte dissemination barrier over TCP sockets, gloo's algorithm without torch:
    in round k (of ceil(log2 P)) each rank sends one byte to rank r + 2^k and waits for one
    from rank r - 2^k (mod P); after the last round every rank has heard, through some
    chain, from every other. Connections are made once, at set-up (addresses exchanged in
    one MPI allgather); each step then costs 2 log2 P one-byte messages per rank and no MPI
    call, so an MPI-IO read on the reader's thread cannot hold it up."""

    name = "tcp"

    def __init__(self, world, nbytes, said=None):
        if nbytes:
            raise HpcioError("--exchange-via tcp is a barrier only", everywhere=True)
        self.said, self.rounds = said, []
        me, size = world.rank, world.size
        dists = []
        while (1 << len(dists)) < size:
            dists.append(1 << len(dists))
        with socket.create_server(("", 0), backlog=max(8, 2 * len(dists))) as server:
            addr = "127.0.0.1" if world.nodes == 1 else _own_address(world.hostname)
            book = world.comm.allgather((addr, server.getsockname()[1], world.hostname))
            self.hosts = {b[0]: b[2] for b in book}
            outs = []
            for d in dists:  # the listeners' backlogs take these before anyone accepts
                out = socket.create_connection(book[(me + d) % size][:2], timeout=600)
                out.settimeout(None)
                out.sendall(me.to_bytes(4, "little"))
                outs.append(out)
            ins = {}
            for _ in dists:
                conn, _addr = server.accept()
                conn.settimeout(None)
                peer = int.from_bytes(_recv_exact(conn, 4), "little")
                ins[(me - peer) % size] = conn
        for s in outs + list(ins.values()):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rounds = [(outs[k], ins[d], (me - d) % size) for k, d in enumerate(dists)]
        self.book = book

    def __call__(self, arrived):
        for out, inn, peer in self.rounds:
            try:
                out.sendall(b"\x01")
                got = inn.recv(1)
            except OSError:
                got = b""
            if not got:
                addr, _, host = self.book[peer]
                raise HpcioError(f"the step's barrier lost its connection to {host} ({addr}, "
                                 f"rank {peer}): that rank ended or its node went down; "
                                 f"what this rank measured is flushed", once=self.said)
        t = _now()
        return t, t

    def close(self):
        for out, inn, _ in self.rounds:
            out.close()
            inn.close()
        self.rounds = []


def _recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        got = conn.recv(n - len(buf))
        if not got:
            raise HpcioError("the step's barrier: a rank closed its connection during "
                             "set-up", everywhere=True)
        buf += got
    return buf


def _own_address(hostname):
    """This node's address for the other nodes: the first non-loopback address its name
    resolves to, else the name itself (left to their resolver)."""
    try:
        addrs = socket.gethostbyname_ex(hostname)[2]
    except OSError:
        addrs = []
    return next((a for a in addrs if not a.startswith("127.")), hostname)


TRANSPORTS = {cls.name: cls for cls in (TcpExchange, GlooExchange, MpiExchange)}

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


def make_exchange(plan, world, said=None):
    """The step's end that ``plan`` (:func:`exchange_plan`) says, over its transport
    (collective); :class:`NoExchange` for independent steps, a single rank, or a plan that
    is not emulate's (a real model's exchange is inside its compute). ``said``: the file
    the first rank to lose a peer creates, so a node gone is one line for the job (the run
    directory, shared by the nodes)."""
    if plan["mode"] not in ("barrier", "fabric", "measured") or world.size == 1:
        return NoExchange()
    transport = lookup(TRANSPORTS, plan["via"], "--exchange-via")
    if plan["mode"] == "fabric":
        return FabricExchange(transport(world, 0, said), plan["fabric"]["allreduce_s"])
    return transport(world, plan["bytes"], said)
