"""The naive reader: what a framework does out of the box, one library call per sample.

Each rank opens the dataset through its format's own library
(``hpcio.formats.FORMATS[fmt].open_native``): LMDB env per shard on every rank
(memory-mapped, ``readahead`` as the library defaults, one ``txn.get`` per sample), h5py
with its default driver (one read per sample), image files (every rank lists the class
folders itself, then open/read one file per sample), packed shards (one ``pread`` per
record). The per-sample calls are the point: they are what is being measured. Only the
batch assembly is ours: each record is copied into one page-aligned buffer at offsets
computed from the index, so consumers see the same :class:`Batch` as from every reader.
"""

import time

import numpy as np

from ..errors import HpcioError
from ..formats import FORMATS
from .assemble import layout
from .base import Batch, BufferRing, Reader, faults, register

__all__ = ["NaiveReader"]


@register
class NaiveReader(Reader):
    """Per-sample reads through the format's library (see the module docstring)."""

    name = "naive"

    def __init__(self, dataset, comm, **options):
        super().__init__(dataset, comm, **options)
        try:
            fmt = FORMATS[dataset.format]
        except KeyError:
            raise HpcioError(f"{dataset.root}: unknown format {dataset.format!r}",
                             everywhere=True)
        self.native = fmt.open_native(dataset)
        self._ring = BufferRing(2)

    def epoch(self, plan):
        """Yield this rank's batches of ``plan``: one ``native.get`` per record."""
        idx, st, get = self.ds.index, self.stats, self.native.get
        f0 = faults()
        clock = time.perf_counter
        try:
            for s in range(plan.steps):
                t0 = clock()
                ids = plan.step(s)
                off = layout(idx.length[ids])
                buf = self._ring.take(s & 1, int(off[-1]))
                io = 0.0
                for k, i in enumerate(ids.tolist()):
                    a = clock()
                    rec = get(i)
                    io += clock() - a
                    n = len(rec)
                    if n != off[k + 1] - off[k]:
                        raise HpcioError(f"record {i}: the format returned {n} bytes, the "
                                         f"index says {int(off[k + 1] - off[k])}")
                    buf[off[k]:off[k + 1]] = np.frombuffer(rec, dtype=np.uint8)
                dt = clock() - t0
                st.io_s += io
                st.wait_s += dt
                st.calls += len(ids)
                st.bytes += int(off[-1])
                st.records += len(ids)
                st.batches += 1
                yield Batch(s, ids, buf[:off[-1]], off, idx.label[ids], fetch_s=dt)
        finally:
            f1 = faults()
            st.minflt += f1[0] - f0[0]
            st.majflt += f1[1] - f0[1]

    def close(self):
        native, self.native = getattr(self, "native", None), None
        if native is not None:
            native.close()
        self._ring.clear()
