"""The coordinated reader: ranks cooperate, read with MPI-IO over the index, and prefetch.

What it does differently from the naive reader:

* **Metadata once.** The dataset's manifest and index (and so every file name and record
  offset) come from :func:`hpcio.data.dataset.open_dataset`, read by rank 0 and broadcast; no
  rank lists a directory or opens the format's library.
* **Large collective reads.** The plan says in advance which records a rank needs.
  Consecutive steps are grouped into *requests* of about ``group_bytes`` per rank. For each
  request and each file, a rank's records are sorted by offset, neighbours merged into
  runs, and read with one ``MPI_File_read_at_all`` through an hindexed file view; an
  hindexed *memory* type drops every record straight into its place in plan order, so no
  copy follows. ROMIO's two-phase I/O sees the union of all ranks' requests and reads it
  in large contiguous pieces (set ``cb_config_list=*:*`` to let every rank aggregate on one
  node). Every rank joins every collective on a file some rank needs (with zero bytes if it
  needs none): which files each request touches is agreed once per epoch (one allreduce).
  ``collective=False`` reads the same views independently (``MPI_File_read_at``, with
  ROMIO's data sieving off unless a hint turns it on: the runs are already merged, sieving
  would only add the holes between them). ``collective="auto"`` (default) is independent
  when all ranks share one node and collective otherwise: on one node two-phase I/O only
  adds a copy through the one aggregator (every rank shares one page cache), and for
  shuffled plans it reads the whole extent of the ranks' union (``benchmarks/design.md``).
* **One reader per byte on a node** (``shared=True``, off by default; ``shared="auto"``
  turns it on for independent reads when a node holds several ranks and the mean record
  is at least 16 KiB; :mod:`hpcio.readers.nodeshare`). The ranks of a node
  exchange their plans once per epoch; for each request the union of their records is
  read once, as large pieces in file order split between them, into an MPI-3 shared
  window, and each rank copies its own records out with one vectorised gather. It helps
  pure reads of large records, not small cached ones (hence the record-size threshold),
  and in training it costs more than it saves: every request waits for the slowest rank
  of the node, coupling ranks that training does not couple. Hence off by default.
* **Request size from the plan.** A request is at least ``group_bytes`` per rank and is
  doubled (up to ``max_request_bytes``) while that makes it markedly denser: with
  ``chunk`` shuffling a request then covers a whole mixing window, so a rank's records lie
  close together and sorted reads walk the file forward.
* **A fast first batch.** An epoch's requests ramp up to that steady size
  (:func:`request_bounds`): the first holds one step's records, each next one twice the
  last, so the first batch waits for about one step's read, not for a whole steady
  request (``ramp=False``: every request steady). And where the files stay as they are
  between epochs (warm or as-is cache), :meth:`CoordinatedReader.preload` queues the next
  epoch's requests behind the current ones: its first requests are read while the
  current epoch ends.
* **Small records.** Pieces at most ``sieve_gap`` (32 KiB) apart are read as one range into
  a staging buffer (when that reads at most ``sieve_ratio`` times the bytes needed) and
  gathered into place with numpy: many tiny reads become a few large ones.
* **Read-ahead from the plan.** Once a request is read and handed over, the I/O thread
  tells the kernel (``POSIX_FADV_WILLNEED``) which ranges the *next* request needs, so the
  disk works on it while the current one is trained on (``willneed=False`` turns it off).
  Not before reading the current one: the advice call itself takes milliseconds on a busy
  disk, and the next request's pages then compete with the current one's, which delays
  the batches of an epoch's first requests.
* **Prefetch.** ``prefetch`` requests are in flight while the current one is consumed:
  ``mechanism="thread"`` (default) runs all reads on one I/O thread, which lives as long
  as the reader and reads the epochs' requests in order (MPI is initialised with
  ``MPI_THREAD_MULTIPLE``; the reader works on its own duplicate communicator), blocking
  calls release the GIL; ``mechanism="nonblocking"`` issues ``MPI_File_iread_at_all`` from the
  consumer's thread (one file handle per ring slot, since a view must not change under a
  pending operation); ``mechanism="sync"`` reads each request when it is needed. Buffers
  are a ring of ``prefetch + 1`` page-aligned requests; a batch's data is valid until the
  consumer asks for the next batch of the following request.
* **Image folders** (one file per record, or more than ``MAX_MPI_FILES`` files): opening an
  MPI file per record would cost a collective open per sample, so each rank reads its own
  records with ``open`` + ``preadv`` into place, on ``threads`` worker threads of the I/O
  thread, the file names taken from the broadcast index (no rank lists the folders).

LMDB, LevelDB and HDF5 files are read as bytes at the index offsets, never through their
libraries; a dataset with records stored compressed (LevelDB's snappy blocks) is refused.
Except with ``hdf5="mpio"``: HDF5 files are then read through HDF5's own parallel I/O
(h5py's ``mpio`` driver, collective ``H5Dread`` calls of a rank's rows per file and
request; :mod:`hpcio.readers.h5mpio`), with the same requests, prefetching and checks,
collective unless ``collective=False``.
Stopping an epoch early must happen at the same batch on every rank (the reads already in
flight are completed, so every rank leaves the collectives together).

Bytes read are bytes delivered: after each request's reads, every file this rank read is
checked against its state on open (:class:`hpcio.readers.base.FileCheck`, one ``stat`` per
file and request), since ROMIO reports the full count for a read past the end of a file
that shrank. Image files are checked on the opened file (``fstat``) instead. A failed
check on the I/O thread reaches the consumer as an :class:`HpcioError`.
"""

