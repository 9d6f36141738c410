"""The coordinated reader: ranks cooperate, read the index's offsets with MPI-IO, and prefetch.

The index is read once and broadcast (no rank lists a directory or opens the format's
library). Each epoch's plan is cut into requests of a few steps
(:mod:`hpcio.readers.requests`: about ``request_bytes`` per rank, ramped up from one step
so the first batch comes fast); an I/O thread (:mod:`hpcio.readers.iothread`) reads them
``prefetch`` requests ahead into a ring of page-aligned buffers that outlive the reader,
through one read route chosen once (:mod:`hpcio.readers.routes`: MPI-IO file views;
per-record files; parallel HDF5; the node-shared window), and tells the kernel
(``POSIX_FADV_WILLNEED``) what the next request will read. Records arrive in plan order,
one buffer per request, no copy on the way for records of 16 KiB and more. Why each
choice, with the measurements: ``benchmarks/design.md``.

Collective or independent reads (``collective``): ``"auto"`` (the default) and ``False``
read independently, ``True`` every file of every request collectively (ROMIO's two-phase
I/O). ``"small"`` decides per request and file, the same on every rank: collectively
where the ranks' independent reads would be several small pieces (under 16 KiB on
average) lying in a span at most 16 times their bytes
(:func:`hpcio.readers.requests.collective_pays`), independently elsewhere. Two-phase I/O
has each node's aggregator read its part of the span whole, holes included, and ship the
pieces over the network: at 8 ranks on 4 virtual nodes, with ~110 KB JPEGs in a globally
shuffled plan, the aggregators read 8.8x the bytes wanted and every rank waited a third
of each step (independently: 8%); an unshuffled plan too read faster independently, and
784-byte records, read one by one independently, measured the same either way. On one
node every rank shares the page cache, and two-phase I/O only adds a copy.

``O_DIRECT`` (``odirect``): ``"auto"`` (the default) reads with ``O_DIRECT`` (route
``direct``) where every rank's file system takes it, the records average at least
``odirect_min`` bytes (64 KiB), reads are independent, and the files are not in the page
cache already (under half of them resident: a warm cache is worth more than skipping it);
the page-cache path otherwise, with the reason in the reader's stats (``odirect``) and in
the run's summary. ``True`` insists, and a file system that refuses it or records below
``odirect_min`` end the run in one line. Large records read by many ranks at random cost
the page cache its insertions, evictions and readahead past the record; ``O_DIRECT`` skips
all three (``docs/readers.md``, "O_DIRECT": measured against ``seq-ranks``).

A dataset whose records lie compressed in their files (LevelDB's snappy blocks) is
refused. Stopping an epoch early must happen at the same batch on every rank (the reads in
flight are completed, so every rank leaves the collectives together).
"""

import time
from collections import deque

import numpy as np

from ..cache import resident_fraction
from ..data.dataset import compressed_records
from ..errors import HpcioError
from ..mpicompat import check_romio
from . import h5mpio, routes
from .base import Auto, Batch, BufferRing, Collective, FileCheck, Reader, faults, \
    files_are_records, pattern, register
from .iothread import DONE, IOThread, Job
from .requests import collective_pays, cut, extents, request_bounds, steady_steps, touched

__all__ = ["CoordinatedReader", "MECHANISMS", "HDF5_PATHS", "MAX_MPI_FILES",
           "request_bounds", "steady_steps", "SIEVE_BELOW"]

# how requests are kept in flight: an I/O thread, MPI's nonblocking reads issued by the
# consumer's thread, or none (each request read when it is needed)
MECHANISMS = ("thread", "nonblocking", "sync")
# how HDF5 files are read: raw MPI-IO at the index offsets, or HDF5's parallel I/O
HDF5_PATHS = ("offsets", "mpio")
MAX_MPI_FILES = 256
SHARE_MIN_RECORD = 16 << 10
# sieve (read through the holes into a staging buffer, then gather) only records smaller
# than this on average: it saves a system call per record, and costs a copy of every byte
SIEVE_BELOW = 16 << 10
# O_DIRECT by default only for records at least this large on average: below, widening each
# to whole 4 KiB blocks reads much more than asked for, and a small read pays a device
# round trip the page cache's readahead would have shared
ODIRECT_MIN = 64 << 10


def _mpi():
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    return MPI


