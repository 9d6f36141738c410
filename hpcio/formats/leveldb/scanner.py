"""The record index of a LevelDB database: its tables parsed (:mod:`.table`) and every
value walked through LevelDB, opened privately (:class:`~.native.Private`), to check the
two agree (:func:`scan`)."""

import bisect
import hashlib
import itertools
import mmap
import os
from dataclasses import dataclass

import numpy as np
import plyvel

from ...errors import HpcioError
from ..datum import parse_datums
from .native import Private
from .table import Corrupt, parse_table


def _close(m):
    try:
        m.close()
    except BufferError:  # a view of it lives on in an error's traceback: closed when freed
        pass


@dataclass
class Scan:
    """A database as the index describes it: ``keys`` in key (= record) order, its
    ``tables`` (file names, index file order) and their bytes, and per record the file,
    offset, length and label; ``compressed`` records lie in snappy blocks (at the block's
    offset); ``kind`` is "datum" or "record", ``first`` the first value."""

    keys: list
    tables: list
    table_bytes: list
    file: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    label: np.ndarray
    compressed: int
    snappy: bool
    kind: str
    first: bytes


def _located(path, priv, maps):
    """Parse the live tables of ``priv`` (mapped into ``maps``): their file names, and
    ``where``, the user key of every entry of an uncompressed block -> (table, value
    offset, value length); ``blocks``, the compressed blocks as (upper user key, table,
    offset), sorted; ``snappy``, whether any block is compressed."""
    names, where, blocks, snappy = [], {}, [], False
    for j, (_, number, size) in enumerate(priv.tables):
        name = os.path.basename(os.path.realpath(priv.file(number)))
        names.append(name)
        try:
            with open(os.path.join(path, name), "rb") as f:
                if os.fstat(f.fileno()).st_size != size:
                    raise Corrupt(f"{os.fstat(f.fileno()).st_size} bytes, its MANIFEST "
                                   f"says {size}")
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            offs, kinds, upper, packed_index, (keys, klen, voff, vl) = \
                parse_table(size, np.frombuffer(maps[-1], np.uint8))
        except IndexError:
            raise Corrupt(f"{name}: truncated block")
        except Corrupt as e:
            raise Corrupt(f"{name}: {e}")
        snappy |= packed_index or bool(kinds.any())
        blocks += [(upper[b], j, int(offs[b])) for b in np.flatnonzero(kinds)]
        # user keys: the trailer (sequence number and type) zeroed, then one bytes each
        rows = np.arange(len(klen))
        if (keys[rows, klen - 8] != 1).any():
            raise Corrupt(f"{name}: holds deletions (not compacted)")
        if ((klen > 8) & (keys[rows, np.maximum(klen - 9, 0)] == 0)).any():
            raise HpcioError(f"{path}: keys ending in a NUL byte cannot be indexed")
        keys[np.arange(keys.shape[1]) >= (klen - 8)[:, None]] = 0
        ukeys = np.ascontiguousarray(keys).view(f"S{keys.shape[1]}").ravel().tolist()
        before = len(where)
        where.update(zip(ukeys, zip([j] * len(ukeys), voff.tolist(), vl.tolist())))
        if len(where) != before + len(ukeys):
            raise Corrupt(f"{name}: holds overwritten keys (not compacted)")
    blocks.sort()
    return names, where, blocks, snappy


