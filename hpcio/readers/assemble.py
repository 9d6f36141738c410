"""Vectorised batch assembly: record layout, run merging, and gathers from a big buffer.

A Python loop per record costs more than copying a small record, so :func:`gather` uses
one numpy operation for small records, and a loop over merged runs only when every
iteration moves at least ``BIG_RUN`` bytes: the loop is then memcpy-bound, not
Python-bound (figures in ``benchmarks/design.md``).
"""

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = ["layout", "merge_runs", "gather", "copy_records", "clusters", "BIG_RUN"]

BIG_RUN = 16 << 10
CHUNK = 16 << 10


def layout(lengths):
    """Offsets (``len + 1``, int64) of records laid end to end in one buffer."""
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return off


def merge_runs(src, dst, length):
    """Merge records that are adjacent both in the source and the destination into runs.

    ``src``, ``dst``, ``length``: int64 arrays in copy order. Returns ``(src, dst, length)``
    of the runs (a record of length 0 never breaks a run)."""
    n = len(src)
    if n == 0:
        return src, dst, length
    brk = np.empty(n, dtype=bool)
    brk[0] = True
    brk[1:] = (src[1:] != src[:-1] + length[:-1]) | (dst[1:] != dst[:-1] + length[:-1])
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], n)
    end_bytes = layout(length)
    return src[starts], dst[starts], end_bytes[ends] - end_bytes[starts]


def clusters(offsets, lengths, gap):
    """Cover sorted, non-overlapping pieces ``(offsets, lengths)`` with fewer, larger
    reads: neighbours at most ``gap`` bytes apart share one read. Returns the reads'
    ``(start, length)`` and, for every piece, its position in the reads laid end to end."""
    n = len(offsets)
    end = offsets + lengths
    brk = np.ones(n, dtype=bool)
    if n > 1:
        brk[1:] = offsets[1:] - end[:-1] > gap
    first = np.flatnonzero(brk)
    last = np.append(first[1:], n) - 1
    start = offsets[first]
    length = end[last] - start
    which = np.cumsum(brk) - 1
    pos = layout(length)[which] + (offsets - start[which])
    return start, length, pos


def _chunked(src, out, s, d, ln):
    """Copy records ``(s, d, ln)`` with one fancy index: each record is cut into ``C``-byte
    chunks, the last one shifted back to end at the record's end (it overlaps the one
    before it; overlapping bytes are written twice with the same value)."""
    keep = ln > 0
    s, d, ln = s[keep], d[keep], ln[keep]
    if not len(ln):
        return
    c = int(min(CHUNK, ln.min()))
    nch = -(-ln // c)
    rec = np.repeat(np.arange(len(ln)), nch)
    j = np.arange(len(rec)) - np.repeat(np.cumsum(nch) - nch, nch)
    within = np.minimum(j * c, ln[rec] - c)
    v = np.dtype((np.void, c))
    sv = np.ndarray((len(src) - c + 1,), dtype=v, buffer=src, strides=(1,))
    dv = np.ndarray((len(out) - c + 1,), dtype=v, buffer=out, strides=(1,))
    dv[d[rec] + within] = sv[s[rec] + within]


def copy_records(src, starts, dst, lengths, out):
    """Copy ``src[starts[k]:+lengths[k]]`` to ``out[dst[k]:+lengths[k]]`` for every k
    (int64 arrays; destinations must not overlap)."""
    starts = np.asarray(starts, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n == 0:
        return
    s, d, ln = merge_runs(starts, dst, lengths)
    if len(ln) == 1:
        out[d[0]:d[0] + ln[0]] = src[s[0]:s[0] + ln[0]]
    elif ln.min() >= BIG_RUN:
        for a, b, k in zip(s.tolist(), d.tolist(), ln.tolist()):
            out[b:b + k] = src[a:a + k]
    elif lengths.min() == lengths.max() and lengths[0] > 0:
        L = int(lengths[0])
        rows = as_strided(src, shape=(len(src) - L + 1, L), strides=(1, 1))
        if np.all(np.diff(dst) == L):
            out[dst[0]:dst[0] + n * L].reshape(n, L)[:] = rows[starts]
        else:
            dv = as_strided(out, shape=(len(out) - L + 1, L), strides=(1, 1), writeable=True)
            dv[dst] = rows[starts]
    else:
        _chunked(src, out, s, d, ln)


def gather(src, starts, lengths, out):
    """Copy records ``src[starts[k]:starts[k]+lengths[k]]`` end to end into ``out``
    (uint8, large enough); returns their offsets in ``out`` (``len + 1``)."""
    off = layout(lengths)
    copy_records(src, starts, off[:-1], lengths, out)
    return off
