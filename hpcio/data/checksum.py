"""CRC32C of records: computed once when a dataset is written or indexed, checked on
every delivery.

Hashing runs in the ``crc32c`` package's C code (SSE4.2/ARMv8 instructions, several GB/s);
what costs is Python's call per record (~0.5 us). Batches of records of one fixed length
avoid it: the whole batch is hashed in one call and compared with the per-record CRCs
combined (CRC is linear: ``crc(A + B) = shift(crc(A), len(B)) ^ crc(B)``, the shifts
looked up in tables made once per record length). Only a batch that fails is hashed
record by record, to name the record. Figures in ``benchmarks/design.md``.
"""

import mmap
import os

import numpy as np
from crc32c import crc32c

__all__ = ["crc32c", "record_crcs", "range_crcs", "batch_ok", "mismatch", "SMALL"]

#: records shorter than this are checked a batch at a time where they have one length
SMALL = 16 << 10
_BITS = np.arange(32, dtype=np.uint32)
_MASK = 0xFFFFFFFF


def record_crcs(data, offsets):
    """CRC32C (uint32) of every record ``data[offsets[k]:offsets[k+1]]``."""
    mv = memoryview(data).cast("B")
    o = np.asarray(offsets).tolist()
    return np.fromiter((crc32c(mv[a:b]) for a, b in zip(o, o[1:])), np.uint32,
                       max(0, len(o) - 1))


def range_crcs(paths, file, offset, length):
    """CRC32C of the byte ranges ``(file, offset, length)`` of the files ``paths``, each
    file mapped once (reads every record once, in file order)."""
    out = np.zeros(len(file), np.uint32)
    order = np.lexsort((offset, file))
    for j in np.unique(file):
        sel = order[file[order] == j]
        with open(paths[j], "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                out[sel] = crc32c(b"")
                continue
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)
                try:
                    a = offset[sel].tolist()
                    b = (offset[sel] + length[sel]).tolist()
                    out[sel] = np.fromiter((crc32c(view[x:y]) for x, y in zip(a, b)),
                                           np.uint32, len(sel))
                finally:
                    view.release()
    return out


def _apply(cols, x):
    """The linear map with images ``cols`` (of the 32 unit vectors) applied to ``x``."""
    bits = (np.asarray(x, np.uint32)[..., None] >> _BITS) & np.uint32(1)
    return np.bitwise_xor.reduce(np.where(bits.astype(bool), cols, np.uint32(0)), axis=-1)


class _Shifts:
    """For records of ``length`` bytes: ``flat[(j * 4 + i) * 256 + v]`` = byte ``i`` of
    value ``v`` of a record's CRC shifted past ``j`` more records (grown on demand)."""

    def __init__(self, length):
        # shift past `length` zero bytes: crc32c(zeros, v) = ~A(~v) with A linear
        zeros = bytes(length)
        unit = np.uint32(1) << _BITS
        self.step = np.array([~crc32c(zeros, int(~u) & _MASK) & _MASK for u in unit],
                             np.uint32)
        self.cols = unit[None, :]  # A^j of the unit vectors, j = 0, 1, ...
        self.flat = np.zeros(0, np.uint32)
        self.where = {}  # n -> the table position of each byte of n records' CRCs
        self.byte_values = np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(
            4, dtype=np.uint32)[:, None])

    def lookup(self, n):
        """The table and, for ``n`` records, where each of their CRCs' bytes indexes it."""
        where = self.where.get(n)
        if where is None:
            while len(self.cols) < n:
                self.cols = np.vstack([self.cols, _apply(self.step, self.cols[-1])[None]])
            if len(self.flat) < n * 1024:
                self.flat = np.stack([_apply(c, self.byte_values)
                                      for c in self.cols[:n]]).ravel()
            j = np.arange(n - 1, -1, -1)[:, None]
            where = self.where[n] = ((j * 4 + np.arange(4)) * 256).ravel()
        return self.flat, where


_SHIFTS = {}


def batch_ok(data, offsets, want, same_length=None):
    """True if the records of ``data`` at ``offsets`` all have their CRC ``want``: one
    hash of the batch for records of one small length, else one hash per record. False
    does not say which: :func:`mismatch` does. ``same_length``: whether every record has
    one length (None: found from ``offsets``)."""
    n = len(want)
    if n == 0:
        return True
    start, end = int(offsets[0]), int(offsets[-1])
    L = int(offsets[1]) - start
    if same_length is None:
        same_length = n > 1 and bool((np.diff(offsets) == L).all())
    if n > 1 and L < SMALL and same_length:
        shifts = _SHIFTS.get(L)
        if shifts is None:
            shifts = _SHIFTS[L] = _Shifts(L)
        flat, where = shifts.lookup(n)
        b = np.ascontiguousarray(want, "<u4").view(np.uint8)
        combined = int(np.bitwise_xor.reduce(flat[where + b]))
        return crc32c(memoryview(data).cast("B")[start:end]) == combined
    return bool(np.array_equal(record_crcs(data, offsets), want))


def mismatch(data, offsets, want):
    """Positions of the records whose CRC is not ``want``."""
    return np.flatnonzero(record_crcs(data, offsets) != want)
