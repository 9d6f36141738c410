"""The checkpoint writers, in a registry: two naive ones, as PyTorch users save a sharded
state, and the coordinated one.

* ``dcp``: ``torch.distributed.checkpoint`` (DCP): its default planner, one file per rank
  (``FileSystemWriter(single_file_per_rank=True, sync_files=True)``: each file fsync'd),
  the global ``.metadata`` written by rank 0 after a gather of every rank's plan; restored
  with ``dcp.load`` in place into preallocated tensors. Over a gloo group started from MPI
  (:func:`hpcio.world.init_process_group`).
* ``torch_save``: DLIO's ``pt_save``: ``torch.save`` of each of the rank's DLIO files (a
  dict of its tensors), then ``fsync``; restored with ``torch.load`` (new tensors, as DLIO).
* ``coordinated``: every rank's tensors packed into shared file(s) at offsets of one
  layout (:func:`plan`) that every rank computes alike, no message needed: each rank's
  region starts on an ``align`` boundary (the file system's block: ``st_blksize``, which
  Lustre sets to its stripe size and GPFS to its block size); written with MPI-IO, collective
  (``Write_at_all``: ROMIO may aggregate, one aggregator per node by default,
  ``cb_config_list=*:1``) or independent (``Write_at``), straight from the tensors' memory (an
  hindexed datatype over their addresses: no staging copy), in rounds of at most
  ``round_bytes``; ``MPI_File_sync``, close. Restore reads the same regions into
  preallocated tensors. The manifest says, per tensor, file, offset, length and CRC-32C,
  enough to read a tensor back with NumPy alone::

      np.fromfile(dir + "/" + t["data_file"], dtype=t["dtype"], count=t["shape"][0],
                  offset=t["offset"])

Each writer returns, per tensor it wrote, where it put it (file, and offset and length where
it knows them); :mod:`hpcio.checkpoint.run` puts that and the CRC-32C in the manifest.
"""

import os
import warnings

from ..errors import HpcioError, lookup
from ..readers.hints import file_hints, mpi_info
from ..world import init_process_group
from .layout import DTYPES
from .state import empty_state, tensor_bytes

__all__ = ["WRITERS", "make_writer", "plan", "Plan", "ROUND_BYTES", "DEFAULT_HINTS"]

ROUND_BYTES = 256 << 20  # bytes per rank per MPI-IO call: big calls, int-sized counts
#: ROMIO hints the coordinated writer starts from (``--hint`` wins). Each rank's file region
#: is contiguous and its memory is not (one block per tensor): with data sieving on, ROMIO
#: moves such a call through a bounce buffer of ind_rd/wr_buffer_size (4 MiB / 512 KiB),
#: a copy and a system call per buffer: 0.15 GiB/s against 2.1 GiB/s with it off, reading
#: 100 MiB in 10 tensors from one rank here (ext4 on a VM's disk, page cache cold)
DEFAULT_HINTS = {"romio_ds_read": "disable", "romio_ds_write": "disable"}


class _Writer:
    """Common part: the job, and the fault hook of the tests."""

    name = None

    def __init__(self, job):
        self.job = job

    def close(self):
        pass

    def _maybe_fail(self, index):
        """``HPCIO_CKPT_FAULT=<rank>:<checkpoint>``: that rank fails half way through
        writing that checkpoint (1-based), as a rank that dies does."""
        if self.job.fault == (self.job.rank, index):
            raise RuntimeError(f"HPCIO_CKPT_FAULT test hook: rank {self.job.rank} failed "
                               f"while writing checkpoint {index}")