import os
import queue
import threading
import time
from collections import deque

import numpy as np

from ..data.dataset import compressed_records
from ..errors import HpcioError
from ..fsutil import aligned_empty
from ..mpicompat import check_romio
from ..mpiutil import node_comm
from .assemble import copy_records, layout
from .base import POOL, Auto, Batch, BufferRing, FileCheck, Reader, faults, files_are_records, \
    register, size_error
from . import h5mpio
from .hints import file_hints, mpi_info
from .reads import plan_reads
from .nodeshare import NodeShare

__all__ = ["CoordinatedReader", "MECHANISMS", "HDF5_PATHS", "MAX_MPI_FILES",
           "request_bounds", "steady_steps", "SIEVE_BELOW"]

MECHANISMS = ("thread", "nonblocking", "sync")
# how HDF5 files are read: raw MPI-IO at the index offsets, or HDF5's parallel I/O
HDF5_PATHS = ("offsets", "mpio")
MAX_MPI_FILES = 256
SHARE_MIN_RECORD = 16 << 10
# sieve (read through the holes into a staging buffer, then gather) only records smaller
# than this on average: it saves a system call per record, and costs a copy of every byte
SIEVE_BELOW = 16 << 10
_OK = object()


def _mpi():
    from mpi4py import MPI
    return MPI


class _Request:
    """One group of consecutive steps: its record ids, their layout in the buffer."""

    __slots__ = ("g", "lo", "hi", "ids", "off", "slot", "pending", "io_s", "t0", "union")

    def __init__(self, g, lo, hi, ids, off):
        self.g, self.lo, self.hi, self.ids, self.off = g, lo, hi, ids, off
        self.union = None
        self.slot, self.pending, self.io_s, self.t0 = None, [], 0.0, 0.0


def steady_steps(step_bytes, request_bytes):
    """Steps per steady request: about ``request_bytes`` per rank, at least one step.

    The prefetch ring holds ``prefetch + 1`` requests, so a request of a few steps keeps
    the reads a few steps ahead, and no wait at a request's boundary is longer than one
    such read. Larger requests buy nothing on their own: a rank's records in a shuffled
    request are scattered whatever its size (a request of 53 MiB, as a density heuristic
    once chose for global shuffles, made an epoch nearly all ramp and exposed each ramp
    step's read), and they hold MPI's global lock longer in a blocking MPI-IO call."""
    return max(1, int(round(float(request_bytes) / max(1.0, float(step_bytes)))))


