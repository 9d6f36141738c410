"""What the coordinated reader reads for one request, worked out with numpy alone: per file,
the pieces of the file view and where their bytes go. Pure functions over the record
index, so they are tested without MPI; :mod:`hpcio.readers.coordinated` turns each job
into one MPI-IO read.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .assemble import clusters, merge_runs

__all__ = ["ReadJob", "plan_reads"]


@dataclass
class ReadJob:
    """One read of one file: a file view of ``(fstart, flen)`` pieces.

    Direct: the bytes land in place through a memory type of blocks ``(mdst, mlen)`` of
    the request buffer. Staged (``stage`` is set): they land back to back at ``stage`` in
    a staging buffer, and record ``k`` is then copied from ``stage + pos[k]`` to
    ``dst[k]`` (``length[k]`` bytes). ``dups`` are records the request holds twice
    (padding without drop_last), read once and copied ``(src, dst, length)`` afterwards.
    A job with ``want == 0`` reads nothing (a collective read this rank must join).
    """

    file: int
    want: int
    fstart: np.ndarray
    flen: np.ndarray
    mdst: Optional[np.ndarray] = None
    mlen: Optional[np.ndarray] = None
    stage: Optional[int] = None
    pos: Optional[np.ndarray] = None
    dst: Optional[np.ndarray] = None
    length: Optional[np.ndarray] = None
    dups: Optional[tuple] = None

    @property
    def staged(self) -> bool:
        return self.stage is not None


_EMPTY = np.zeros(0, dtype=np.int64)


def plan_reads(rec_file, rec_offset, rec_length, dst, files=None, sieve_gap=0,
               sieve_ratio=3.0):
    """The reads of one request: ``rec_file``, ``rec_offset``, ``rec_length`` of its
    records (plan order) and ``dst``, each record's place in the request buffer.

    One :class:`ReadJob` per file this rank reads and per file in ``files`` (file numbers
    every rank joins for collective reads, some perhaps with nothing to read), in file
    order. Records are sorted by offset and neighbours merged into pieces; pieces at most
    ``sieve_gap`` apart are read as one range into a staging buffer when that reads at
    most ``sieve_ratio`` times the bytes needed (many tiny reads become a few large ones).
    Returns (jobs, staging bytes needed)."""
    order = np.lexsort((rec_offset, rec_file))
    fs = rec_file[order]
    nfiles = int(rec_file.max()) + 1 if len(rec_file) else 0
    if files is not None:
        nfiles = max(nfiles, int(np.max(files)) + 1 if len(files) else 0)
    cuts = np.searchsorted(fs, np.arange(nfiles + 1))
    jobs, staged = [], 0
    for j in (np.unique(fs) if files is None else np.union1d(fs, files)):
        j = int(j)
        sel = order[cuts[j]:cuts[j + 1]] if j < nfiles else order[:0]
        o, d, n = rec_offset[sel], dst[sel], rec_length[sel]
        dups = None
        if len(o) > 1:
            dup = np.flatnonzero(o[1:] == o[:-1]) + 1
            if len(dup):  # a record twice in a request (drop_last=False padding)
                first = np.searchsorted(o, o[dup], side="left")
                dups = (d[first].copy(), d[dup].copy(), n[dup].copy())
                keep = np.ones(len(o), dtype=bool)
                keep[dup] = False
                o, d, n = o[keep], d[keep], n[keep]
        want = int(n.sum())
        if not want:
            jobs.append(ReadJob(j, 0, _EMPTY, _EMPTY, dups=dups))
            continue
        fro, _, frl = merge_runs(o, o, n)  # file runs: neighbours in the file
        if sieve_gap > 0 and len(fro) > 1:
            cs, cl, pos = clusters(o, n, sieve_gap)
            if len(cs) < len(fro) and cl.sum() <= sieve_ratio * want:
                jobs.append(ReadJob(j, int(cl.sum()), cs, cl, stage=staged, pos=pos,
                                    dst=d, length=n, dups=dups))
                staged += int(cl.sum())
                continue
        _, md, ml = merge_runs(o, d, n)  # memory blocks: neighbours in both
        jobs.append(ReadJob(j, want, fro, frl, mdst=md, mlen=ml, dups=dups))
    return jobs, staged
