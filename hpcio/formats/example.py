"""TensorFlow's ``tf.train.Example`` protobuf, as DLIO's TFRecord generator writes one
(feature ``image`` bytes, ``size`` int64) with a ``label`` (int64): make it, and find in
many at once, without TensorFlow, where each one's image bytes lie and which label it
carries (-1: none, as in DLIO's own files).

Messages: Example {1 features: Features}; Features {1 feature: map entry {1 key,
2 value: Feature}}; Feature {1 bytes_list: BytesList {1 value: bytes}, 2 float_list,
3 int64_list: Int64List {1 value: int64, packed}}.
"""

import numpy as np

from .datum import read_varints, write_varint

__all__ = ["make_example", "example_parts", "example_images", "payloads"]


_var = write_varint


def _ld(field, payload):
    """A length-delimited field."""
    return _var(field << 3 | 2) + _var(len(payload)) + payload


def _int64_entry(key, v):
    return _ld(1, _ld(1, key) + _ld(2, _ld(3, _ld(1, _var(v)))))


def example_parts(n, label):
    """(head, tail) of the Example of an ``n``-byte image: ``head + image + tail`` (so a
    writer never copies the image to make it)."""
    bl = 1 + len(_var(n)) + n  # BytesList
    feat = 1 + len(_var(bl)) + bl  # Feature
    key = _ld(1, b"image")
    entry = len(key) + 1 + len(_var(feat)) + feat
    tail = _int64_entry(b"label", label) + _int64_entry(b"size", n)
    features = 1 + len(_var(entry)) + entry + len(tail)
    head = b"\x0a" + _var(features) + b"\x0a" + _var(entry) + key + b"\x12" + _var(feat) + \
        b"\x0a" + _var(bl) + b"\x0a" + _var(n)
    return head, tail


def make_example(image, label):
    head, tail = example_parts(len(image), label)
    return head + bytes(image) + tail