def request_bounds(steps, steady, first=1):
    """Step boundaries of an epoch's requests (``steps + 1``-bounded, from 0): the first
    request ``first`` steps, each next one twice the last, up to ``steady`` steps; every
    later request ``steady`` (the last one what is left). The first batch then waits for
    about one step's read rather than a whole steady request, and the reads stay ahead of
    the consumer while they grow. A function of the plan's length and the agreed steady
    size only, so every rank cuts its plan alike and the collective reads stay matched."""
    steady = max(1, int(steady))
    g, n, bounds = max(1, min(int(first), steady)), 0, [0]
    while n < steps:
        n = min(steps, n + g)
        bounds.append(n)
        g = min(2 * g, steady)
    return np.array(bounds, dtype=np.int64)


class _Job:
    """One epoch's requests for the I/O thread, handed over on ``ready`` in order."""

    __slots__ = ("plan", "reqs", "touched", "ready", "stop")

    def __init__(self, plan, reqs, touched):
        self.plan, self.reqs, self.touched = plan, reqs, touched
        self.ready = queue.Queue()
        self.stop = len(reqs)  # requests from this one on are not read


class _IOThread:
    """The reader's I/O thread (``mechanism="thread"``): reads the requests of the jobs it
    is given, in order, each into a free slot of the ring; so it runs ahead of the
    consumer by as many requests as the ring holds, across the end of an epoch when the
    next epoch's job is queued."""

    def __init__(self, reader, slots):
        self.slots = slots
        self.free, self.jobs = queue.Queue(), queue.Queue()
        for k in range(slots):
            self.free.put(k)
        self.thread = threading.Thread(target=self._run, args=(reader,), name="hpcio-io",
                                       daemon=True)
        self.thread.start()

    def _run(self, reader):
        err = None
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                if err is not None:
                    raise err
                reqs = job.reqs
                reader._advise(reqs[0] if reqs else None)
                for r in reqs:
                    slot = self.free.get()
                    if r.g >= job.stop:
                        self.free.put(slot)
                        break
                    r.slot = slot
                    reader._read(r, job.touched[r.g], nonblocking=False)
                    job.ready.put(r)
                    if r.g + 1 < min(job.stop, len(reqs)):  # after the hand-over
                        reader._advise(reqs[r.g + 1])
                job.ready.put(_OK)
            except BaseException as e:  # handed to the consumer, raised there
                err = e
                job.ready.put(e)

    def finish(self, job, held=None, last=-1):
        """Stop ``job`` early: the consumer took requests up to ``last`` and holds slot
        ``held`` (or none). The thread can have read at most the requests the other slots
        hold beyond ``last``, so it reads exactly those, on every rank alike (every rank
        stops at the same batch and all leave the collectives together); their slots come
        back to the ring."""
        job.stop = min(job.stop, last + self.slots + (held is None))
        if held is not None:
            self.free.put(held)
        while True:
            item = job.ready.get()
            if item is _OK or isinstance(item, BaseException):
                return
            self.free.put(item.slot)

    def close(self):
        self.jobs.put(None)
        self.thread.join()


