"""Node-level reading for the coordinated reader: every byte a node needs is read once, in
file order, by large reads split between the node's ranks, into MPI-3 shared memory.

Why: with ``shuffle='none'`` the records of all ranks for a range of steps are one
contiguous range of the files (and nearly so with ``chunk``), but each rank's own records
are pieces of it; ranks reading their own pieces make the disk serve interleaved small
streams. Here the ranks of a node (``COMM_TYPE_SHARED``) agree once per epoch on the
union of their plans (one ``Allgatherv`` of record ids on the node), and for every
request:

1. the union of the node's records is sorted by (file, offset), duplicates dropped, and
   covered by reads (neighbours at most ``gap`` bytes apart share one read, when that
   reads at most ``ratio`` times the bytes needed); the reads are laid end to end in a
   slot of a shared window (``MPI.Win.Allocate_shared``, two slots used in turn);
2. node rank ``k`` of ``L`` reads the ``k``-th ``1/L`` of those bytes (page-aligned cuts),
   one MPI-IO independent read per file through an hindexed file view, straight into
   the window; so the node reads each byte once, as ``L`` large neighbouring pieces;
3. a node-wide nonblocking allreduce (an error flag; polled with short sleeps so the
   waiting thread does not take a core) tells every rank that the slot is complete;
   then every rank checks the files the node read against their state on open (a read
   past the end of a file that shrank reports its full count), so each names the file;
4. each rank copies its own records from the window into its batch buffer, in plan
   order, with one vectorised :func:`copy_records`.

Two slots are enough: a rank writes slot ``s`` again only after the allreduce of the
request in between, which every rank enters only after it has copied out of ``s``
(the copy is done on the same thread, before the next request). This is what LMDBIO
does for LMDB (one reader per node into shared memory), generalised to every format.
"""

import os
import time

import numpy as np

from ..errors import HpcioError
from .assemble import copy_records, layout

__all__ = ["NodeShare", "union_reads"]

ALIGN = 4096


def union_reads(fil, off, ln, gap, ratio):
    """Reads that cover records ``(fil, off, ln)`` (int64 arrays, any order, duplicates
    allowed). Returns ``(rfile, rstart, rlen, pos)``: the reads sorted by (file, offset),
    and for every input record its position in the reads laid end to end. Neighbours in
    a file at most ``gap`` bytes apart share a read, unless that reads more than
    ``ratio`` x the bytes needed (then only touching records do)."""
    order = np.lexsort((off, fil))
    f, o, n = fil[order], off[order], ln[order]
    m = len(f)
    new = np.ones(m, dtype=bool)
    if m > 1:
        new[1:] = (f[1:] != f[:-1]) | (o[1:] != o[:-1])
    uf, uo, un = f[new], o[new], n[new]
    need = int(un.sum())
    for g in (gap, 0):
        brk = np.ones(len(uf), dtype=bool)
        if len(uf) > 1:
            brk[1:] = (uf[1:] != uf[:-1]) | (uo[1:] - (uo[:-1] + un[:-1]) > g)
        first = np.flatnonzero(brk)
        start = uo[first]
        end = np.maximum.reduceat(uo + un, first) if len(first) else start
        if g == 0 or (end - start).sum() <= ratio * max(1, need):
            break
    rlen = end - start
    which = np.cumsum(brk) - 1
    upos = layout(rlen)[which] + (uo - start[which])
    pos = np.empty(m, dtype=np.int64)
    pos[order] = upos[np.cumsum(new) - 1]
    return uf[first], start, rlen, pos


def _mpi():
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    return MPI


