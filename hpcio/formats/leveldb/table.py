"""LevelDB's table files parsed (its ``doc/table_format.md``): the footer, the index block
(snappy-decompressed here where it is compressed: it is small) and the prefix-compressed
entries of the data blocks, the entries of all restart runs decoded at once with numpy.
Snappy-compressed data blocks are left to LevelDB."""

import numpy as np

from ..datum import read_varint, read_varints

_MAGIC = 0xdb4775248b80fb57


class Corrupt(ValueError):
    pass


def _unsnappy(b):
    """Snappy decompression in Python, for a table's small index block (data blocks stay
    compressed: only LevelDB reads those)."""
    n, p = read_varint(b, 0)
    out, end = bytearray(), len(b)
    while p < end:
        tag, p = b[p], p + 1
        kind = tag & 3
        if kind == 0:  # literal
            ln = tag >> 2
            if ln >= 60:
                ln, p = int.from_bytes(b[p:p + ln - 59], "little"), p + ln - 59
            ln += 1
            out += b[p:p + ln]
            p += ln
            continue
        if kind == 1:
            ln, off, p = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | b[p], p + 1
        else:
            k = 2 if kind == 2 else 4
            ln, off, p = 1 + (tag >> 2), int.from_bytes(b[p:p + k], "little"), p + k
        if not 0 < off <= len(out):
            raise Corrupt("bad snappy copy")
        s = len(out) - off
        out += out[s:s + ln] if off >= ln else (out[s:] * (ln // off + 1))[:ln]
    if len(out) != n or p != end:
        raise Corrupt("bad snappy block")
    return bytes(out)


def _block_items(raw):
    """(key, value) of every entry of a block's contents, in order (index blocks)."""
    nrest = int.from_bytes(raw[-4:], "little")
    end, p, key, out = len(raw) - 4 - 4 * nrest, 0, b"", []
    if end < 0:
        raise Corrupt("bad block")
    while p < end:
        shared, p = read_varint(raw, p)
        ns, p = read_varint(raw, p)
        vl, p = read_varint(raw, p)
        key = key[:shared] + raw[p:p + ns]
        out.append((key, raw[p + ns:p + ns + vl]))
        p += ns + vl
    if p != end:
        raise Corrupt("bad block entry")
    return out


def handle(b, p=0):
    off, p = read_varint(b, p)
    size, p = read_varint(b, p)
    return off, size, p


def _u32(buf, pos):
    b = buf[pos[:, None] + np.arange(4)].astype(np.int64)
    return b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16 | b[:, 3] << 24


def _varints(buf, pos, end):
    """The varint32 at every ``pos`` of ``buf``, none past ``end``: values, positions
    after them."""
    try:
        v, q = read_varints(buf, pos, end)
    except ValueError:
        raise Corrupt("bad varint")
    if (v >> np.uint64(32)).any():
        raise Corrupt("bad varint")
    return v.astype(np.int64), q


def _entries(buf, offs, sizes):
    """Every entry of the uncompressed blocks at ``offs`` (``sizes``) of table ``buf``, in
    file order: (internal keys as an (N, K) uint8 array and their lengths, value offsets,
    value lengths). All restart runs are decoded side by side, one entry of each per
    step; keys are rebuilt from their shared prefixes one byte column at a time."""
    if not len(offs):
        return np.zeros((0, 8), np.uint8), *(np.zeros(0, np.int64) for _ in range(3))
    tail = offs + sizes - 4
    nrest = _u32(buf, tail)
    rarr = tail - 4 * nrest  # the restart array: where entries end
    if (nrest < 1).any() or (rarr < offs).any():
        raise Corrupt("bad restart array")
    blk = np.repeat(np.arange(len(offs)), nrest)
    k = np.arange(int(nrest.sum())) - np.repeat(np.cumsum(nrest) - nrest, nrest)
    start = offs[blk] + _u32(buf, rarr[blk] + 4 * k)
    nxt = offs[blk] + _u32(buf, rarr[blk] + 4 * np.minimum(k + 1, nrest[blk] - 1))
    end = np.where(k + 1 < nrest[blk], nxt, rarr[blk])
    if (start > end).any() or (start < offs[blk]).any():
        raise Corrupt("bad restart point")
    parts, pos, run, step = [], start.copy(), np.flatnonzero(start < end), 0
    while len(run):
        shared, p = _varints(buf, pos[run], end[run])
        ns, p = _varints(buf, p, end[run])
        vl, p = _varints(buf, p, end[run])
        after = p + ns + vl
        if (after > end[run]).any() or (step == 0 and shared.any()):
            raise Corrupt("bad block entry")
        parts.append((run, np.full(len(run), step), shared, ns, p, p + ns, vl))
        pos[run] = after
        run, step = run[after < end[run]], step + 1
    run, step, shared, ns, koff, voff, vl = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((step, run))
    shared, ns, koff, voff, vl = (a[order] for a in (shared, ns, koff, voff, vl))
    n, klen = len(order), shared + ns
    keys = np.zeros((n, int(klen.max())), np.uint8)
    ids = np.arange(n)
    for t in range(keys.shape[1]):
        # byte t of key j is in the delta of the last entry up to j that shares < t + 1
        src = np.maximum.accumulate(np.where(shared <= t, ids, -1))
        has = t < klen
        s = src[has]
        if (s < 0).any() or (klen[s] <= t).any():
            raise Corrupt("bad shared key prefix")
        keys[has, t] = buf[koff[s] + t - shared[s]]
    if (klen < 8).any():
        raise Corrupt("key shorter than its sequence number")
    return keys, klen, voff, vl


def parse_table(size, buf):
    """One table's data blocks (offsets, compression types, upper user keys), whether its
    index block is compressed, and the entries of its uncompressed blocks."""
    if size < 48:
        raise Corrupt("too short for a table")
    foot = bytes(buf[size - 48:size])
    if int.from_bytes(foot[40:], "little") != _MAGIC:
        raise Corrupt("not a table (bad magic number)")
    _, _, p = handle(foot)
    ioff, isize, _ = handle(foot, p)
    if ioff + isize + 5 > size:
        raise Corrupt("index block past the end")
    raw, kind = bytes(buf[ioff:ioff + isize]), int(buf[ioff + isize])
    if kind not in (0, 1):
        raise Corrupt(f"unknown block compression {kind}")
    items = _block_items(_unsnappy(raw) if kind == 1 else raw)
    hs = np.array([handle(v)[:2] for _, v in items], np.int64).reshape(-1, 2)
    offs, sizes = hs[:, 0], hs[:, 1]
    if len(offs) and (offs + sizes + 5 > ioff).any():
        raise Corrupt("data block past the index block")
    kinds = buf[offs + sizes].astype(np.int64)
    if not np.isin(kinds, (0, 1)).all():
        raise Corrupt("unknown block compression")
    unc = kinds == 0
    upper = [k[:-8] for k, _ in items]
    return offs, kinds, upper, kind == 1, _entries(buf, offs[unc], sizes[unc])