@register
class CoordinatedReader(Reader):
    """Collective MPI-IO over the record index with prefetching (see the module docstring)."""

    name = "coordinated"

    def __init__(self, dataset, comm, prefetch=2, collective: Collective = "auto",
                 hints: dict = None, mechanism: MECHANISMS = "thread",
                 request_bytes=4 << 20, threads=4, sieve_gap: int = None,
                 sieve_ratio=3.0, willneed=True, shared: Auto = False, ramp=True,
                 hdf5: HDF5_PATHS = "offsets", lease=4, odirect: Auto = "auto",
                 odirect_min=ODIRECT_MIN, **options):
        self.check(dataset, hdf5=hdf5)
        mpio = hdf5 == "mpio"
        super().__init__(dataset, comm, **options)
        packed = compressed_records(dataset.manifest)
        if packed:
            keys = dataset.manifest.get(dataset.format, {})
            comp = keys.get("compression")
            where = (f"are the values of {len(keys.get('columns', []))} columns, each in its "
                     f"own column chunk" if comp == "columns" else
                     f"lie compressed in their files ({dataset.format} compression={comp})")
            raise HpcioError(f"{dataset.root}: {packed:,} of its {dataset.records:,} records "
                             f"{where} and the coordinated reader reads a record as bytes "
                             f"at one offset: read it with the naive or memory reader"
                             f"{'' if comp == 'columns' else ', or make it again with --format-option compression=none'}",
                             everywhere=True)
        MPI = _mpi()
        check_romio(MPI)
        world = comm if comm is not None else MPI.COMM_SELF
        self.collective = _collective(collective, mpio)
        self.hints = dict(hints or {})
        if self.collective is not True:
            # our requests are already merged runs: sieving would only read the holes
            self.hints.setdefault("romio_ds_read", "disable")
        self.prefetch = max(0, int(prefetch))
        self.request_bytes = int(request_bytes)
        self.threads = max(1, int(threads))
        self.sieve_ratio = float(sieve_ratio)
        self.willneed = bool(willneed)
        self.ramp = bool(ramp)
        idx = dataset.index
        self._mean = max(1.0, dataset.nbytes() / max(1, dataset.records))
        if sieve_gap is None:  # holes up to 32 KiB read through, for small records only
            sieve_gap = 32 << 10 if self._mean < SIEVE_BELOW else 0
        self.sieve_gap = int(sieve_gap)
        self.files_check = None if files_are_records(dataset) else \
            FileCheck(dataset, live=self.verify != "off")
        filewise = not mpio and (self.files_check is None or len(idx.files) > MAX_MPI_FILES)
        if (filewise or mpio) and mechanism == "nonblocking":
            mechanism = "thread"  # no MPI files to issue nonblocking reads on
        self.mechanism = mechanism
        self.comm = world.Dup()
        self.lease = max(0, int(lease)) if mechanism == "thread" else 0
        self._io, self._preloaded, self._next = None, None, None
        self._lent = deque()  # [slot, asked count when free] of requests handed out
        # prefetch + 1 slots in flight, and one per batch a consumer may still hold
        self._slots = self.prefetch + 1 + (self.lease + 1 if self.lease else 0)
        self._ring = BufferRing(self._slots, slack=1.25, least=4096)
        self.odirect, why = self._odirect(odirect, int(odirect_min), mpio, filewise,
                                           shared, world)
        self.route = routes.choose(self, mpio, filewise, shared, self._mean, SHARE_MIN_RECORD)
        self.verifies_reads = self.verify == "records"
        if self.mechanism == "nonblocking" and not self.route.nonblocking:
            self.mechanism = "thread"  # the node-shared window reads blocking
        if self.mechanism != "thread":
            self.lease = 0
        self.stats.extra.update(mechanism=self.mechanism, prefetch=self.prefetch,
                                route=self.route.name, shared=self.route.name == "shared",
                                collective=self.collective, filewise=filewise,
                                hints=dict(self.hints), hdf5=hdf5,
                                request_bytes=self.request_bytes, sieve_gap=self.sieve_gap,
                                odirect=why)

    def _odirect(self, want, least, mpio, filewise, shared, world):
        """(use O_DIRECT, one line saying why or why not), the same on every rank
        (collective): ``want`` True refuses in one line what ``"auto"`` passes over."""
        if want not in (True, False, "auto"):
            raise HpcioError(f"reader option odirect={want!r} is not true, false or auto",
                             everywhere=True)
        if want is False:
            return False, "off (odirect=false)"
        paths = self.ds.paths
        why = None
        if mpio or filewise or self.collective or shared is True:
            why = ("reads go through HDF5's parallel I/O" if mpio else
                   "records are files of their own" if filewise else
                   "reads are collective (MPI-IO's two-phase I/O)" if self.collective else
                   "the node-shared window is asked for (shared=true)")
        elif self._mean < least:
            why = (f"records of {self._mean / 1024:.1f} KiB on average, below "
                   f"odirect_min={least:,} bytes (whole 4 KiB blocks per record would read "
                   f"more than asked for)")
        elif paths:
            why = routes.direct_refusal(paths[0])
            if why is None and want == "auto":
                res = resident_fraction(paths[:16])
                if res >= 0.5:
                    why = (f"{100 * res:.0f}% of the data is in the page cache already "
                           f"(a warm cache is worth more than skipping it)")
        if world.Get_size() > 1:
            why = next((w for w in world.allgather(why) if w), None)
        if why is None:
            return True, (f"on: O_DIRECT reads of whole {routes.BLOCK:,}-byte blocks"
                          + (" (odirect=auto)" if want == "auto" else ""))
        if want is True:
            raise HpcioError(f"reader option odirect=true: {self.ds.root}: {why}",
                             everywhere=True)
        return False, f"page cache (odirect=auto: {why})"

    @staticmethod
    def check(dataset, hdf5="offsets", **_):
        """``hdf5="mpio"`` needs an HDF5 dataset of rows and h5py built with MPI."""
        if hdf5 == "mpio":
            h5mpio.check(dataset)

    # ---- the epoch ----------------------------------------------------------------
    def _prepare(self, plan):
        """Cut the plan into requests; agree (collectively) which files each reads
        collectively: every file some rank reads (``collective=True``), or those of them
        where collective reads pay (``"small"``)."""
        MPI = _mpi()
        idx = self.ds.index
        G = steady_steps(plan.batch * self._mean, self.request_bytes)
        reqs = cut(plan.ids, plan.batch, plan.steps, idx.length, G, self.ramp)
        if not self.collective or self.route.name == "files":
            self.route.prepare(plan, reqs)
            return reqs, touched(reqs, idx.file, len(idx.files)).astype(bool)
        many = self.comm.Get_size() > 1
        if many:
            ng = len(reqs)
            shape = np.array([ng, -ng], dtype=np.int64)
            self.comm.Allreduce(MPI.IN_PLACE, shape, op=MPI.MAX)
            if shape[0] != -shape[1]:
                raise HpcioError("ranks execute plans of different lengths (every rank "
                                 "must run the same epoch with the same batch size)")
        if self.collective == "small":
            start, end, nbytes, reads = extents(reqs, idx.file, idx.offset, idx.length,
                                                len(idx.files), self.sieve_gap,
                                                self.sieve_ratio)
            if many:
                self.comm.Allreduce(MPI.IN_PLACE, start, op=MPI.MIN)
                self.comm.Allreduce(MPI.IN_PLACE, end, op=MPI.MAX)
                for a in (nbytes, reads):
                    self.comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
            files = collective_pays(start, end, nbytes, reads)
        else:
            files = touched(reqs, idx.file, len(idx.files))
            if many:
                self.comm.Allreduce(MPI.IN_PLACE, files, op=MPI.MAX)
        self.route.prepare(plan, reqs)
        return reqs, files.astype(bool)

    def preload(self, plan):
        """``plan`` is the epoch that follows the next one (the one :meth:`epoch` runs
        next): queue its requests behind that epoch's, so its first requests are read as
        soon as that epoch's reads are done, while its last batches are trained on. Call
        it on every rank (the plan's requests are agreed now, collectively), before the
        epoch it follows starts, and only while the data stays in the page cache as it is
        (not before a cold epoch). Only with ``mechanism="thread"`` and without the
        node-shared window; a no-op otherwise. If the epoch after is not ``plan`` after
        all, the requests read for it are dropped.

        With collective reads, a process must not have two readers' reads in flight at
        once: MPICH holds its global lock through a blocking collective MPI-IO call, so two
        threads in collectives on different files can wait for each other across ranks
        (hpcio runs one reader at a time)."""
        if self.mechanism == "thread" and self.route.name != "shared":
            self._next = Job(plan, *self._prepare(plan))

    def _job(self, plan):
        """The I/O thread's job for ``plan`` (the preloaded one if it is for ``plan``),
        submitted, with the job preloaded to follow it queued behind it."""
        if self._io is None:
            self._io = IOThread(lambda r, files: self._read(r, files), self.route.advise,
                                self._slots)
        job, self._preloaded = self._preloaded, None
        if job is not None and not (job.plan is plan or (
                job.plan.batch == plan.batch and np.array_equal(job.plan.ids, plan.ids))):
            self._io.finish(job)
            job = None
        if job is None:
            job = Job(plan, *self._prepare(plan))
            self._io.jobs.put(job)
        if self._next is not None:
            self._io.jobs.put(self._next)
            self._preloaded, self._next = self._next, None
        return job

    def batches(self, plan):
        """Yield this rank's batches of ``plan``, in order, read ahead ``prefetch`` requests."""
        thread = self.mechanism == "thread"
        if thread:
            if self._io is not None:
                self._give_back()  # the last epoch's batches are trained on by now
            gen = self._thread_source(self._job(plan))
        else:
            source = {"nonblocking": self._nb_source, "sync": self._sync_source}
            gen = source[self.mechanism](*self._prepare(plan))
        st, idx = self.stats, self.ds.index
        f0 = faults()
        asked = 0  # batches the consumer asked for after the one yielded
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
                    yield batch
                    asked += 1
                    if thread:
                        self._give_back(asked)
                if thread:  # free once the consumer asks for `lease` batches after its last
                    self._lent[-1][1] = asked + self.lease
                    self._give_back(asked)
        finally:
            gen.close()
            self.count_faults(f0)

    # ---- sources: yield requests whose data is in self._ring[r.slot] ----------------
    def _sync_source(self, reqs, touched):
        for r in reqs:
            r.slot = 0
            if r.g + 1 < len(reqs):
                self.route.advise(reqs[r.g + 1])
            self._read(r, touched[r.g])
            yield r

    def _thread_source(self, job):
        """The I/O thread's requests in order; their slots are in :attr:`_lent` until
        :meth:`epoch` gives them back. An early stop gives back every slot lent."""
        io, last, done = self._io, -1, False
        try:
            while True:
                item = job.ready.get()
                if item is DONE:
                    done = True
                    return
                if isinstance(item, BaseException):
                    done = True
                    raise _translate(item)
                last = item.g
                self._lent.append([item.slot, None])
                yield item
        finally:
            if not done:
                io.finish(job, [slot for slot, _ in self._lent], last)
                self._lent.clear()

    def _give_back(self, asked=None):
        """Slots whose lease is over once the consumer has asked for ``asked`` batches
        (all of them with ``None``: the consumer is done with the epoch) go back to the
        I/O thread."""
        lent = self._lent
        while lent and (asked is None or (lent[0][1] is not None and lent[0][1] <= asked)):
            self._io.free.put(lent.popleft()[0])

    def _nb_source(self, reqs, touched):
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
                self._complete(r)
                yield r
        finally:
            while inflight:  # finish what was issued (the collectives must complete)
                self._complete(inflight.popleft())

    def _read(self, r, files, nonblocking=False):
        buf = self._ring.take(r.slot, r.off[-1])
        t0 = r.t0 = time.perf_counter()
        self.route.read(r, buf, files, nonblocking)
        if not nonblocking:
            r.io_s = time.perf_counter() - t0
            self.stats.io_s += r.io_s
            self._check_crcs(r)

    def _complete(self, r):
        t0 = time.perf_counter()
        self.route.complete(r)
        now = time.perf_counter()
        r.io_s = now - r.t0
        self.stats.io_s += now - t0
        self._check_crcs(r)

    def _check_crcs(self, r):
        """The request's records against their CRC32Cs, right after the read (on the I/O
        thread, while the bytes are still in the CPU's cache and off the trainer's path):
        a hash pass over bytes just read costs less than one over bytes gone cold."""
        if self.verifies_reads:
            self.check_crcs(self._ring[r.slot], r.off, r.ids)

    def close(self):
        if getattr(self, "_io", None) is not None:  # before the files: reads may be queued
            if self._preloaded is not None:
                self._io.finish(self._preloaded)
            self._io.close()
            self._io, self._preloaded, self._next = None, None, None
        if getattr(self, "route", None) is not None:
            self.route.close()
            self.route = None
        if getattr(self, "comm", None) is not None:
            try:
                self.comm.Free()
            except Exception:
                pass
            self.comm = None
        if getattr(self, "_ring", None) is not None:
            self._ring.clear()  # the buffers go back to the pool, for the next reader