class TorchSave(_Writer):
    """torch.save per DLIO file, fsync'd (DLIO's pt_save)."""

    name = "torch_save"

    def save(self, directory, state, files, index):
        import torch  # torch: seconds; loaded once per job, before any timing
        where = []
        for n, f in enumerate(files):
            path = os.path.join(directory, f.name + ".pt")
            with open(path, "wb") as fh:
                torch.save({t.key: state[t.key] for t in f.tensors}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            where += [{"key": t.key, "data_file": f.name + ".pt"} for t in f.tensors]
            if n == 0:
                self._maybe_fail(index)
        if not files:
            self._maybe_fail(index)
        return where

    def load(self, directory, files, manifest):
        import torch  # torch: seconds (see save)
        out = {}
        for f in files:
            path = os.path.join(directory, f.name + ".pt")
            try:
                got = torch.load(path, map_location="cpu", weights_only=True)
            except FileNotFoundError:
                raise HpcioError(f"{path}: missing (the checkpoint lost a file)")
            except Exception as e:  # torch raises RuntimeError, pickle errors, EOFError...
                text = str(e).strip().splitlines()
                raise HpcioError(f"{path}: torch.load failed: "
                                 f"{text[0] if text else type(e).__name__}")
            for t in f.tensors:
                if t.key not in got:
                    raise HpcioError(f"{path}: holds no tensor {t.key}")
                out[t.key] = got[t.key]
        return out


class Dcp(_Writer):
    """torch.distributed.checkpoint, file per rank, its planner and metadata."""

    name = "dcp"

    def __init__(self, job):
        super().__init__(job)
        import torch.distributed as td  # torch: seconds (see TorchSave.save)
        self.td = td
        self.group = False
        self.process_group = None  # DCP's group: None, the default one; a run may give its own
        if job.size > 1 and not td.is_initialized():
            init_process_group(job.world, "gloo")
            self.group = True
        # one process with no group: DCP says it assumes one process, once per call
        warnings.filterwarnings("ignore", "torch.distributed is disabled")

    def save(self, directory, state, files, index):
        import torch.distributed.checkpoint as dcp  # torch: seconds (see TorchSave.save)
        self._maybe_fail(index)
        mine = {t.key: state[t.key] for f in files for t in f.tensors}
        dcp.save(mine, storage_writer=dcp.FileSystemWriter(
            directory, single_file_per_rank=True, sync_files=True, thread_count=1),
            process_group=self.process_group)
        return [{"key": k, "data_file": None} for k in mine]

    def load(self, directory, files, manifest):
        import torch.distributed.checkpoint as dcp  # torch: seconds (see TorchSave.save)
        into = empty_state(files)
        try:
            dcp.load(into, storage_reader=dcp.FileSystemReader(directory),
                     process_group=self.process_group)
        except Exception as e:  # DCP wraps every rank's failure in a CheckpointException
            text = str(e).strip().splitlines()
            raise HpcioError(f"{directory}: torch.distributed.checkpoint.load failed: "
                             f"{text[0] if text else type(e).__name__}")
        return into

    def close(self):
        if self.group and self.td.is_initialized():
            self.td.destroy_process_group()


class Plan:
    """Where each rank's tensors go in the shared files: ``regions[rank] = (file index,
    start, [(key, offset, nbytes), ...])``, and each file's size."""

    def __init__(self, regions, sizes, align, nfiles):
        self.regions, self.sizes, self.align, self.nfiles = regions, sizes, align, nfiles

    @staticmethod
    def file_name(g):
        return f"shared-{g:04d}.bin"


def plan(layout, nfiles=1, align=4096):
    """The coordinated layout, a pure function of the layout: ranks split into ``nfiles``
    blocks of consecutive ranks, one shared file each; in a file the ranks' regions in rank
    order, each starting at a multiple of ``align``, the rank's tensors packed in it in
    :meth:`~.layout.Layout.files` order."""
    nfiles = max(1, min(nfiles, layout.world))
    regions, sizes = {}, [0] * nfiles
    for r in range(layout.world):
        g = r * nfiles // layout.world
        start = -(-sizes[g] // align) * align
        at, entries = start, []
        for f in layout.files(r):
            for t in f.tensors:
                entries.append((t.key, at, t.nbytes))
                at += t.nbytes
        regions[r] = (g, start, entries)
        sizes[g] = at if at > start else sizes[g]
    return Plan(regions, sizes, align, nfiles)


def _rounds(entries, tensors, start, round_bytes):
    """The rank's region as rounds: per round (file offset, [(address, nbytes), ...]) with
    each round's file bytes contiguous and at most ``round_bytes``."""
    out, cur, cur_at, used = [], [], start, 0
    for key, off, n in entries:
        addr = tensors[key].data_ptr()
        done = 0
        while done < n:
            take = min(n - done, round_bytes - used)
            cur.append((addr + done, take))
            done += take
            used += take
            if used == round_bytes:
                out.append((cur_at, cur))
                cur_at += used
                cur, used = [], 0
    if cur:
        out.append((cur_at, cur))
    return out


class Coordinated(_Writer):
    """Shared files, MPI-IO at offsets of one plan (see the module docstring)."""

    name = "coordinated"

    def __init__(self, job):
        super().__init__(job)
        from mpi4py import MPI  # mpi4py: already started by the command
        self.MPI = MPI
        o = job.options
        self.collective = o.get("mpiio", "collective") == "collective"
        self.round_bytes = int(o.get("round_bytes") or ROUND_BYTES)
        self.plan = plan(job.layout, int(o.get("files") or 1), int(o.get("align") or 4096))
        self.hints = {**DEFAULT_HINTS, **(o.get("hints") or {})}
        self.used_hints = None
        self._comms = {}

    def _comm(self, g, phase="write", nfiles=None):
        """The ranks that open file ``g`` (of ``nfiles``) to write it, or to read it (with
        a rank shift, others than wrote it): one split each, kept for the job."""
        key = (g, phase, nfiles or self.plan.nfiles)
        if key not in self._comms:
            self._comms[key] = self.job.comm.Split(g, self.job.rank)
        return self._comms[key]

    def _rounds_of(self, rank, p=None):
        """The most rounds any rank of ``rank``'s file group makes (collective calls must
        match): from the plan (``p``, else the job's), so no message."""
        p = p or self.plan
        g = p.regions[rank][0]
        return max(-(-sum(e[2] for e in p.regions[r][2]) // self.round_bytes)
                   for r, reg in p.regions.items() if reg[0] == g)

    def _written_plan(self, manifest):
        """The plan a checkpoint was written with: its shared files and alignment, from its
        manifest (a pure function of them and the layout), so a restore run with another
        ``--files`` or ``--align`` than the write still reads each rank's region."""
        n = sum(1 for f in manifest.get("files") or [] if f["name"].startswith("shared-"))
        n, align = n or self.plan.nfiles, int(manifest.get("align") or self.plan.align)
        if (n, align) == (self.plan.nfiles, self.plan.align):
            return self.plan
        return plan(self.job.layout, n, align)

    def _io(self, fh, rounds, nrounds, write):
        MPI = self.MPI
        call = (fh.Write_at_all if write else fh.Read_at_all) if self.collective else \
            (fh.Write_at if write else fh.Read_at)
        for i in range(nrounds if self.collective else len(rounds)):
            if i < len(rounds):
                at, pieces = rounds[i]
                dt = MPI.BYTE.Create_hindexed([n for _, n in pieces],
                                              [a for a, _ in pieces]).Commit()
                try:
                    call(at, [MPI.BOTTOM, 1, dt])
                finally:
                    dt.Free()
            else:  # this rank is done; the others still call collectively
                call(0, [MPI.BOTTOM, 0, MPI.BYTE])
            if write and i == 0:
                yield

    def _open(self, path, amode, comm):
        info = mpi_info(self.hints)
        try:
            return self.MPI.File.Open(comm, path, amode, info)
        except self.MPI.Exception as e:
            raise HpcioError(f"{path}: MPI_File_open failed: {e.Get_error_string()}")
        finally:
            if info != self.MPI.INFO_NULL:
                info.Free()

    def save(self, directory, state, files, index):
        MPI, job = self.MPI, self.job
        g, start, entries = self.plan.regions[job.rank]
        comm = self._comm(g)
        path = os.path.join(directory, Plan.file_name(g))
        fh = self._open(path, MPI.MODE_CREATE | MPI.MODE_WRONLY, comm)
        try:
            if self.used_hints is None:
                self.used_hints = file_hints(fh)
            rounds = _rounds(entries, state, start, self.round_bytes)
            for _ in self._io(fh, rounds, self._rounds_of(job.rank), True):
                self._maybe_fail(index)
            fh.Sync()
        finally:
            fh.Close()
        return [{"key": k, "data_file": Plan.file_name(g), "offset": off, "length": n}
                for k, off, n in entries]

    def load(self, directory, files, manifest):
        MPI, job = self.MPI, self.job
        target = job.target
        p = self._written_plan(manifest)
        g, start, entries = p.regions[target]
        comm = self._comm(g, "read", p.nfiles)
        path = os.path.join(directory, Plan.file_name(g))
        want = next((f["bytes"] for f in manifest["files"] if f["name"] == Plan.file_name(g)),
                    None)
        if not os.path.exists(path):
            raise HpcioError(f"{path}: missing (the checkpoint lost a file)")
        into = empty_state(files)
        fh = self._open(path, MPI.MODE_RDONLY, comm)
        try:
            size = fh.Get_size()
            if want is not None and size < want:
                end = start + sum(e[2] for e in entries)
                raise HpcioError(f"{path}: {size} bytes, the manifest says {want}: truncated "
                                 f"at offset {size}" + (
                                     f" (rank {target}'s region {start}..{end})"
                                     if size < end else ""))
            rounds = _rounds(entries, into, start, self.round_bytes)
            # a file's readers are the ranks whose target wrote it: as many, as many rounds
            for _ in self._io(fh, rounds, self._rounds_of(target, p), False):
                pass
        finally:
            fh.Close()
        return into

    def close(self):
        for c in self._comms.values():
            c.Free()
        self._comms = {}


WRITERS = {cls.name: cls for cls in (Coordinated, Dcp, TorchSave)}


def make_writer(name, job):
    """The writer ``name`` for ``job`` (collective: DCP starts a process group)."""
    return lookup(WRITERS, name, "--writer")(job)