def scan(path, chunk_bytes=16 << 20):
    """Read LevelDB ``path`` (opened privately: nothing is written into it): parse its
    tables, walk its values through LevelDB with checksums verified, ``chunk_bytes`` at a
    time, and check that every record found in an uncompressed block is byte for byte
    LevelDB's value."""
    priv = Private(path)
    maps, views = [], []
    parts, datum, first, compressed = [], True, None, 0
    try:
        names, where, blocks, snappy = _located(path, priv, maps)
        uppers = [b[0] for b in blocks]
        views = [memoryview(m) for m in maps]
        it = priv.db.iterator(verify_checksums=True, fill_cache=False)
        per = 1024
        while True:
            try:
                pairs = list(itertools.islice(it, per))
            except plyvel.Error as e:
                raise Corrupt(priv.say(e))
            if not pairs:
                break
            keys = [k for k, _ in pairs]
            vals = [v for _, v in pairs]
            del pairs
            first = vals[0] if first is None else first
            n = len(keys)
            vlen = np.fromiter(map(len, vals), np.int64, n)
            per = max(1, chunk_bytes // max(1, int(vlen.mean())))
            at = [where.pop(k, None) for k in keys]
            packed = np.fromiter((a is None for a in at), bool, n)
            for i in np.flatnonzero(packed):  # in a compressed block: LevelDB's bytes only
                b = bisect.bisect_left(uppers, keys[i])
                if b == len(blocks):
                    raise Corrupt(f"key {keys[i][:40]!r} lies in no block")
                at[i] = blocks[b][1:] + (int(vlen[i]),)
            compressed += int(packed.sum())
            file, off, n_in = (np.fromiter((a[k] for a in at), np.int64, n) for k in range(3))
            joined = b"".join(vals)
            mine = [views[a[0]][a[1]:a[1] + a[2]] for a, p in zip(at, packed) if not p]
            theirs = b"".join(v for v, p in zip(vals, packed) if not p) if packed.any() \
                else joined
            if (n_in != vlen).any() or b"".join(mine) != theirs:
                bad = next(k for k, a in enumerate(at) if not packed[k] and
                           views[a[0]][a[1]:a[1] + a[2]] != vals[k])
                raise Corrupt(f"key {keys[bad][:40]!r}: the table's bytes differ from "
                               f"LevelDB's value")
            del mine, theirs
            d = None
            if datum:
                try:
                    d = parse_datums(np.frombuffer(joined, np.uint8),
                                     np.cumsum(vlen) - vlen, vlen)
                except ValueError:
                    datum = False
            parts.append((keys, file, off, vlen, packed, d))
        if where:
            raise Corrupt(f"{len(where)} keys in its tables are not in the database")
    except Corrupt as e:
        raise HpcioError(f"{path}: corrupt LevelDB database ({e})")
    finally:
        for v in views:
            v.release()
        for m in maps:
            _close(m)
        priv.close()
    return _assemble(names, [t[2] for t in priv.tables], parts, datum, first, compressed,
                     snappy)


def _assemble(names, sizes, parts, datum, first, compressed, snappy):
    """The :class:`Scan` from the walk's chunks."""
    keys = [k for p in parts for k in p[0]]
    n = len(keys)
    cat = (lambda k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64))
    file, off, length, packed = cat(1), cat(2), cat(3), cat(4).astype(bool)
    label = np.full(n, -1, np.int64)
    datum = datum and n > 0
    if datum:  # the record is the Datum's data field, where the value is in the file
        d = [np.concatenate([p[5][k] for p in parts]) for k in range(3)]
        off = off + np.where(packed, 0, d[0])
        length, label = d[1], d[2]
    # tables in the order of their first record, so files follow record order
    firsts = np.full(len(names), n, np.int64)
    np.minimum.at(firsts, file, np.arange(n))
    order = np.argsort(firsts, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return Scan(keys, [names[j] for j in order], [sizes[j] for j in order],
                rank[file].astype(np.int32), off, length, label, compressed, snappy,
                "datum" if datum else "record", first)


def ranges_sha256(paths, file, offset, length):
    """sha256 of the index's byte ranges in record order, each cut at its file's end:
    what :func:`hpcio.data.dataset.shard_sha256` computes for a shard directory (for a
    record in a compressed block, the bytes from its block on)."""
    h = hashlib.sha256()
    maps = []
    try:
        for p in paths:
            with open(p, "rb") as f:
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        for j, o, n in zip(file.tolist(), offset.tolist(), length.tolist()):
            h.update(maps[j][o:o + n])
    finally:
        for m in maps:
            _close(m)
    return h.hexdigest()
