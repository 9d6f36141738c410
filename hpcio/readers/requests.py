"""An epoch's plan cut into the coordinated reader's requests, and what each request asks of
the files: pure numpy over the record index, tested without MPI.

A *request* is a group of consecutive steps read at once. Its size is about
``request_bytes`` per rank (:func:`steady_steps`), after a ramp that starts at one step
(:func:`request_bounds`), so an epoch's first batch waits for one step's read.
"""

import numpy as np

from .assemble import layout
from .reads import plan_reads

__all__ = ["Request", "steady_steps", "request_bounds", "cut", "touched", "extents",
           "collective_pays", "SMALL_READ", "MAX_SPAN", "advise_ranges"]

#: ``collective="small"`` reads a request's file collectively where the ranks' independent
#: reads of it would average fewer bytes than this (:func:`collective_pays`)...
SMALL_READ = 16 << 10
#: ... and the span two-phase I/O reads there is at most this many times those bytes
MAX_SPAN = 16


def steady_steps(step_bytes, request_bytes):
    """Steps per steady request: about ``request_bytes`` per rank, at least one step.

    The prefetch ring holds ``prefetch + 1`` requests, so a request of a few steps keeps
    the reads a few steps ahead, and no wait at a request's boundary is longer than one
    such read. Larger requests buy nothing on their own: a rank's records in a shuffled
    request are scattered whatever its size (requests of 53 MiB, as a density heuristic
    once chose for global shuffles, made an epoch nearly all ramp and exposed each ramp
    step's read), and a blocking MPI-IO call holds MPICH's global lock for as long as it
    reads, which every other MPI call of the process then waits for."""
    return max(1, int(round(float(request_bytes) / max(1.0, float(step_bytes)))))


def request_bounds(steps, steady, first=1):
    """Step boundaries of an epoch's requests (``steps + 1``-bounded, from 0): the first
    request ``first`` steps, each next one twice the last, up to ``steady`` steps; every
    later request ``steady`` (the last one what is left). The first batch then waits for
    about one step's read rather than a whole steady request, and the reads stay ahead of
    the consumer while they grow. A function of the plan's length and the steady size
    only, so every rank cuts its plan alike and the collective reads stay matched."""
    steady = max(1, int(steady))
    g, n, bounds = max(1, min(int(first), steady)), 0, [0]
    while n < steps:
        n = min(steps, n + g)
        bounds.append(n)
        g = min(2 * g, steady)
    return np.array(bounds, dtype=np.int64)


class Request:
    """One group of consecutive steps ``[lo, hi)``: its record ids in plan order and their
    offsets ``off`` in the request's buffer (records end to end); the ring ``slot`` it is
    read into, its reads ``pending`` (nonblocking), and ``io_s`` its read time."""

    __slots__ = ("g", "lo", "hi", "ids", "off", "slot", "pending", "io_s", "t0", "union")

    def __init__(self, g, lo, hi, ids, off):
        self.g, self.lo, self.hi, self.ids, self.off = g, lo, hi, ids, off
        self.union = None
        self.slot, self.pending, self.io_s, self.t0 = None, [], 0.0, 0.0


def cut(ids, batch, steps, lengths, steady, ramp=True):
    """The requests of an epoch whose ``steps`` steps of ``batch`` records are ``ids``
    (plan order); ``lengths`` is the index's record lengths."""
    sb = request_bounds(steps, steady, 1 if ramp else steady)
    rb = np.minimum(sb * batch, len(ids))
    reqs = []
    for g in range(len(sb) - 1):
        gi = ids[rb[g]:rb[g + 1]]
        reqs.append(Request(g, int(sb[g]), int(sb[g + 1]), gi, layout(lengths[gi])))
    return reqs


def touched(reqs, rec_file, nfiles):
    """``(requests, files)`` uint8 matrix: 1 where the request reads from the file."""
    out = np.zeros((len(reqs), nfiles), dtype=np.uint8)
    for r in reqs:
        out[r.g, rec_file[r.ids]] = 1
    return out