@register
class CoordinatedReader(Reader):
    """Collective MPI-IO over the record index with prefetching (see the module docstring)."""

    name = "coordinated"

    def __init__(self, dataset, comm, prefetch=2, collective: Auto = "auto",
                 hints: dict = None, mechanism: MECHANISMS = "thread", request_bytes=4 << 20, threads=4, sieve_gap: int = None,
                 sieve_ratio=3.0, willneed=True, shared: Auto = False, ramp=True,
                 hdf5: HDF5_PATHS = "offsets", **options):
        self.check(dataset, hdf5=hdf5)
        mpio = hdf5 == "mpio"
        super().__init__(dataset, comm, **options)
        packed = compressed_records(dataset.manifest)
        if packed:
            comp = dataset.manifest.get(dataset.format, {}).get("compression")
            raise HpcioError(f"{dataset.root}: {packed:,} of its {dataset.records:,} records "
                             f"lie compressed in their files ({dataset.format} compression="
                             f"{comp}) and the coordinated reader reads records as bytes at "
                             f"their offsets: read it with the naive or memory reader, or "
                             f"make it again with --format-option compression=none",
                             everywhere=True)
        MPI = _mpi()
        check_romio(MPI)
        self.prefetch = max(0, int(prefetch))
        world = comm if comm is not None else MPI.COMM_SELF
        if collective == "auto":
            collective = mpio or not _one_node(world)
        self.collective = bool(collective)
        self.hints = dict(hints or {})
        if not self.collective:
            # our requests are already merged runs: sieving would only read the holes
            self.hints.setdefault("romio_ds_read", "disable")
        self.request_bytes = int(request_bytes)
        self.threads = max(1, int(threads))
        self.sieve_ratio = float(sieve_ratio)
        self.willneed = bool(willneed)
        self.ramp = bool(ramp)
        self._io, self._preloaded, self._next = None, None, None
        self._fds = []
        idx = dataset.index
        self._record_files = files_are_records(dataset)
        self._check = None if self._record_files else FileCheck(dataset)
        self.filewise = not mpio and (self._record_files or len(idx.files) > MAX_MPI_FILES)
        if (self.filewise or mpio) and mechanism == "nonblocking":
            mechanism = "thread"  # no MPI files to issue nonblocking reads on
        self.mechanism = mechanism
        self.comm = (comm if comm is not None else MPI.COMM_SELF).Dup()
        self._paths = dataset.paths
        self._mean = max(1.0, dataset.nbytes() / max(1, dataset.records))
        self._base = np.zeros(len(idx.files), dtype=np.int64)  # files laid end to end
        np.cumsum(idx.file_bytes[:-1], out=self._base[1:])
        if sieve_gap is None:  # holes up to 32 KiB read through, for small records only
            sieve_gap = 32 << 10 if self._mean < SIEVE_BELOW else 0
        self.sieve_gap = int(sieve_gap)
        self._ring = BufferRing(self.prefetch + 1, slack=1.25, least=4096)
        self._stage = [None] * (self.prefetch + 1)
        self._fh = []
        self._scratch = aligned_empty(1)
        self._h5 = None
        if mpio:
            self._h5 = h5mpio.H5Files(dataset, self.comm, self.collective, self.hints,
                                      self._check.check)
            self.stats.opens += len(self._paths)
        elif not self.filewise:
            self._open_files(MPI)
        if not self.filewise and self.willneed:
            self._fds = [os.open(p, os.O_RDONLY) for p in self._paths]
            self.stats.opens += len(self._fds)
        self._share = None
        if not (self.collective or self.filewise or mpio or self.mechanism == "nonblocking"):
            want = bool(shared) if shared != "auto" else None
            node = node_comm(self.comm)
            # auto: records of at least SHARE_MIN_RECORD bytes: for small, cached records
            # the copy out of the window and the node-wide wait cost more than they save
            if want or (want is None and node.Get_size() > 1
                        and self._mean >= SHARE_MIN_RECORD):
                self._share = NodeShare(node, self._fh, self._fds, self.sieve_gap,
                                        self.sieve_ratio)
            else:
                node.Free()
        self.stats.extra.update(mechanism=self.mechanism, prefetch=self.prefetch,
                                shared=self._share is not None,
                                collective=self.collective, filewise=self.filewise,
                                hints=dict(self.hints), hdf5=hdf5)

    @staticmethod
    def check(dataset, hdf5="offsets", **_):
        """``hdf5="mpio"`` needs an HDF5 dataset of rows and h5py built with MPI."""
        if hdf5 == "mpio":
            h5mpio.check(dataset)

    # ---- set-up -------------------------------------------------------------------
    def _open_files(self, MPI):
        fcomm = self.comm if self.collective else MPI.COMM_SELF
        nh = self.prefetch + 1 if self.mechanism == "nonblocking" else 1
        info = mpi_info(self.hints)
        try:
            for p in self._paths:
                hs = []
                for _ in range(nh):
                    try:
                        hs.append(MPI.File.Open(fcomm, p, MPI.MODE_RDONLY, info))
                        self.stats.opens += 1
                    except MPI.Exception as e:
                        raise HpcioError(f"{p}: MPI-IO cannot open it "
                                         f"({e.Get_error_string().strip()})",
                                         everywhere=self.collective)
                self._fh.append(hs)
        finally:
            if info != MPI.INFO_NULL:
                info.Free()
        if self._fh:
            self.stats.extra["romio"] = file_hints(self._fh[0][0], (
                "romio_cb_read", "cb_nodes", "cb_config_list", "cb_buffer_size",
                "romio_ds_read", "ind_rd_buffer_size"))

    def _group_steps(self, plan):
        """Steps per steady request (:func:`steady_steps`): the same on every rank, since
        it depends on the dataset's mean record and the batch only."""
        return steady_steps(plan.batch * self._mean, self.request_bytes)


    # ---- the epoch ----------------------------------------------------------------
    def _prepare(self, plan):
        """Cut the plan into requests (ramped up to the steady size: :func:`request_bounds`);
        agree (collectively) which files each touches."""
        MPI = _mpi()
        idx = self.ds.index
        ids, B, S = plan.ids, plan.batch, plan.steps
        G = self._group_steps(plan)
        steps = request_bounds(S, G, 1 if self.ramp else G)
        ng = len(steps) - 1
        bounds = np.minimum(steps * B, len(ids))
        reqs = []
        for g in range(ng):
            gi = ids[bounds[g]:bounds[g + 1]]
            reqs.append(_Request(g, int(steps[g]), int(steps[g + 1]), gi,
                                 layout(idx.length[gi])))
        nfiles = len(idx.files)
        touched = np.zeros((ng, nfiles), dtype=np.uint8)
        if len(ids):
            touched[np.repeat(np.arange(ng), np.diff(bounds)), idx.file[ids]] = 1
        if self.collective and not self.filewise and self.comm.Get_size() > 1:
            shape = np.array([ng, -ng, G, -G], dtype=np.int64)
            self.comm.Allreduce(MPI.IN_PLACE, shape, op=MPI.MAX)
            if shape[0] != -shape[1] or shape[2] != -shape[3]:
                raise HpcioError("ranks execute plans of different lengths (every rank "
                                 "must run the same epoch with the same batch size)")
            self.comm.Allreduce(MPI.IN_PLACE, touched, op=MPI.MAX)
        if self._share is not None:
            self._share.prepare(self.ds, ids, reqs, B)
        return reqs, touched.astype(bool)

    def preload(self, plan):
        """``plan`` is the epoch that follows the next one (the one :meth:`epoch` runs
        next): queue its requests behind that epoch's, so its first requests are read as
        soon as that epoch's reads are done, while its last batches are trained on. Call
        it on every rank (the plan's requests are agreed now, collectively), before the
        epoch it follows starts, and only while the data stays in the page cache as it is
        (a cold epoch re-opens the reader instead). Only with ``mechanism="thread"`` and
        without the node-shared window; a no-op otherwise. If the epoch after is not
        ``plan`` after all, the requests read for it are dropped.

        With collective reads, a process must not have two readers' reads in flight at
        once: MPICH holds its global lock through a blocking collective MPI-IO call, so two
        threads in collectives on different files can wait for each other across ranks
        (hpcio runs one reader at a time)."""
        if self.mechanism == "thread" and self._share is None:
            self._next = _Job(plan, *self._prepare(plan))

    def _job(self, plan):
        """The I/O thread's job for ``plan`` (the preloaded one if it is for ``plan``),
        submitted, with the job preloaded to follow it queued behind it."""
        if self._io is None:
            self._io = _IOThread(self, self.prefetch + 1)
        job, self._preloaded = self._preloaded, None
        if job is not None and not (job.plan is plan or (
                job.plan.batch == plan.batch and np.array_equal(job.plan.ids, plan.ids))):
            self._io.finish(job)
            job = None
        if job is None:
            job = _Job(plan, *self._prepare(plan))
            self._io.jobs.put(job)
        if self._next is not None:
            self._io.jobs.put(self._next)
            self._preloaded, self._next = self._next, None
        return job

    def epoch(self, plan):
        """Yield this rank's batches of ``plan``, in order, read ahead ``prefetch`` requests."""
        if self.mechanism == "thread":
            gen = self._thread_source(self._job(plan))
        else:
            source = {"nonblocking": self._nb_source, "sync": self._sync_source}
            gen = source[self.mechanism](*self._prepare(plan))
        st, idx = self.stats, self.ds.index
        f0 = faults()
        try:
            while True:
                t0 = time.perf_counter()
                r = next(gen, None)
                st.wait_s += time.perf_counter() - t0
                if r is None:
                    break
                buf, off = self._ring[r.slot], r.off
                B = plan.batch
                for s in range(r.lo, r.hi):
                    a = (s - r.lo) * B
                    b = min(a + B, len(r.ids))
                    sid = r.ids[a:b]
                    o = off[a:b + 1] - off[a]
                    batch = Batch(s, sid, buf[off[a]:off[b]], o, idx.label[sid],
                                  fetch_s=r.io_s if s == r.lo else 0.0)
                    st.bytes += int(o[-1])
                    st.records += len(sid)
                    st.batches += 1
                    yield batch
        finally:
            gen.close()
            f1 = faults()
            st.minflt += f1[0] - f0[0]
            st.majflt += f1[1] - f0[1]

    # ---- sources: yield requests whose data is in self._ring[r.slot] ----------------
    def _sync_source(self, reqs, touched):
        for r in reqs:
            r.slot = 0
            if r.g + 1 < len(reqs):
                self._advise(reqs[r.g + 1])
            self._read(r, touched[r.g], nonblocking=False)
            yield r

    def _thread_source(self, job):
        io = self._io
        held, last, done = None, -1, False
        try:
            while True:
                if held is not None:  # the consumer asked for more: its buffer is free
                    io.free.put(held)
                    held = None
                item = job.ready.get()
                if item is _OK:
                    done = True
                    return
                if isinstance(item, BaseException):
                    done = True
                    raise _translate(item)
                held, last = item.slot, item.g
                yield item
        finally:
            if not done:  # early stop
                io.finish(job, held, last)

    def _nb_source(self, reqs, touched):
        MPI = _mpi()
        K = self.prefetch
        inflight = deque()

        def issue(r):
            r.slot = r.g % (K + 1)
            self._read(r, touched[r.g], nonblocking=True)
            inflight.append(r)

        n = len(reqs)
        for r in reqs[:K]:
            issue(r)
        try:
            for g in range(n):
                if g + K < n:
                    issue(reqs[g + K])
                if not inflight or inflight[0].g != g:
                    issue(reqs[g])
                r = inflight.popleft()
                self._complete(r, MPI)
                yield r
        finally:
            while inflight:  # finish what was issued (the collectives must complete)
                self._complete(inflight.popleft(), MPI)

    # ---- the reads ----------------------------------------------------------------
    def _advise(self, r, min_bytes=64 << 10, max_calls=1024):
        """Tell the kernel which file ranges the request after the current one will read
        (``POSIX_FADV_WILLNEED``): it starts reading them from the disk now, while the
        current request is trained on. The reader knows its future from the plan; without
        this, one large read per request gives the disk nothing to do between requests.
        Only ranges of at least ``min_bytes`` (neighbours within ``sieve_gap`` merged)."""
        if r is None or not self._fds:
            return
        if self._share is not None:
            t0 = time.perf_counter()
            self._share.advise(r)
            self.stats.io_s += time.perf_counter() - t0
            return
        idx = self.ds.index
        fil = idx.file[r.ids]
        order = np.lexsort((idx.offset[r.ids], fil))
        f, o = fil[order], idx.offset[r.ids][order]
        n = idx.length[r.ids][order]
        brk = np.ones(len(o), dtype=bool)
        if len(o) > 1:
            brk[1:] = (f[1:] != f[:-1]) | (o[1:] - (o[:-1] + n[:-1]) > self.sieve_gap)
        first = np.flatnonzero(brk)
        start, end = o[first], np.maximum.reduceat(o + n, first) if len(o) else o
        big = np.flatnonzero(end - start >= min_bytes)[:max_calls]
        t0 = time.perf_counter()
        for k in big.tolist():
            os.posix_fadvise(self._fds[f[first[k]]], int(start[k]), int(end[k] - start[k]),
                             os.POSIX_FADV_WILLNEED)
        self.stats.io_s += time.perf_counter() - t0

    def _read(self, r, files, nonblocking):
        buf = self._ring.take(r.slot, r.off[-1])
        t0 = time.perf_counter()
        r.t0 = t0
        if self.filewise:
            self._read_filewise(r, buf)
        elif self._h5 is not None:
            got = self._h5.read(r.ids, r.off[:-1], np.flatnonzero(files) if self.collective
                                else None, buf, lambda n: self._stage_buffer(0, n),
                                self.stats)
            self._check.check(got)  # the files as they were on open
        elif self._share is not None:
            self._share.read(r, buf, self.stats, self._paths, self._check)
        else:
            self._read_mpi(r, files, buf, nonblocking)
        if not nonblocking:
            r.io_s = time.perf_counter() - t0
            self.stats.io_s += r.io_s

    def _complete(self, r, MPI):
        t0 = time.perf_counter()
        reqs = [q for q, _ in r.pending]
        statuses = [MPI.Status() for _ in reqs]
        if reqs:
            MPI.Request.Waitall(reqs, statuses)
        for (q, (want, types, fix, j)), s in zip(r.pending, statuses):
            for t in types:
                t.Free()
            got = s.Get_count(MPI.BYTE)
            if got != want:
                self._check.check([j])  # a shard that changed names itself
                raise HpcioError(f"{self._paths[j]}: MPI-IO read {got} of {want} bytes: a "
                                 f"record lies beyond the end of the file (the index does "
                                 f"not match the data)")
        self._check.check([j for _, (want, _, _, j) in r.pending if want])
        for _, (_, _, fix, _) in r.pending:
            fix()
        r.pending = []
        now = time.perf_counter()
        r.io_s = now - r.t0
        self.stats.io_s += now - t0

    def _read_mpi(self, r, files, buf, nonblocking):
        """Per file (every file some rank needs, when collective): one read through a
        file view over this rank's pieces (:func:`hpcio.readers.reads.plan_reads`), into
        place through an hindexed memory type, or into a staging buffer and then copied
        into place with one numpy gather."""
        MPI = _mpi()
        idx = self.ds.index
        ids = r.ids
        jobs, staged = plan_reads(idx.file[ids], idx.offset[ids], idx.length[ids],
                                  r.off[:-1], np.flatnonzero(files) if self.collective
                                  else None, self.sieve_gap, self.sieve_ratio)
        slot = r.slot if nonblocking else 0
        stage = self._stage_buffer(slot, staged) if staged else None
        for job in jobs:
            fh = self._fh[job.file][slot]
            types, post = [], []
            if not job.want:
                ft, spec = MPI.BYTE, [self._scratch, 0, MPI.BYTE]
            else:
                ft = MPI.BYTE.Create_hindexed(job.flen.tolist(), job.fstart.tolist()).Commit()
                types.append(ft)
                if job.staged:
                    spec = [stage[job.stage:job.stage + job.want], MPI.BYTE]
                    post.append(_stager(stage, job.stage + job.pos, job.dst, job.length,
                                        buf))
                else:
                    mt = MPI.BYTE.Create_hindexed(job.mlen.tolist(), job.mdst.tolist()).Commit()
                    types.append(mt)
                    spec = [buf, 1, mt]
            if job.dups is not None:
                post.append(_copier(buf, *job.dups))
            fh.Set_view(0, MPI.BYTE, ft)
            self.stats.calls += 1
            self.stats.read_bytes += job.want
            fix = _chain(post)
            if nonblocking:
                q = fh.Iread_at_all(0, spec) if self.collective else fh.Iread_at(0, spec)
                r.pending.append((q, (job.want, types, fix, job.file)))
                continue
            st = MPI.Status()
            try:
                if self.collective:
                    fh.Read_at_all(0, spec, st)
                else:
                    fh.Read_at(0, spec, st)
            finally:
                for t in types:
                    t.Free()
            got = st.Get_count(MPI.BYTE)
            if got != job.want:
                self._check.check([job.file])  # a shard that changed names itself
                raise HpcioError(f"{self._paths[job.file]}: MPI-IO read {got} of {job.want} "
                                 f"bytes: a record lies beyond the end of the file (the "
                                 f"index does not match the data)")
            fix()
        if not nonblocking:  # the files as they were on open: the bytes read are theirs
            self._check.check([job.file for job in jobs if job.want])

    def _stage_buffer(self, slot, nbytes):
        buf = self._stage[slot]
        if buf is None or len(buf) < nbytes:
            POOL.put(buf)
            buf = self._stage[slot] = POOL.get(max(int(nbytes * 1.25), 4096))
        return buf

    def _read_filewise(self, r, buf):
        """One open + preadv per record file, split over ``threads`` threads; a file that
        is a record is checked on the opened file (``fstat``), shards per request."""
        idx = self.ds.index
        ids = r.ids
        paths = self._paths
        sizes = idx.file_bytes
        whole = self._record_files
        fil = idx.file[ids].tolist()
        fo = idx.offset[ids].tolist()
        ln = idx.length[ids].tolist()
        dst = r.off[:-1].tolist()
        mv = memoryview(buf)
        n = len(ids)
        T = min(self.threads, max(1, n))
        parts = [(n * k // T, n * (k + 1) // T) for k in range(T)]
        errors = []

        def part(a, b):
            try:
                for k in range(a, b):
                    p = paths[fil[k]]
                    try:
                        fd = os.open(p, os.O_RDONLY)
                    except FileNotFoundError:
                        raise HpcioError(f"{p}: record file missing")
                    try:
                        got = os.preadv(fd, [mv[dst[k]:dst[k] + ln[k]]], fo[k])
                        size = os.fstat(fd).st_size if whole else None
                    finally:
                        os.close(fd)
                    if whole and size != sizes[fil[k]]:
                        raise size_error(p, size, int(sizes[fil[k]]), "during the run")
                    if got != ln[k]:
                        raise HpcioError(f"{p}: read {got} of {ln[k]} bytes at offset "
                                         f"{fo[k]} (the index does not match the data)")
            except BaseException as e:
                errors.append(e)

        if T == 1:
            part(0, n)
        else:
            ts = [threading.Thread(target=part, args=ab) for ab in parts]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        self.stats.calls += n  # one preadv per record
        self.stats.opens += n
        self.stats.read_bytes += int(r.off[-1])
        if errors:
            raise errors[0]
        if not whole:
            self._check.check(np.unique(idx.file[ids]))

    def close(self):
        if getattr(self, "_io", None) is not None:  # before the files: reads may be queued
            if self._preloaded is not None:
                self._io.finish(self._preloaded)
            self._io.close()
            self._io, self._preloaded, self._next = None, None, None
        if getattr(self, "_share", None) is not None:
            self._share.close()
            self._share = None
        if getattr(self, "_h5", None) is not None:
            self._h5.close()
            self._h5 = None
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for hs in self._fh:
            for fh in hs:
                try:
                    fh.Close()
                except Exception:
                    pass
        self._fh = []
        if self.comm is not None:
            try:
                self.comm.Free()
            except Exception:
                pass
            self.comm = None
        self._ring.clear()  # the buffers go back to the pool, for the next reader
        for b in self._stage:
            POOL.put(b)
        self._stage = [None] * (self.prefetch + 1)


def _one_node(comm):
    """True when every rank of ``comm`` shares one node (one page cache)."""
    if comm.Get_size() == 1:
        return True
    node = node_comm(comm)
    try:
        return node.Get_size() == comm.Get_size()
    finally:
        node.Free()


def _noop():
    pass


def _chain(fns):
    if not fns:
        return _noop
    if len(fns) == 1:
        return fns[0]

    def run():
        for f in fns:
            f()
    return run


def _stager(stage, pos, dst, n, buf):
    """After a sieving read: copy the records from the staging buffer into place, in
    destination order (then equal-length records are one row gather into a contiguous
    block, about twice as fast as a scatter)."""
    order = np.argsort(dst, kind="stable")
    pos, dst, n = pos[order], dst[order], n[order]
    return lambda: copy_records(stage, pos, dst, n, buf)


def _copier(buf, src, dst, n):
    """Copy the bytes of records read once to their duplicates' places (rare: padding)."""
    def fix():
        for a, b, k in zip(src.tolist(), dst.tolist(), n.tolist()):
            buf[b:b + k] = buf[a:a + k]
    return fix


def _translate(e):
    """MPI errors raised on the I/O thread become one-line HpcioErrors."""
    if isinstance(e, HpcioError):
        return e
    try:
        MPI = _mpi()
        if isinstance(e, MPI.Exception):
            return HpcioError(f"MPI-IO error: {e.Get_error_string().strip()}")
    except ImportError:  # pragma: no cover
        pass
    return e
