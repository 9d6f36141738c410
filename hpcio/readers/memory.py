"""The in-memory reader: the whole dataset in RAM first, then batches are numpy gathers.

It is the ceiling the other readers are measured against: no I/O on the hot path at all.
Every rank loads *every* file of the dataset (a sequential read of each file in 8 MiB
pieces into one page-aligned buffer, timed as ``stats.load_s``), so any plan — any shuffle,
any epoch — is served from RAM. On one node that costs ranks x dataset bytes of memory;
the reader refuses to load more than ``max_bytes`` (default: half of the free memory,
shared between the node's ranks). A dataset with records stored compressed (LevelDB's
snappy blocks) is loaded record by record through the format's own library instead.

How the records are held (option ``hold``, Lim et al. 2016's two in-memory stores):
``buffer`` (default) is their "cppmem", the files in one buffer and a batch one numpy
gather; ``pymem`` is a Python data layer's list of samples, one ``bytes`` object per
record (split off the loaded buffer, which is then freed: the split counts in
``load_s``), and a batch is copied out of the list record by record, per-sample Python
by design. ``stats.extra["held_bytes"]`` is what the records occupy (``pymem``: the
objects' and the list's ``sys.getsizeof``, before the allocator's rounding).
"""

import os
import sys
import time

import numpy as np

from ..data.dataset import compressed_records
from ..errors import HpcioError
from ..formats import FORMATS
from ..fsutil import aligned_empty
from ..measure.probes import mem_available
from ..mpiutil import node_comm
from .assemble import gather, layout
from .base import Batch, BufferRing, Reader, faults, faults_since, register, size_error

__all__ = ["MemoryReader", "load_files", "load_native", "HOLD"]

PIECE = 8 << 20
#: how records are held: one buffer ("cppmem") or a list of bytes, one per record ("pymem")
HOLD = ("buffer", "pymem")


def load_files(paths, sizes, out, piece=PIECE):
    """Read the files ``paths`` (of ``sizes`` bytes) end to end into ``out``; returns the
    number of read calls. A file of another size than ``sizes`` says, before or after
    its reads, is an error."""
    calls, pos = 0, 0
    view = memoryview(out)
    for p, size in zip(paths, sizes):
        size = int(size)
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            raise HpcioError(f"{p}: shard file missing")
        try:
            done = 0
            while done < size:
                n = os.preadv(fd, [view[pos + done:pos + min(size, done + piece)]], done)
                calls += 1
                if n <= 0:
                    raise HpcioError(f"{p}: file ended at byte {done}, the index says "
                                     f"{size} bytes")
                done += n
            now = os.fstat(fd).st_size
            if now != size:
                raise size_error(p, now, size, "while it was loaded")
        finally:
            os.close(fd)
        pos += size
    return calls


def load_native(ds, out, start):
    """Every record through the format's own library into ``out`` at ``start`` (records
    stored compressed, which only the library gives); returns the files it opened."""
    native = FORMATS[ds.format].open_native(ds)
    try:
        length = ds.index.length
        for i in range(ds.records):  # once, before the first batch
            rec = np.frombuffer(native.get(i), np.uint8)
            if len(rec) != length[i]:
                raise HpcioError(f"record {i} is {len(rec)} bytes, the index says "
                                 f"{int(length[i])} (the data changed since it was indexed)")
            out[start[i]:start[i] + len(rec)] = rec
        return native.opens
    finally:
        native.close()


@register
class MemoryReader(Reader):
    """All files loaded into RAM at construction; batches gathered with numpy (or, held
    as ``pymem``, copied record by record out of a list)."""

    name = "memory"

    def __init__(self, dataset, comm, max_bytes: int = None, hold: HOLD = "buffer",
                 **options):
        super().__init__(dataset, comm, **options)
        idx = dataset.index
        native = compressed_records(dataset.manifest) > 0
        total = held = need = int(idx.length.sum() if native else idx.file_bytes.sum())
        if hold == "pymem":  # the objects, while the buffer they are split off still lives
            need += int(idx.length.sum()) + len(idx) * (sys.getsizeof(b"") + 8)
        if max_bytes is None:
            avail = mem_available()
            local = 1
            if comm is not None and comm.Get_size() > 1:
                node = node_comm(comm)
                local = node.Get_size()
                node.Free()
            max_bytes = avail // (2 * local) if avail else None
        if max_bytes is not None and need > max_bytes:
            raise HpcioError(f"the memory reader needs {need / 1e9:.2f} GB per rank, more "
                             f"than the {max_bytes / 1e9:.2f} GB allowed (half the free memory "
                             f"shared between this node's ranks)", everywhere=True)
        base = np.zeros(len(idx.files) + 1, dtype=np.int64)
        np.cumsum(idx.file_bytes, out=base[1:])
        # where record i lies in self.mem
        self._start = layout(idx.length)[:-1] if native else base[idx.file] + idx.offset
        self.mem = aligned_empty(total)
        f0 = faults()
        t0 = time.perf_counter()
        if native:
            calls, opens = 0, load_native(dataset, self.mem, self._start)
        else:
            calls, opens = load_files(dataset.paths, idx.file_bytes, self.mem), \
                len(dataset.paths)
        self.stats.load_s = time.perf_counter() - t0
        self.stats.read_bytes = total
        self.stats.calls = calls
        self.stats.opens = opens
        self.stats.extra["load_minflt"], self.stats.extra["load_majflt"] = faults_since(f0)
        self.records = None
        self._fill = self._gather
        if hold == "pymem":
            t0 = time.perf_counter()
            ends = self._start + idx.length
            self.records = [self.mem[a:b].tobytes()
                            for a, b in zip(self._start.tolist(), ends.tolist())]
            self.mem = None
            self._fill = self._copy_each
            self.stats.load_s += time.perf_counter() - t0
            held = int(idx.length.sum()) + len(idx) * sys.getsizeof(b"") + \
                sys.getsizeof(self.records)
        self.stats.extra["hold"] = hold
        self.stats.extra["held_bytes"] = held
        self._ring = BufferRing(2, slack=1.25)  # batches vary in size: few regrowths

    def _gather(self, ids, lengths, buf):
        return gather(self.mem, self._start[ids], lengths, buf)

    def _copy_each(self, ids, lengths, buf):
        """The records of ``ids`` out of the list into ``buf``, one at a time."""
        records, view, pos = self.records, memoryview(buf), 0
        for i in ids.tolist():
            r = records[i]
            view[pos:pos + len(r)] = r
            pos += len(r)
        return layout(lengths)

    def batches(self, plan):
        """Yield this rank's batches of ``plan`` from RAM (two alternating buffers: a
        batch's data stays valid until the next one is requested)."""
        idx, st = self.ds.index, self.stats
        f0 = faults()
        try:
            for s in range(plan.steps):
                t0 = time.perf_counter()
                ids = plan.step(s)
                lengths = idx.length[ids]
                buf = self._ring.take(s & 1, int(lengths.sum()))
                off = self._fill(ids, lengths, buf)
                b = Batch(s, ids, buf[:off[-1]], off, idx.label[ids])
                dt = time.perf_counter() - t0
                b.fetch_s = dt
                st.wait_s += dt
                yield b
        finally:
            self.count_faults(f0)

    def close(self):
        self.mem = self.records = None
        self._ring.clear()
