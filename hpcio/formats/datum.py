"""Caffe's ``Datum`` protobuf, shared by the key-value formats Caffe writes (LMDB, LevelDB):
parse a value down to its ``data`` field, make one, and describe a store of them for a
manifest.

Fields: 1 channels, 2 height, 3 width, 4 data, 5 label, 6 float_data, 7 encoded. A raw
Datum's ``data`` is plane after plane (C x H x W), as Caffe's convert tools write it.
"""

import numpy as np

from ..data import pictures

__all__ = ["parse_datum", "parse_datums", "datum_fields", "make_datum", "describe",
           "read_varint", "read_varints", "write_varint"]


def write_varint(x):
    """``x`` as a protobuf varint (negative numbers as their 64-bit two's complement)."""
    out = bytearray()
    x &= (1 << 64) - 1
    while True:
        c = x & 0x7F
        x >>= 7
        out.append(c | (0x80 if x else 0))
        if not x:
            return bytes(out)


def read_varint(b, p):
    """The varint at ``b[p]``: (value, position after it)."""
    x = s = 0
    while True:
        c = b[p]
        p += 1
        x |= (c & 0x7F) << s
        if c < 0x80:
            return x, p
        s += 7


def read_varints(buf, pos, end):
    """The varint at every ``pos`` of the uint8 array ``buf`` at once: (values as uint64,
    positions after them); ValueError where one runs past ``end``."""
    val = np.zeros(len(pos), np.uint64)
    done = np.zeros(len(pos), bool)
    q = np.asarray(pos, np.int64).copy()
    last = len(buf) - 1
    for k in range(10):
        b = buf[np.minimum(q, last)].astype(np.uint64)
        val |= np.where(done, np.uint64(0), (b & np.uint64(0x7F)) << np.uint64(7 * k))
        q += ~done
        done |= b < 0x80
        if done.all():
            break
    if not done.all() or (q > end).any():
        raise ValueError("bad varint")
    return val, q


def parse_datums(buf, start, length):
    """:func:`parse_datum` of many values at once, one field of each per step: the values
    ``buf[start:start + length]`` of the uint8 array ``buf``; arrays of the data field's
    offset (from each value's start), its length, and the label."""
    start = np.asarray(start, np.int64)
    end = start + np.asarray(length, np.int64)
    pos = start.copy()
    off = np.full(len(start), -1, np.int64)
    ln, label = np.zeros(len(start), np.int64), np.zeros(len(start), np.int64)
    run = np.flatnonzero(pos < end)
    while len(run):
        tag, p = read_varints(buf, pos[run], end[run])
        field, wire = (tag >> np.uint64(3)).astype(np.int64), (tag & np.uint64(7)).astype(int)
        if ((field < 1) | (field > 7) | ~np.isin(wire, (0, 1, 2, 5))).any():
            raise ValueError("not a Datum")
        for w, skip in ((5, 4), (1, 8)):
            p[wire == w] += skip
        for w in (0, 2):
            at = np.flatnonzero(wire == w)
            v, p[at] = read_varints(buf, p[at], end[run[at]])
            is_field = field[at] == (5 if w == 0 else 4)
            dst = run[at[is_field]]
            if w == 0:
                label[dst] = v[is_field].view(np.int64)
            else:
                if (v > (end[run[at]] - p[at]).astype(np.uint64)).any():
                    raise ValueError("not a Datum")
                off[dst], ln[dst] = p[at[is_field]] - start[dst], v[is_field].astype(np.int64)
                p[at] += v.astype(np.int64)
        if (p > end[run]).any():
            raise ValueError("not a Datum")
        pos[run] = p
        run = run[p < end[run]]
    if (off < 0).any():
        raise ValueError("Datum without data")
    return off, ln, label


def parse_datum(buf):
    """(offset, length, label) of a Caffe ``Datum``'s ``data`` field inside ``buf``;
    raises ValueError where ``buf`` is not a Datum with data."""
    b = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    p, n = 0, len(b)
    data, label = None, 0
    while p < n:
        tag, p = read_varint(b, p)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            v, p = read_varint(b, p)
            if field == 5:
                label = v - (1 << 64) if v >= 1 << 63 else v
        elif wire == 2:
            ln, p = read_varint(b, p)
            if field == 4:
                data = (p, ln)
            p += ln
        elif wire == 5:
            p += 4
        elif wire == 1:
            p += 8
        else:
            raise ValueError(f"wire type {wire}")
        if field < 1 or field > 7 or p > n:
            raise ValueError("not a Datum")
    if data is None:
        raise ValueError("Datum without data")
    return data[0], data[1], int(label)


def datum_fields(buf):
    """channels, height, width, encoded of a Datum (for the manifest's shape)."""
    b = bytes(buf)
    p, out = 0, {}
    while p < len(b):
        tag, p = read_varint(b, p)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            v, p = read_varint(b, p)
            out[field] = v
        elif wire == 2:
            ln, p = read_varint(b, p)
            p += ln
        elif wire == 5:
            p += 4
        elif wire == 1:
            p += 8
    return out.get(1, 0), out.get(2, 0), out.get(3, 0), bool(out.get(7, 0))


def make_datum(data, label, channels=0, height=0, width=0, encoded=False):
    """A Caffe Datum protobuf (writers, tests and importers make Caffe-compatible stores)."""
    var = write_varint
    b = bytearray()
    for f, v in ((1, channels), (2, height), (3, width)):
        b += var(f << 3) + var(v)
    b += var(4 << 3 | 2) + var(len(data)) + bytes(data)
    b += var(5 << 3) + var(label)
    if encoded:
        b += var(7 << 3) + var(1)
    return bytes(b)


def describe(first, kind, length, where="the first record"):
    """Encoding, shape, dtype and extra manifest keys of a store made elsewhere, from its
    first value ``first`` (``kind`` "datum" or "record") and every record's ``length``."""
    fo, fl, _ = parse_datum(first) if kind == "datum" else (0, len(first), -1)
    rec = first[fo:fo + fl]
    enc = pictures.sniff(rec) or "raw"
    shape, dtype, extra = [], "uint8", {}
    if kind == "datum":
        c, h, w, _ = datum_fields(first)
        shape = [h, w, c] if h and w else []
        if enc == "raw" and shape and int(np.prod(shape)) != fl:
            dtype = "float32"  # Datum float_data / other element types
        if enc == "raw":
            extra["layout"] = "chw"  # a Datum's data field is plane after plane
    if enc != "raw" and not shape:
        shape = list(pictures.decode(rec, enc, where=where).shape)
    if enc == "raw" and not shape and len(set(length.tolist())) == 1:
        shape = [int(length[0])]
    if kind != "datum":
        extra["note"] = "values are not Caffe Datums: each record is the whole value, " \
                        "labels are -1"
    return enc, shape, dtype, extra
