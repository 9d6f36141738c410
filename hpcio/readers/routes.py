"""How the coordinated reader's requests get from the files into its buffers: one read route
per reader, chosen once (:func:`choose`), each behind the same protocol:

* ``prepare(plan, reqs)``: per epoch, collective where the route needs it (the node-shared
  route exchanges the node's plans);
* ``advise(r)``: tell the kernel what request ``r`` will read (``POSIX_FADV_WILLNEED``);
* ``read(r, buf, files, nonblocking)``: request ``r``'s records into ``buf`` in plan
  order; ``files`` (bool per file) are the files every rank reads collectively, the others
  are read independently; ``complete(r)`` finishes a nonblocking read;
* ``close()``.

=============  ================================================================================
route          reads
=============  ================================================================================
``views``      MPI-IO over the index offsets: per file one read through an hindexed file view,
               into place through an hindexed memory type (or, for small records, through
               the holes into a staging buffer and one numpy gather); collective or
               independent (per request and file with ``collective="small"``), blocking or
               nonblocking
``files``      file per record, or more files than MPI should open: ``open`` + ``preadv``
               per record on worker threads
``direct``     ``O_DIRECT``: ``preadv`` of the records' ranges widened to whole blocks into a
               page-aligned staging buffer, on worker threads, then one gather into place
               (reader option ``odirect``; :class:`Direct` says when and why)
``hdf5``       HDF5's parallel I/O (:mod:`hpcio.readers.h5mpio`)
``shared``     the node's union read once into an MPI-3 shared window
               (:mod:`hpcio.readers.nodeshare`)
=============  ================================================================================

Bytes read are bytes delivered: after each request's reads, every file this rank read is
checked against its state on open (:class:`hpcio.readers.base.FileCheck`), since ROMIO
reports the full count for a read past the end of a file that shrank; image files are
checked on the opened file (``fstat``).
"""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import HpcioError
from ..fsutil import aligned_empty
from ..mpiutil import node_comm
from . import h5mpio
from .assemble import copy_records
from .base import POOL, size_error
from .hints import file_hints, mpi_info
from .nodeshare import NodeShare
from .reads import plan_reads
from .requests import advise_ranges

__all__ = ["PATHS", "choose", "Views", "RecordFiles", "H5Parallel", "NodeShared", "Direct",
           "BLOCK", "direct_refusal", "block_ranges"]


# advice spans holes up to this (LMDB's page headers between values): one call per run of
# neighbouring records, where the reads themselves skip the holes
ADVISE_GAP = 32 << 10


def _mpi():
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    return MPI


class _Route:
    """What every route shares: the reader's settings, staging buffers (one per ring slot,
    from the process's pool), and the file descriptors for ``POSIX_FADV_WILLNEED``."""

    name = "?"
    nonblocking = False  # can issue nonblocking reads

    def __init__(self, rd):
        self.rd, self.ds, self.stats = rd, rd.ds, rd.stats
        self._stage = [None] * (rd.prefetch + 1)
        self._fds = []
        if rd.willneed and self.name not in ("files", "direct"):
            self._fds = [os.open(p, os.O_RDONLY) for p in self.ds.paths]
            self.stats.opens += len(self._fds)

    def prepare(self, plan, reqs):
        pass

    def advise(self, r):
        """``POSIX_FADV_WILLNEED`` for the ranges request ``r`` reads: the disk works on
        them while the current request is trained on (the reader knows its future from
        the plan; one large read per request would give the disk nothing to do between
        requests)."""
        if r is None or not self._fds:
            return
        idx = self.ds.index
        f, start, n = advise_ranges(idx.file[r.ids], idx.offset[r.ids], idx.length[r.ids],
                                    ADVISE_GAP)
        t0 = time.perf_counter()
        for j, a, k in zip(f.tolist(), start.tolist(), n.tolist()):
            os.posix_fadvise(self._fds[j], a, k, os.POSIX_FADV_WILLNEED)
        self.stats.io_s += time.perf_counter() - t0

    def stage(self, slot, nbytes):
        buf = self._stage[slot]
        if buf is None or len(buf) < nbytes:  # an outgrown buffer is freed (BufferRing)
            self._stage[slot] = None
            buf = self._stage[slot] = POOL.get(max(int(nbytes * 1.25), 4096))
        return buf

    def complete(self, r):
        pass

    def close(self):
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for b in self._stage:
            POOL.put(b)
        self._stage = [None] * len(self._stage)