def _collective(collective, mpio):
    """The reader's ``collective``: ``True``, ``False`` or ``"small"`` (see the module
    docstring), ``"auto"`` resolved."""
    if collective not in (True, False, "auto", "small"):
        raise HpcioError(f"reader option collective={collective!r} is not true, false, "
                         f"small or auto", everywhere=True)
    if mpio:  # HDF5's parallel I/O decides its own two-phase reads: one call for all
        return collective is not False
    return False if collective == "auto" else \
        (collective if collective == "small" else bool(collective))


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


@pattern("coordinated", "prefetch")
def simulated_requests(w, platform, params, ids_by_step):
    """Requests cut by the reader's own rule (:func:`request_bounds`: a ramp from one step,
    doubling up to the steady size), read by one I/O actor up to ``prefetch`` requests
    ahead of the steps; a request's bytes split over the servers that hold its records,
    read from them at once."""
    total = w.records * w.record_bytes
    bounds = request_bounds(len(ids_by_step), w.steady_steps)
    groups = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        ids = np.concatenate(ids_by_step[lo:hi])
        srv = platform.server_of(ids * w.record_bytes, total)
        parts = [(int(j), float((srv == j).sum() * w.record_bytes)) for j in np.unique(srv)]
        groups.append((int(hi) - 1, parts))
    return groups
