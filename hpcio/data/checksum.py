"""CRC32C of records: computed once when a dataset is written or indexed, checked on
every delivery.

Hashing runs in the ``crc32c`` package's C code (SSE4.2/ARMv8 instructions, about as fast
as a memory copy); for small records what costs is Python's call per record (~0.5 us).
Batches of small records avoid it: the whole batch is hashed in one call and compared with
the per-record CRCs combined (CRC is linear: ``crc(A + B) = shift(crc(A), len(B)) ^
crc(B)``, the shifts looked up in tables, every CRC of the batch at once): records of one
length with tables per length (64 shifts a level, 256 KiB), records of several lengths,
from :data:`MANY` a batch, with tables for any distance (256 shifts a level, 1 MiB). Only
a batch that fails is hashed record by record, to name the record. The package releases
the GIL while it hashes 32 KiB or more; the per-record calls of records of :data:`SMALL`
bytes and more release it always. Figures in ``benchmarks/design.md``.
"""

import mmap
import os
import threading

import numpy as np
from crc32c import crc32c

__all__ = ["crc32c", "record_crcs", "range_crcs", "batch_ok", "mismatch", "SMALL", "MANY"]

#: records shorter than this (on average) are checked a batch at a time
SMALL = 16 << 10
_BITS = np.arange(32, dtype=np.uint32)
_MASK = 0xFFFFFFFF


def record_crcs(data, offsets):
    """CRC32C (uint32) of every record ``data[offsets[k]:offsets[k+1]]``."""
    mv = memoryview(data).cast("B")
    o = np.asarray(offsets).tolist()
    n = max(0, len(o) - 1)
    # large records: other threads run while each is hashed (the consumer, where the
    # coordinated reader's I/O thread hashes); small ones keep the GIL (cheaper)
    gil = 1 if n and o[-1] - o[0] >= SMALL * n else -1
    return np.fromiter((crc32c(mv[a:b], 0, gil) for a, b in zip(o, o[1:])), np.uint32, n)


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


# ---- shifts: a record's CRC moved past the bytes that follow it ---------------------------
# A shift by ``k`` bytes is linear on CRC values: it is kept as the images of the 32 unit
# vectors (``cols``) or as byte tables (``t[i, v]`` = image of ``v << 8 i``, 4 x 256), and a
# set of shifts as one flat table, shift ``d``'s byte ``i`` of value ``v`` at
# ``(d * 4 + i) * 256 + v``, so that a whole array of values is shifted in one gather.
_BYTE = np.arange(4, dtype=np.int64) * 256
_GROW = threading.Lock()  # tables grow under it (a reader's I/O thread and its consumer)


def _shift_cols(k):
    """The images of the unit vectors under the shift by ``k`` zero bytes:
    ``crc32c(zeros, v) = ~A(~v)`` with A linear."""
    zeros = bytes(k)
    return np.array([~crc32c(zeros, ~(1 << b) & _MASK) & _MASK for b in range(32)], np.uint32)


def _tables(cols):
    """Byte tables (``len(cols)`` x 4 x 256) of the linear maps with images ``cols``
    (``len(cols)`` x 32), each value the XOR of the images of its bits."""
    c = np.asarray(cols, np.uint32).reshape(-1, 4, 8)
    t = np.zeros((len(c), 4, 256), np.uint32)
    for bit in range(8):
        lo = 1 << bit
        t[:, :, lo:2 * lo] = t[:, :, :lo] ^ c[:, :, bit, None]
    return t


def _xor_rows(a):
    """XOR of each row of ``a`` (uint32, an even number of columns): numpy's reduce along
    a row is several times slower than along a column, so pairs are XORed as uint64 first."""
    h = np.bitwise_xor.reduce(a.view(np.uint64), axis=1)
    return (h ^ (h >> np.uint64(32))).astype(np.uint32)


def _through(table, x):
    """``x`` (uint32 array) through the map with byte table ``table`` (4 x 256)."""
    b = np.ascontiguousarray(x, "<u4").view(np.uint8).reshape(-1, 4)
    return np.bitwise_xor.reduce(table.reshape(-1)[b + _BYTE], axis=1)


def _powers(cols, n):
    """The images of the unit vectors under ``A^0 .. A^(n-1)`` (``n`` x 32) for the map
    ``A`` with images ``cols``, by doubling: ``A^(m + j) = A^m A^j``."""
    out = np.zeros((n, 32), np.uint32)
    out[0] = np.uint32(1) << _BITS
    m, pm = 1, np.asarray(cols, np.uint32)  # pm: A^m
    while m < n:
        k = min(m, n - m)
        t = _tables(pm)[0]
        out[m:m + k] = _through(t, out[:k]).reshape(k, 32)
        pm = _through(t, pm)
        m += k
    return out