class Views(_Route):
    """MPI-IO through file views over the index offsets (see the module docstring)."""

    name = "views"
    nonblocking = True

    def __init__(self, rd):
        super().__init__(rd)
        self._fh, self._own = [], []
        self._scratch = np.zeros(1, dtype=np.uint8)
        MPI = _mpi()
        # collective reads on handles opened by every rank; independent ones on this rank's
        # own handles: setting a file view is collective over the handle's communicator,
        # so with collective="small" an independent read cannot use the shared handle
        self._fh = self._open(rd.comm if rd.collective else MPI.COMM_SELF)
        self._own = self._open(MPI.COMM_SELF) if rd.collective == "small" else self._fh
        if self._fh:
            self.stats.extra["romio"] = file_hints(self._fh[0][0], (
                "romio_cb_read", "cb_nodes", "cb_config_list", "cb_buffer_size",
                "romio_ds_read", "ind_rd_buffer_size"))

    def _open(self, comm):
        """Every file opened on ``comm``: per file a list of handles (nonblocking: one per
        ring slot, a view must not change under a pending read)."""
        MPI, rd = _mpi(), self.rd
        nh = rd.prefetch + 1 if rd.mechanism == "nonblocking" else 1
        info = mpi_info(rd.hints)
        out = []
        try:
            for p in self.ds.paths:
                hs = []
                out.append(hs)
                for _ in range(nh):
                    try:
                        hs.append(MPI.File.Open(comm, p, MPI.MODE_RDONLY, info))
                        self.stats.opens += 1
                    except MPI.Exception as e:
                        raise HpcioError(f"{p}: MPI-IO cannot open it "
                                         f"({e.Get_error_string().strip()})",
                                         everywhere=comm.Get_size() > 1)
        except BaseException:
            _close(out)
            raise
        finally:
            if info != MPI.INFO_NULL:
                info.Free()
        return out

    def read(self, r, buf, files, nonblocking=False):
        """Per file this rank reads and per file read collectively (``files``, which
        every rank joins): one read through a file view over this rank's pieces
        (:func:`hpcio.readers.reads.plan_reads`), into place through an hindexed memory
        type, or into a staging buffer and then copied into place with one numpy
        gather."""
        MPI, rd = _mpi(), self.rd
        idx = self.ds.index
        ids = r.ids
        jobs, staged = plan_reads(idx.file[ids], idx.offset[ids], idx.length[ids],
                                  r.off[:-1], np.flatnonzero(files) if rd.collective
                                  else None, rd.sieve_gap, rd.sieve_ratio)
        slot = r.slot if nonblocking else 0
        stage = self.stage(slot, staged) if staged else None
        for job in jobs:
            coll = bool(rd.collective) and bool(files[job.file])
            fh = (self._fh if coll else self._own)[job.file][slot if nonblocking else 0]
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
            self.stats.collective_calls += coll
            fix = _chain(post)
            if nonblocking:
                q = fh.Iread_at_all(0, spec) if coll else fh.Iread_at(0, spec)
                r.pending.append((q, (job.want, types, fix, job.file)))
                continue
            st = MPI.Status()
            try:
                if coll:
                    fh.Read_at_all(0, spec, st)
                else:
                    fh.Read_at(0, spec, st)
            finally:
                for t in types:
                    t.Free()
            self._got(job.file, st.Get_count(MPI.BYTE), job.want)
            fix()
        if not nonblocking:  # the files as they were on open: the bytes read are theirs
            rd.files_check.check([job.file for job in jobs if job.want])

    def complete(self, r):
        MPI = _mpi()
        reqs = [q for q, _ in r.pending]
        statuses = [MPI.Status() for _ in reqs]
        if reqs:
            MPI.Request.Waitall(reqs, statuses)
        for (q, (want, types, fix, j)), s in zip(r.pending, statuses):
            for t in types:
                t.Free()
            self._got(j, s.Get_count(MPI.BYTE), want)
        self.rd.files_check.check([j for _, (want, _, _, j) in r.pending if want])
        for _, (_, _, fix, _) in r.pending:
            fix()
        r.pending = []

    def _got(self, j, got, want):
        if got != want:
            self.rd.files_check.check([j])  # a shard that changed names itself
            raise HpcioError(f"{self.ds.paths[j]}: MPI-IO read {got} of {want} bytes: a "
                             f"record lies beyond the end of the file (the index does not "
                             f"match the data)")

    def close(self):
        _close(self._fh)
        if self._own is not self._fh:
            _close(self._own)
        self._fh, self._own = [], []
        super().close()