class NodeShare:
    """The node's shared window and the per-request reads of this rank (see module)."""

    def __init__(self, node, fh, fds, gap, ratio):
        self.node, self.fh, self.fds = node, fh, fds
        self.gap, self.ratio = gap, ratio
        self.win, self.mem, self.slot_bytes = None, None, 0
        self.k = 0

    # ---- per epoch ---------------------------------------------------------------
    def prepare(self, ds, ids, reqs, B):
        """Attach to every request this rank's share of the node's union (collective on
        the node: one Allgatherv of the plans, maybe a new window)."""
        MPI = _mpi()
        node = self.node
        L, me = node.Get_size(), node.Get_rank()
        counts = np.array(node.allgather(len(ids)), dtype=np.int64)
        every = np.empty(int(counts.sum()), dtype=np.int64)
        node.Allgatherv(np.ascontiguousarray(ids, dtype=np.int64),
                        [every, counts, layout(counts)[:-1], MPI.INT64_T])
        plans = np.split(every, np.cumsum(counts)[:-1])
        idx = ds.index
        need = 0
        for r in reqs:
            a, b = r.lo * B, r.hi * B
            parts = [p[a:b] for p in plans]
            nid = np.concatenate(parts)
            rf, rs, rl, pos = union_reads(idx.file[nid], idx.offset[nid], idx.length[nid],
                                          self.gap, self.ratio)
            rpos = layout(rl)
            T = int(rpos[-1])
            cut = [min(T, (T * k // L) // ALIGN * ALIGN) for k in range(L)] + [T]
            A, Z = cut[me], cut[me + 1]
            # this rank's reads: the reads' bytes in [A, Z), clipped, grouped by file
            lo = np.searchsorted(rpos, A, side="right") - 1 if Z > A else 0
            hi = np.searchsorted(rpos, Z, side="left") if Z > A else 0
            mine = []
            if Z > A:
                k = np.arange(lo, hi)
                s = np.maximum(rpos[k], A)
                e = np.minimum(rpos[k + 1], Z)
                fs = rs[k] + (s - rpos[k])
                fl = e - s
                fj = rf[k]
                keep = fl > 0
                s, fs, fl, fj = s[keep], fs[keep], fl[keep], fj[keep]
                cuts = np.flatnonzero(np.diff(fj)) + 1
                for a2, b2 in zip(np.r_[0, cuts], np.r_[cuts, len(fj)]):
                    if b2 > a2:
                        mine.append((int(fj[a2]), fs[a2:b2], fl[a2:b2], int(s[a2])))
            first = sum(len(p) for p in parts[:me])
            r.union = (mine, pos[first:first + len(parts[me])], Z - A, np.unique(rf))
            need = max(need, T)
        need = -(-max(need, 1) // ALIGN) * ALIGN
        if need > self.slot_bytes:  # every node rank computed the same unions
            self._free()
            self.win = MPI.Win.Allocate_shared(2 * need if me == 0 else 0, 1, comm=node)
            buf, _ = self.win.Shared_query(0)
            self.mem = np.frombuffer(buf, dtype=np.uint8)
            self.slot_bytes = need
        self.k = 0

    # ---- per request (on the I/O thread) ----------------------------------------------
    def advise(self, r, min_bytes=64 << 10):
        """``POSIX_FADV_WILLNEED`` for this rank's share of request ``r``."""
        if r is None or not self.fds:
            return
        for j, fs, fl, _ in r.union[0]:
            big = np.flatnonzero(fl >= min_bytes)
            if len(fs) and fs[-1] + fl[-1] - fs[0] <= 2 * fl.sum():
                os.posix_fadvise(self.fds[j], int(fs[0]), int(fs[-1] + fl[-1] - fs[0]),
                                 os.POSIX_FADV_WILLNEED)
                continue
            for i in big[:1024].tolist():
                os.posix_fadvise(self.fds[j], int(fs[i]), int(fl[i]), os.POSIX_FADV_WILLNEED)

    def read(self, r, buf, stats, paths, check):
        """Read this rank's share of request ``r`` into the window, wait for the node,
        check the files the node read (``check``, a :class:`FileCheck`), copy this rank's
        records into ``buf`` (plan order)."""
        MPI = _mpi()
        mine, pos, nbytes, files = r.union
        base = (self.k % 2) * self.slot_bytes
        self.k += 1
        err = None
        try:
            for j, fs, fl, m in mine:
                want = int(fl.sum())
                ft = MPI.BYTE.Create_hindexed(fl.tolist(), fs.tolist()).Commit()
                fh = self.fh[j][0]
                st = MPI.Status()
                try:
                    fh.Set_view(0, MPI.BYTE, ft)
                    fh.Read_at(0, [self.mem[base + m:base + m + want], MPI.BYTE], st)
                finally:
                    ft.Free()
                stats.calls += 1
                stats.read_bytes += want
                got = st.Get_count(MPI.BYTE)
                if got != want:
                    check.check([j])  # a shard that changed names itself
                    raise HpcioError(f"{paths[j]}: MPI-IO read {got} of {want} bytes: a "
                                     f"record lies beyond the end of the file (the index "
                                     f"does not match the data)")
        except BaseException as e:  # every rank must reach the node-wide flag
            err = e
        ok = self._wait(0 if err else 1)
        if err:
            raise err
        check.check(files)
        if not ok:
            raise HpcioError("another rank of this node failed to read its share")
        n = r.off[1:] - r.off[:-1]
        copy_records(self.mem[base:base + self.slot_bytes], pos, r.off[:-1], n, buf)

    def _wait(self, flag, poll_s=1e-4):
        """Node-wide MIN of ``flag`` by a nonblocking allreduce, polled with sleeps."""
        MPI = _mpi()
        snd = np.array([flag], dtype=np.int32)
        rcv = np.empty(1, dtype=np.int32)
        req = self.node.Iallreduce(snd, rcv, op=MPI.MIN)
        while not req.Test():
            time.sleep(poll_s)
        return bool(rcv[0])

    def _free(self):
        if self.win is not None:
            self.mem = None
            self.win.Free()
            self.win, self.slot_bytes = None, 0

    def close(self):
        self._free()
        if self.node is not None:
            try:
                self.node.Free()
            except Exception:
                pass
            self.node = None
