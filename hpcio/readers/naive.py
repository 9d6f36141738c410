"""The naive reader: what a framework does out of the box, one library call per sample.

Each rank opens the dataset through its format's own library
(``hpcio.formats.FORMATS[fmt].open_native``): LMDB env per shard on every rank
(memory-mapped, ``readahead`` as the library defaults, one ``txn.get`` per sample), a
LevelDB per shard on every rank through a private directory of links to its tables
(LevelDB lets one process open a database; one ``db.get`` per sample), h5py with its
default driver (one read per sample), image files (every rank lists the class folders
itself, then open/read one file per sample), packed shards (one ``pread`` per record), npz
files (``np.load``, the file's ``x`` kept while its samples are read), TFRecord files (read
in order through a 256 KiB buffer, both CRCs of each record checked). The per-sample calls are the point: they are what is being measured. Only the
batch assembly is ours: each record is copied into one page-aligned buffer at offsets
computed from the index, so consumers see the same :class:`Batch` as from every reader.

Bytes read are bytes delivered: every shard is checked (:class:`FileCheck`) at each epoch's
start and, for the files a batch touches, once per batch: before its reads where the
format maps its files (``FormatInfo.mapped``: an LMDB page past the end of a truncated file is a
SIGBUS), after them elsewhere (HDF5 reads zeros past the end, ``pread`` returns less).
A shard truncated in the instant between the check and an LMDB read still kills the
process with SIGBUS, which no check can close: while a mapped format is open, a watcher
process (:class:`hpcio.mapfault.MapWatch`) receives the fault's report and prints the one
line naming the shard that shrank, as the check would have. Image files are records: each is read whole and its length compared
with the index. Every record's CRC32C is checked as the batch is assembled: records of
16 KiB and more (on average) each hashed as soon as it is copied into the batch, while its
bytes are in the CPU's cache; smaller ones a batch at a time once the batch is whole. The
reading thread's I/O counters around each batch's reads (:class:`ThreadIO`) give ``calls``
and ``read_bytes`` (:class:`ReaderStats`).
"""

import time

import numpy as np

from ..data.checksum import SMALL, crc32c
from ..errors import HpcioError
from ..formats import FORMATS
from ..mapfault import MapWatch
from ..mpiutil import rank_size as _rank_size
from .assemble import layout
from .base import Batch, BufferRing, FileCheck, Reader, ThreadIO, faults, \
    files_are_records, pattern, register

__all__ = ["NaiveReader", "ACCESS"]

#: how the naive reader fetches LMDB and LevelDB records: ``get``, one lookup per record
#: (what PyTorch-style loaders do); ``cursor``, a cursor walked in key order that steps
#: over the other ranks' records (Caffe's data reader; LMDBIO's baseline; shuffle none only)
ACCESS = ("get", "cursor")