class NodeShared(Views):
    """Independent reads of the node's union into an MPI-3 shared window, each byte once
    (:class:`hpcio.readers.nodeshare.NodeShare`)."""

    name = "shared"
    nonblocking = False

    def __init__(self, rd, node):
        super().__init__(rd)
        self._share = NodeShare(node, self._fh, self._fds, rd.sieve_gap, rd.sieve_ratio)

    def prepare(self, plan, reqs):
        self._share.prepare(self.ds, plan.ids, reqs, plan.batch)

    def advise(self, r):
        if r is None:
            return
        t0 = time.perf_counter()
        self._share.advise(r)
        self.stats.io_s += time.perf_counter() - t0

    def read(self, r, buf, files, nonblocking=False):
        self._share.read(r, buf, self.stats, self.ds.paths, self.rd.files_check)

    def close(self):
        self._share.close()
        super().close()


class H5Parallel(_Route):
    """HDF5's parallel I/O: collective (or independent) ``H5Dread`` of a rank's rows."""

    name = "hdf5"

    def __init__(self, rd):
        super().__init__(rd)
        self._h5 = h5mpio.H5Files(self.ds, rd.comm, rd.collective, rd.hints,
                                  rd.files_check.check)
        self.stats.opens += len(self.ds.paths)

    def read(self, r, buf, files, nonblocking=False):
        got = self._h5.read(r.ids, r.off[:-1], np.flatnonzero(files) if self.rd.collective
                            else None, buf, lambda n: self.stage(0, n), self.stats)
        self.rd.files_check.check(got)  # the files as they were on open

    def close(self):
        self._h5.close()
        super().close()