def _fields(buf, start, end):
    """Every field of the messages ``buf[start[m]:end[m]]`` (uint8 array), one field of
    each message per step: arrays (message, field, wire type, at, n): a length-delimited
    value starts at ``at`` and is ``n`` bytes, a varint's value is ``n``. ValueError where
    they are not protobuf messages."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    pos = start.copy()
    run = np.flatnonzero(pos < end)
    got = []
    while len(run):
        tag, p = read_varints(buf, pos[run], end[run])
        field = (tag >> np.uint64(3)).astype(np.int64)
        wire = (tag & np.uint64(7)).astype(np.int64)
        if (field < 1).any() or (~np.isin(wire, (0, 1, 2, 5))).any():
            raise ValueError("not a protobuf message")
        at, n = p.copy(), np.zeros(len(run), np.int64)
        p[wire == 5] += 4
        p[wire == 1] += 8
        sel = np.flatnonzero((wire == 0) | (wire == 2))
        v, q = read_varints(buf, p[sel], end[run[sel]])
        n[sel] = v.view(np.int64)
        at[sel] = q
        ld = wire[sel] == 2
        if (n[sel][ld] < 0).any():
            raise ValueError("not a protobuf message")
        p[sel] = q + np.where(ld, n[sel], 0)
        if (p > end[run]).any():
            raise ValueError("not a protobuf message")
        got.append((run, field, wire, at, n))
        pos[run] = p
        run = run[p < end[run]]
    if not got:
        return tuple(np.zeros(0, np.int64) for _ in range(5))
    return tuple(np.concatenate(c) for c in zip(*got))


def _sub(buf, parts, field, wire=2):
    """The fields ``field`` of the messages that the length-delimited ``parts`` hold:
    (index into ``parts`` of their owner, at, n) and their wire type."""
    m, f, w, at, n = parts
    s = (f == field) & (w == 2)
    m2, f2, w2, at2, n2 = _fields(buf, at[s], at[s] + n[s])
    return np.flatnonzero(s), (m2, f2, w2, at2, n2)


def _named(buf, at, n, word):
    ok = n == len(word)
    i = np.flatnonzero(ok)
    if len(i):
        got = buf[at[i, None] + np.arange(len(word))]
        ok[i] = (got == np.frombuffer(word, np.uint8)).all(axis=1)
    return ok


def example_images(buf, start, length, image=b"image", label=b"label"):
    """For the Examples ``buf[start[k]:start[k] + length[k]]`` of the uint8 array ``buf``:
    the offset (from each one's start) and length of its ``image`` bytes and its ``label``
    (-1 where it has none), found for all at once, one field per step. ValueError unless
    each is an Example with exactly one ``image`` value."""
    start = np.asarray(start, np.int64)
    top = _fields(buf, start, start + np.asarray(length, np.int64))
    s1, feats = _sub(buf, top, 1)  # Example.features: the fields of each Features
    s2 = np.flatnonzero((feats[1] == 1) & (feats[2] == 2))  # its map entries
    record = top[0][s1][feats[0][s2]]  # the record of each map entry
    me, fe, we, ae, ne = _fields(buf, feats[3][s2], feats[3][s2] + feats[4][s2])
    k = len(s2)
    kat, kn = np.zeros(k, np.int64), np.full(k, -1, np.int64)
    vat, vn = np.zeros(k, np.int64), np.full(k, -1, np.int64)
    for f, a, b in ((1, kat, kn), (2, vat, vn)):
        s = (fe == f) & (we == 2)
        a[me[s]], b[me[s]] = ae[s], ne[s]
    off, ln = np.full(len(start), -1, np.int64), np.zeros(len(start), np.int64)
    labels = np.full(len(start), -1, np.int64)
    e = np.flatnonzero(_named(buf, kat, kn, image) & (vn >= 0))
    feat = _fields(buf, vat[e], vat[e] + vn[e])
    s, vals = _sub(buf, feat, 1)  # Feature.bytes_list
    take = (vals[1] == 1) & (vals[2] == 2)
    rec = record[e[feat[0][s][vals[0][take]]]]
    if len(rec) != len(start) or (np.bincount(rec, minlength=len(start)) != 1).any():
        raise ValueError("not Examples with one image each")
    off[rec], ln[rec] = vals[3][take] - start[rec], vals[4][take]
    e = np.flatnonzero(_named(buf, kat, kn, label) & (vn >= 0))
    feat = _fields(buf, vat[e], vat[e] + vn[e])
    s, vals = _sub(buf, feat, 3)  # Feature.int64_list
    m5, f5, w5, a5, n5 = vals
    packed, plain = (f5 == 1) & (w5 == 2) & (n5 > 0), (f5 == 1) & (w5 == 0)
    v = n5.copy()
    if packed.any():
        v[packed] = read_varints(buf, a5[packed], a5[packed] + n5[packed])[0].view(np.int64)
    take = np.flatnonzero(packed | plain)[::-1]  # the first value wins
    labels[record[e[feat[0][s][m5[take]]]]] = v[take]
    return off, ln, labels


def payloads(data, offsets, image=b"image"):
    """The ``image`` feature's bytes of a batch of Examples (``data`` uint8, record ``k`` at
    ``offsets[k]:offsets[k+1]``), back to back: (data, offsets). Records of one length
    and layout (fixed-size images) are one strided copy; others one slice each."""
    data = np.asarray(data)
    offsets = np.asarray(offsets, np.int64)
    n = len(offsets) - 1
    off, ln, _ = example_images(data, offsets[:-1], np.diff(offsets), image)
    out_off = np.zeros(n + 1, np.int64)
    np.cumsum(ln, out=out_off[1:])
    size = np.diff(offsets)
    if n and (size == size[0]).all() and (off == off[0]).all() and (ln == ln[0]).all():
        rows = data[offsets[0]:offsets[-1]].reshape(n, int(size[0]))
        return np.ascontiguousarray(rows[:, off[0]:off[0] + ln[0]]).reshape(-1), out_off
    out = np.empty(int(out_off[-1]), np.uint8)
    a = (offsets[:-1] + off).tolist()
    for k, (x, b) in enumerate(zip(a, out_off.tolist())):
        out[b:out_off[k + 1]] = data[x:x + int(ln[k])]
    return out, out_off