@register
class NaiveReader(Reader):
    """Per-sample reads through the format's library (see the module docstring)."""

    name = "naive"
    maps_files = True

    def __init__(self, dataset, comm, access: ACCESS = "get", **options):
        super().__init__(dataset, comm, **options)
        try:
            fmt = FORMATS[dataset.format]
        except KeyError:
            raise HpcioError(f"{dataset.root}: unknown format {dataset.format!r}",
                             everywhere=True)
        self.check = None if files_are_records(dataset) else \
            FileCheck(dataset, live=self.verify != "off")
        self.mapped = fmt.info.mapped  # check before reads, not after
        self._ring = BufferRing(2, slack=1.25)  # batches vary in size: few regrowths
        self._meter = ThreadIO()
        self._watch = None
        if self.mapped:  # a SIGBUS in the map becomes a line naming the shard
            self._watch = MapWatch(zip(dataset.paths, dataset.index.file_bytes.tolist()),
                                   *_rank_size(comm))
        try:
            self.native = fmt.open_native(dataset)
        except BaseException:
            self.close()
            raise
        self.stats.opens += self.native.opens
        if access == "cursor" and not fmt.info.cursor:
            self.native.close()
            raise HpcioError(f"access=cursor walks a key-value store in key order; a "
                             f"{dataset.format} dataset has none", everywhere=True)
        self.access = access
        self.stats.extra["access"] = access
        # the check runs here, as the batch is assembled: records hashed one call each
        # (SMALL bytes and more on average) are hashed as each is copied in, while its
        # bytes are in the CPU's cache; smaller ones a batch at a time once it is whole
        self.verifies_reads = self.verify == "records"
        self._hot = self.verifies_reads and \
            dataset.nbytes() >= SMALL * max(1, dataset.records)

    def batches(self, plan):
        """Yield this rank's batches of ``plan``: one ``native.get`` per record."""
        idx, st, native = self.ds.index, self.stats, self.native
        get = native.get
        cursor = self.access == "cursor"
        if cursor and plan.steps and not (np.diff(plan.ids) > 0).all():
            # this rank's plan: a padded last step can wrap around even unshuffled
            raise HpcioError("access=cursor reads records in key order, as Caffe's data "
                             "reader does: it needs --shuffle none (and no padding: "
                             "--drop-last)")
        skipped = [0]
        f0 = faults()
        clock = time.perf_counter
        if self.check is not None:
            self.check.check_all()
        try:
            for s in range(plan.steps):
                t0 = clock()
                ids = plan.step(s)
                off = layout(idx.length[ids])
                buf = self._ring.take(s & 1, int(off[-1]))
                files = np.unique(idx.file[ids]) if self.check is not None else None
                if files is not None and self.mapped:
                    self.check.check(files)
                opens = native.opens
                io = hashed = 0.0
                got = np.empty(len(ids), np.uint32) if self._hot else None
                mv = memoryview(buf) if self._hot else None
                m0 = self._meter.read()
                records = native.walk(ids.tolist(), skipped) if cursor else None
                for k, (i, lo, hi) in enumerate(zip(ids.tolist(), off[:-1].tolist(),
                                                    off[1:].tolist())):
                    a = clock()
                    rec = next(records) if cursor else get(i)
                    io += clock() - a
                    n = len(rec)
                    if n != hi - lo:
                        if self.check is not None:  # a shard that changed names itself
                            self.check.check([idx.file[i]])
                        raise HpcioError(f"{self.ds.path(idx.file[i])}: record {i} is {n} "
                                         f"bytes, expected {hi - lo} (the data changed "
                                         f"since it was indexed)")
                    buf[lo:hi] = np.frombuffer(rec, dtype=np.uint8)
                    if got is not None:
                        a = clock()
                        got[k] = crc32c(mv[lo:hi])
                        hashed += clock() - a
                m1 = self._meter.read()
                if files is not None and not self.mapped:
                    self.check.check(files)
                if mv is not None:
                    mv.release()
                if self.verifies_reads:
                    st.verify_s += hashed
                    self.check_crcs(buf, off, ids, got)
                if m0 is not None and m1 is not None:
                    st.read_bytes += m1[0] - m0[0] - m0[2]
                    st.calls += m1[1] - m0[1] - 1
                st.opens += native.opens - opens
                dt = clock() - t0
                st.io_s += io
                st.wait_s += dt
                yield Batch(s, ids, buf[:off[-1]], off, idx.label[ids], fetch_s=dt)
        finally:
            st.skipped += skipped[0]
            self.count_faults(f0)

    def close(self):
        native, self.native = getattr(self, "native", None), None
        if native is not None:
            native.close()
        watch, self._watch = getattr(self, "_watch", None), None
        if watch is not None:  # after the map is gone
            watch.close()
        self._ring.clear()
        self._meter.close()


def _windows(w, params, ids):
    """The read-around windows (``params['window']`` bytes) covering records ``ids``,
    in order."""
    win, rb = params["window"], w.record_bytes
    first = (ids * rb // win).astype(np.int64)
    count = (((ids + 1) * rb - 1) // win).astype(np.int64) - first + 1
    steps = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(first, count) + steps


def _faulted(w, platform, params, windows, cache):
    """(servers, bytes) arrays of the windows not yet in the node's cache."""
    if cache is not None:
        windows = cache.missing(windows)
    win = params["window"]
    return platform.server_of(windows * win, w.records * w.record_bytes), \
        np.full(len(windows), float(win))


@pattern("naive", "demand", access="get")
def simulated_get(w, platform, params, ids, cache, state):
    """``get`` over an mmap: each record's bytes fault in window by window (the kernel's
    read-around, fitted to the runs' major faults per sample); a window another rank of
    the node brought in costs nothing. Synchronous, one after another."""
    return _faulted(w, platform, params, _windows(w, params, np.asarray(ids)), cache)


@pattern("naive", "demand", access="cursor")
def simulated_cursor(w, platform, params, ids, cache, state):
    """Caffe's cursor: as ``get`` for the rank's own records, and every record it steps over
    (the other ranks', in key order) touches the page its entry starts on, which faults in
    that page's window: the bytes a rank brings in grow with the ranks it steps over.
    ``state['at']``: the record under the cursor (a new pass starts from the first key)."""
    win, rb = params["window"], w.record_bytes
    parts = []
    for r in np.sort(np.asarray(ids)).tolist():
        at = state.get("at")
        start = 0 if at is None or at > r else at + 1
        if start < r:                   # stepped over: the window of each entry's start
            parts.append(np.unique((np.arange(start, r) * rb // win).astype(np.int64)))
        parts.append(_windows(w, params, np.array([r])))
        state["at"] = r
    return _faulted(w, platform, params, np.concatenate(parts), cache)