def extents(reqs, rec_file, rec_offset, rec_length, nfiles, sieve_gap=0, sieve_ratio=3.0):
    """What this rank's independent reads of each file in each request would be (the
    pieces :func:`hpcio.readers.reads.plan_reads` makes with these sieving settings):
    ``(start, end, nbytes, reads)``, int64 ``(requests, files)`` matrices of the lowest
    offset, the highest end, the bytes read and the pieces read (``start`` the int64
    maximum and ``end`` 0 where it reads nothing). Reduced over the ranks (minimum,
    maximum, sum, sum), the input of :func:`collective_pays`."""
    start = np.full((len(reqs), nfiles), np.iinfo(np.int64).max, dtype=np.int64)
    end = np.zeros((len(reqs), nfiles), dtype=np.int64)
    nbytes = np.zeros((len(reqs), nfiles), dtype=np.int64)
    reads = np.zeros((len(reqs), nfiles), dtype=np.int64)
    for r in reqs:
        jobs, _ = plan_reads(rec_file[r.ids], rec_offset[r.ids], rec_length[r.ids],
                             r.off[:-1], None, sieve_gap, sieve_ratio)
        for job in jobs:
            if job.want:
                g, j = r.g, job.file
                start[g, j] = job.fstart[0]
                end[g, j] = int((job.fstart + job.flen).max())
                nbytes[g, j], reads[g, j] = job.want, len(job.fstart)
    return start, end, nbytes, reads


def collective_pays(start, end, nbytes, reads, small=SMALL_READ, max_span=MAX_SPAN):
    """Where a collective read pays: ``(requests, files)`` bool, from the ranks' reduced
    :func:`extents`: true where the independent reads would be several small pieces
    (fewer than ``small`` bytes per piece on average) and the span from the lowest
    ``start`` to the highest ``end`` is at most ``max_span`` times their bytes.

    ROMIO's two-phase read has each node's aggregator read its part of that span whole,
    holes included (in ``cb_buffer_size`` rounds, skipping only rounds with nothing
    wanted), and ship the pieces over the network: it trades the span's bytes and the
    shipping for fewer, larger reads, which is what it is for: many small pieces in a span
    not much wider than them. Measured at 8 ranks on 4 nodes of the virtual cluster
    (``benchmarks/design.md``): with ~110 KB records it never paid, dense (unshuffled) or
    not (globally shuffled: the aggregators read 8.8x the bytes wanted); with 784-byte
    records in a globally shuffled plan (one read per record otherwise) it measured the
    same as independent reads, and lost for an unshuffled one. A pure function of the
    reduced extents, so every rank decides alike, as the collective calls need."""
    span = end - start
    return (reads > 1) & (nbytes < small * reads) & (max_span * nbytes >= span)


def advise_ranges(rec_file, rec_offset, rec_length, gap, min_bytes=64 << 10, max_calls=1024):
    """The file ranges worth a ``POSIX_FADV_WILLNEED`` for these records: sorted by (file,
    offset), neighbours at most ``gap`` apart merged, ranges of at least ``min_bytes``, at
    most ``max_calls`` of them. Returns ``(file, start, length)`` int64 arrays."""
    order = np.lexsort((rec_offset, rec_file))
    f, o, n = rec_file[order], rec_offset[order], rec_length[order]
    if not len(o):
        return f, o, n
    brk = np.ones(len(o), dtype=bool)
    brk[1:] = (f[1:] != f[:-1]) | (o[1:] - (o[:-1] + n[:-1]) > gap)
    first = np.flatnonzero(brk)
    start, end = o[first], np.maximum.reduceat(o + n, first)
    big = np.flatnonzero(end - start >= min_bytes)[:max_calls]
    return f[first[big]], start[big], (end - start)[big]