class RecordFiles(_Route):
    """One ``open`` + ``preadv`` per record, split over the reader's ``threads``: opening
    an MPI file per record would cost a collective open per sample. File names come from
    the broadcast index: no rank lists the folders."""

    name = "files"

    def read(self, r, buf, files, nonblocking=False):
        idx = self.ds.index
        ids = r.ids
        paths = self.ds.paths
        sizes = idx.file_bytes
        whole = self.rd.files_check is None  # every file is a record: checked on the open file
        fil = idx.file[ids].tolist()
        fo = idx.offset[ids].tolist()
        ln = idx.length[ids].tolist()
        dst = r.off[:-1].tolist()
        mv = memoryview(buf)
        n = len(ids)
        T = min(self.rd.threads, max(1, n))
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
            ts = [threading.Thread(target=part, args=(n * k // T, n * (k + 1) // T))
                  for k in range(T)]
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
            self.rd.files_check.check(np.unique(idx.file[ids]))


# O_DIRECT's alignment of offsets, lengths and memory: the page, a multiple of every
# logical block size Linux devices have (512 B or 4 KiB); not st_blksize, which a parallel
# file system sets to its stripe (Lustre: MiBs)
BLOCK = 4096
DIRECT_PIECE = 8 << 20  # at most this much per preadv: ranges above it split for the threads


def direct_refusal(path):
    """Why ``path`` cannot be read with ``O_DIRECT`` (one line), or None: opened with it
    and one aligned block read (tmpfs refuses the open; some FUSE file systems the read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        return f"its file system refuses O_DIRECT ({e.strerror})"
    try:
        os.preadv(fd, [memoryview(aligned_empty(BLOCK))], 0)
    except OSError as e:
        return f"its file system refuses O_DIRECT reads ({e.strerror})"
    finally:
        os.close(fd)
    return None


def block_ranges(fil, off, length, span, block=BLOCK):
    """The ranges to read for records at (file ``fil``, ``off``, ``length``), each widened
    to whole ``block``s and merged where they overlap or touch: (range file, start, end)
    and, per record, its range and its offset in the ranges laid end to end (the staging
    buffer). ``span``: more than any file's size (files are kept apart as f x span)."""
    a = off // block * block
    e = -(-(off + length) // block) * block
    order = np.lexsort((a, fil))
    ga = fil[order] * span + a[order]
    ge = fil[order] * span + e[order]
    reach = np.maximum.accumulate(ge)
    new = np.ones(len(ga), dtype=bool)
    new[1:] = ga[1:] > reach[:-1]
    first = np.flatnonzero(new)
    rstart = ga[first]
    rend = np.append(reach[first[1:] - 1], reach[-1]) if len(first) else rstart
    rfile = rstart // span
    at = np.concatenate(([0], np.cumsum(rend - rstart)))
    which = np.empty(len(ga), dtype=np.int64)
    which[order] = np.cumsum(new) - 1
    pos = at[which] + (fil * span + off - rstart[which])
    return rfile, rstart - rfile * span, rend - rfile * span, which, pos, int(at[-1])


class Direct(_Route):
    """Independent reads with ``O_DIRECT``: the disk's blocks go straight into a
    page-aligned staging buffer by DMA, with no page-cache insertion, eviction or readahead
    on the way, and then one numpy gather puts the records in place. A request's records
    are widened to whole blocks (:func:`block_ranges`: neighbours merge, so sequential plans
    become large reads) and the ranges are read by ``threads`` workers at once, which gives
    the disk a queue to reorder; the kernel's readahead, which the page-cache path relies
    on, does not apply, and ``POSIX_FADV_WILLNEED`` would only fill the cache with pages
    these reads never look at. MPI-IO is left out: ROMIO opens its own descriptors and
    has no portable way to ask for ``O_DIRECT`` on them."""

    name = "direct"

    def __init__(self, rd):
        super().__init__(rd)
        self._dfd = []
        try:
            for p in self.ds.paths:
                self._dfd.append(os.open(p, os.O_RDONLY | os.O_DIRECT))
                self.stats.opens += 1
        except OSError as e:
            self.close()
            raise HpcioError(f"{e.filename}: cannot open it with O_DIRECT ({e.strerror})")
        sizes = self.ds.index.file_bytes
        self._span = (int(max(sizes)) if len(sizes) else 0) + 2 * BLOCK
        self._pool = ThreadPoolExecutor(rd.threads, thread_name_prefix="hpcio-direct") \
            if rd.threads > 1 else None

    def advise(self, r):
        pass

    def read(self, r, buf, files, nonblocking=False):
        idx = self.ds.index
        ids = r.ids
        fil, off, ln = idx.file[ids], idx.offset[ids], idx.length[ids]
        rf, ra, re_, which, pos, total = block_ranges(fil, off, ln, self._span)
        stage = self.stage(0, total)  # one read at a time: on the I/O thread
        # what each range must hold: up to its last record's end (the block after it may
        # lie past the end of the file, where a read returns short)
        need = np.zeros(len(ra), dtype=np.int64)
        np.maximum.at(need, which, off + ln - ra[which])
        at = np.concatenate(([0], np.cumsum(re_ - ra)))
        pieces = []
        for j, a, e, s, k in zip(rf.tolist(), ra.tolist(), re_.tolist(), at[:-1].tolist(),
                                 range(len(ra))):
            while a < e:  # long ranges split so that the threads share them
                n = min(DIRECT_PIECE, e - a)
                pieces.append((j, a, n, s, k))
                a, s = a + n, s + n
        got = np.zeros(len(ra), dtype=np.int64)
        mv = memoryview(stage)
        dfd = self._dfd

        def one(piece):
            j, a, n, s, k = piece
            return k, os.preadv(dfd[j], [mv[s:s + n]], a)
        done = self._pool.map(one, pieces) if self._pool is not None and len(pieces) > 1 \
            else map(one, pieces)
        for k, n in done:
            got[k] += n
        self.stats.calls += len(pieces)
        self.stats.read_bytes += total
        short = np.flatnonzero(got < need)
        if len(short):
            k = int(short[0])
            self.rd.files_check.check([int(rf[k])])  # a shard that changed names itself
            raise HpcioError(f"{self.ds.paths[int(rf[k])]}: read {int(got[k])} of "
                             f"{int(need[k])} bytes at offset {int(ra[k])} with O_DIRECT: a "
                             f"record lies beyond the end of the file (the index does not "
                             f"match the data)")
        copy_records(stage, pos, r.off[:-1], ln, buf)
        self.rd.files_check.check(np.unique(rf))

    def close(self):
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown()
            self._pool = None
        for fd in getattr(self, "_dfd", []):
            os.close(fd)
        self._dfd = []
        super().close()


PATHS = {p.name: p for p in (Views, RecordFiles, H5Parallel, NodeShared, Direct)}


def choose(rd, mpio, filewise, shared, mean_record, share_min):
    """The read route for reader ``rd``: parallel HDF5 when asked, per-record files for
    image folders and very many files, ``O_DIRECT`` reads when the reader settled on them
    (``rd.odirect``), the node-shared window when asked (``shared=True``)
    or, with ``shared="auto"``, for independent reads of records of at least
    ``share_min`` bytes by several ranks of a node; MPI-IO file views otherwise."""
    if mpio:
        return H5Parallel(rd)
    if filewise:
        return RecordFiles(rd)
    if rd.odirect:
        return Direct(rd)
    if not (rd.collective or rd.mechanism == "nonblocking") and shared:
        node = node_comm(rd.comm)
        want = None if shared == "auto" else True
        if want or (node.Get_size() > 1 and mean_record >= share_min):
            return NodeShared(rd, node)
        node.Free()
    return Views(rd)


def _close(handles):
    """Close MPI file handles (lists of them per file), whatever their state."""
    for hs in handles:
        for fh in hs:
            try:
                fh.Close()
            except Exception:
                pass


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