class _Fixed:
    """Records of one ``length``: record ``k`` of ``n`` moves past ``n - 1 - k`` records,
    a number written in base 64. Level ``j`` shifts by each digit's records times 64^j:
    ``flat[j]`` holds the 64 shifts by ``(63 - c) * length * 64^j`` bytes, column ``c`` of a
    row of 64 CRCs (zeros in front pad the row: a zero CRC shifts to zero), and a row's
    result is one CRC of the next level. Tables of 256 KiB per level, grown as batches
    grow."""

    def __init__(self, length):
        self.unit = _shift_cols(length)  # the shift past one record
        self.flat = []

    def level(self, j):
        with _GROW:
            while len(self.flat) <= j:
                p = _powers(self.unit, 65)
                self.flat.append(_tables(p[63::-1]).reshape(-1))
                self.unit = p[64]  # the shift past 64 times the records
        return self.flat[j]

    def combine(self, want):
        """The CRC of the records laid end to end, from their CRCs ``want``."""
        x, j = want, 0
        while True:
            pad = -len(x) % 64
            if pad:
                x = np.concatenate([np.zeros(pad, np.uint32), x])
            b = np.ascontiguousarray(x, "<u4").view(np.uint8).reshape(-1, 256)
            g = (self.flat[j] if j < len(self.flat) else self.level(j))[b + _ROW]
            if len(g) == 1:
                return int(np.bitwise_xor.reduce(g[0]))
            x, j = _xor_rows(g), j + 1


# byte p of a row of 64 CRCs (CRC p // 4, its byte p % 4) is looked up at p * 256 + value
_ROW = np.arange(256, dtype=np.int64) * 256


class _Any:
    """Records of any lengths: record ``k`` moves past the bytes after it, a number
    written in base 256. Level ``j`` shifts by its digit times 256^j bytes: ``flat[j]``
    holds the 256 shifts by ``d * 256^j`` (1 MiB per level; 3 levels for 16 MiB)."""

    def __init__(self):
        self.unit = _shift_cols(1)
        self.flat = []

    def level(self, j):
        with _GROW:
            while len(self.flat) <= j:
                p = _powers(self.unit, 257)
                self.flat.append(_tables(p[:256]).reshape(-1))
                self.unit = p[256]
        return self.flat[j]

    def combine(self, want, after):
        """The CRC of the records laid end to end, from their CRCs ``want`` and the bytes
        ``after`` each (non-increasing)."""
        x = np.array(want, np.uint32)
        after = np.asarray(after, np.int64)
        below = -after  # non-decreasing: those with 256^j bytes after them come first
        j = 0
        while True:
            n = int(np.searchsorted(below, -(1 << (8 * j)), side="right"))
            if n == 0:  # no record has this many bytes after it
                return int(np.bitwise_xor.reduce(x))
            d = ((after[:n] >> (8 * j)) & 255) << 10
            b = np.ascontiguousarray(x[:n], "<u4").view(np.uint8).reshape(-1, 4)
            g = (self.flat[j] if j < len(self.flat) else self.level(j))[
                b + (d[:, None] + _BYTE)].view(np.uint64)
            h = g[:, 0] ^ g[:, 1]
            x[:n] = h ^ (h >> np.uint64(32))  # the low 32 bits: the four lookups' XOR
            j += 1


_FIXED = {}
_ANY = []
#: records of several lengths are checked a batch at a time from this many on (fewer:
#: one hash per record costs less than the shifts' table lookups)
MANY = 128


def batch_ok(data, offsets, want, same_length=None):
    """True if the records of ``data`` at ``offsets`` all have their CRC ``want``: one
    hash of the batch for small records (one length, or several lengths and at least
    :data:`MANY` of them), else one hash per record. False does not say which:
    :func:`mismatch` does. ``same_length``: whether every record has one length (None:
    found from ``offsets``)."""
    n = len(want)
    if n == 0:
        return True
    offsets = np.asarray(offsets)
    start, end = int(offsets[0]), int(offsets[-1])
    L = int(offsets[1]) - start
    if same_length is None:
        same_length = n > 1 and bool((np.diff(offsets) == L).all())
    if n > 1 and same_length and L < SMALL:
        shifts = _FIXED.get(L)
        if shifts is None:
            shifts = _FIXED[L] = _Fixed(L)
        combined = shifts.combine(want)
    elif n >= MANY and not same_length and end - start < SMALL * n:
        if not _ANY:
            _ANY.append(_Any())
        combined = _ANY[0].combine(want, end - offsets[1:])
    else:
        return bool(np.array_equal(record_crcs(data, offsets), want))
    return crc32c(memoryview(data).cast("B")[start:end]) == combined


def mismatch(data, offsets, want):
    """Positions of the records whose CRC is not ``want``."""
    return np.flatnonzero(record_crcs(data, offsets) != want)
