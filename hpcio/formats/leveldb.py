"""LevelDB: one database per shard, written the way Caffe writes one.

Layout: ``shard-00000.leveldb/``, written through plyvel with the options of Caffe's
``db_leveldb.cpp`` (64 KiB blocks, a 256 MiB write buffer, 100 open files); record ``i``
under Caffe's key ``b"%08d" % i``. Options (``--format-option``): ``value=record`` (the
encoded record) or ``datum`` (a Caffe Datum around it; raw pictures plane after plane, as
Caffe's converters store them); ``compression=none`` (the default) or ``snappy``
(LevelDB's default, what Caffe writes). The default is none because hpcio reads one
dataset with every reader: snappy stores a block compressed wherever that saves 12.5%,
and a record in a compressed block has no bytes of its own in the file to read at an
offset: snappy is there for Caffe's footprint and for the naive and memory readers.

After writing, the memtable is flushed and compacted (``compact_range``) and LevelDB's
background compaction is let finish: every record lies in an immutable table file
(``.ldb``), the log is empty, and no level is due for compaction, so no later open
rewrites anything. The record index comes from parsing the tables (LevelDB's
``doc/table_format.md``: footer, index block, data blocks of prefix-compressed entries;
the entries of all restart runs decoded at once with numpy) and is checked value by value
against what LevelDB itself returns (``verify_checksums``). Records in snappy-compressed
blocks are indexed at their block (``compressed_records`` in the shard's entry): only
LevelDB reads them, so the coordinated reader refuses such a dataset.

Native access: LevelDB lets one process open a database (an fcntl lock on ``LOCK``) and
writes into its directory on every open (a new MANIFEST and log), so every rank opens a
temporary directory of its own: copies of CURRENT and the MANIFEST, symbolic links to the
dataset's immutable tables. LevelDB reads the shared tables and writes only there, and
with nothing due for compaction (checked on open) it rewrites no table. A job ended by an
MPI abort leaves its ranks' directories behind: the next open on that host removes them.
"""

import bisect
import fcntl
import hashlib
import itertools
import mmap
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import plyvel

from ..data.dataset import RecordIndex
from ..errors import HpcioError
from .base import CAFFE_KEY, ShardResult, classes_of, index_manifest, save_keys, shard_stem
from .datum import describe, make_datum, parse_datum, parse_datums, read_varint, \
    read_varints

__all__ = ["NAME", "KEY", "OPTIONS", "Writer", "Native", "open_native", "targets",
           "manifest_keys", "index", "scan", "in_use", "owned", "compact", "Private"]

NAME = "leveldb"
MAPPED = True  # LevelDB maps its table files: readers check a file before touching it
KEY = CAFFE_KEY
#: format options (``--format-option KEY=VALUE``), the first of each the default
OPTIONS = {"value": ("record", "datum"), "compression": ("none", "snappy")}
#: what Caffe's db_leveldb.cpp sets; the rest is LevelDB's default
CAFFE_OPTIONS = {"block_size": 64 << 10, "write_buffer_size": 256 << 20,
                 "max_open_files": 100}
_MAGIC = 0xdb4775248b80fb57
_TABLE = re.compile(r"\d+\.(ldb|sst)")
_LOG = re.compile(r"\d+\.log")
_L0_TRIGGER = 4  # LevelDB's kL0_CompactionTrigger
_LEVELS = 7


def targets(k, spec):
    return [shard_stem(k) + ".leveldb"]


def _options(spec):
    bad = sorted(set(spec.options) - set(OPTIONS))
    if bad:
        raise HpcioError(f"the leveldb format has no option {', '.join(bad)} (it has "
                         f"{', '.join(OPTIONS)})", everywhere=True)
    out = {}
    for k, choices in OPTIONS.items():
        out[k] = str(spec.options.get(k, choices[0]))
        if out[k] not in choices:
            raise HpcioError(f"leveldb {k}={out[k]}: choose from {'|'.join(choices)}",
                             everywhere=True)
    return out


def manifest_keys(spec):
    o = _options(spec)
    keys = {"leveldb": {"key": KEY, "value": o["value"], "compression": o["compression"]}}
    if o["value"] == "datum" and spec.encoding == "raw":
        keys["layout"] = "chw"  # a raw Datum's data is plane after plane
    return keys


# ---- the database as LevelDB sees it ---------------------------------------------------

_FILES = re.compile(r"CURRENT|LOCK|LOG|LOG\.old|MANIFEST-\d+|\d+\.(log|ldb|sst|dbtmp)")


def owned(path):
    """The files of the database in ``path`` (LevelDB's own names: those an open may have
    added since hpcio wrote it too), which ``--force`` replaces."""
    try:
        return sorted(n for n in os.listdir(path) if _FILES.fullmatch(n))
    except OSError:
        return []


def in_use(path):
    """A line saying another process holds LevelDB ``path`` open, else None. Tried with a
    shared fcntl lock on its ``LOCK`` file, dropped at once: nothing is written."""
    try:
        fd = os.open(os.path.join(path, "LOCK"), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return (f"{path}: locked by another process (LevelDB lets one process open a "
                f"database; close it there first)")
    finally:
        os.close(fd)
    return None


def _tables(db):
    """[(level, number, bytes)] of the live table files (``leveldb.sstables``)."""
    out, level = [], 0
    for line in db.get_property(b"leveldb.sstables").decode("latin-1").splitlines():
        head = re.match(r"--- level (\d+) ---", line)
        table = re.match(r" (\d+):(\d+)\[", line)
        if head:
            level = int(head.group(1))
        elif table:
            out.append((level, int(table.group(1)), int(table.group(2))))
    return out


def _due(tables):
    """Why LevelDB would compact these tables as soon as it opens them, or None
    (``VersionSet::Finalize``: 4 files in level 0, over 10^L MiB in level L)."""
    l0 = sum(1 for t in tables if t[0] == 0)
    if l0 >= _L0_TRIGGER:
        return f"level 0 holds {l0} tables, LevelDB compacts from {_L0_TRIGGER}"
    for level in range(1, _LEVELS - 1):
        size = sum(t[2] for t in tables if t[0] == level)
        limit = 10 * 1048576 * 10 ** (level - 1)
        if size >= limit:
            return f"level {level} holds {size / 2**20:.0f} MiB, over its {limit >> 20} MiB"
    return None


def _settle(db, path, patience=60.0):
    """Wait until LevelDB's background compaction has nothing left to do."""
    last, since = None, time.monotonic()
    while True:
        tables = _tables(db)
        why = _due(tables)
        if why is None:
            return tables
        if tables != last:
            last, since = tables, time.monotonic()
        elif time.monotonic() - since > patience:
            raise HpcioError(f"{path}: LevelDB's compaction made no progress in "
                             f"{patience:.0f} s ({why})")
        time.sleep(0.01)


def compact(path):
    """Open LevelDB ``path`` itself (this writes into it), compact it fully and let the
    background compaction finish, so that hpcio can index it."""
    db = plyvel.DB(path, **CAFFE_OPTIONS)
    try:
        db.compact_range()
        _settle(db, path)
    finally:
        db.close()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process
        pass
    return True


def _private_dir():
    """A new directory for :class:`Private`, named after this host and process; those of
    this host's processes that are gone (an MPI abort ends ranks before their ``close``)
    are removed first."""
    base = tempfile.gettempdir()
    mine = f"hpcio-leveldb-{socket.gethostname()}-"
    for name in os.listdir(base):
        pid = name[len(mine):].split("-")[0] if name.startswith(mine) else ""
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{mine}{os.getpid()}-", dir=base)


def _remedy(path):
    return (f"python -c \"from hpcio.formats.leveldb import compact; compact('{path}')\" "
            f"(it writes into the database)")


class Private:
    """LevelDB ``path`` opened through a directory of this process's own (see the module
    docstring): ``.db`` is the plyvel DB, ``.tables`` its live tables (level, number,
    bytes); ``close`` removes the directory."""

    def __init__(self, path):
        self.path, self.tmp, self.db = path, None, None
        why = in_use(path)
        if why:
            raise HpcioError(why)
        cur = os.path.join(path, "CURRENT")
        try:
            with open(cur, "rb") as f:
                manifest = f.read(256).decode("latin-1").strip()
            names = os.listdir(path)
        except FileNotFoundError:
            raise HpcioError(f"{path}: not a LevelDB database, or a corrupt one (no CURRENT "
                             f"file)")
        except OSError as e:
            raise HpcioError(f"{cur}: {e.strerror}")
        if not re.fullmatch(r"MANIFEST-\d+", manifest) or manifest not in names:
            raise HpcioError(f"{cur}: corrupt LevelDB database (CURRENT names "
                             f"{manifest[:40]!r}, no such MANIFEST file)")
        for name in names:
            size = os.path.getsize(os.path.join(path, name)) if _LOG.fullmatch(name) else 0
            if size:
                raise HpcioError(f"{path}: {size:,} bytes of writes lie in its log {name}, "
                                 f"not in its tables; LevelDB moves them into a table when "
                                 f"it next opens the database: {_remedy(path)}")
        self.tmp = _private_dir()
        try:
            for name in ("CURRENT", manifest):
                shutil.copyfile(os.path.join(path, name), os.path.join(self.tmp, name))
            for name in names:
                if _TABLE.fullmatch(name):
                    os.symlink(os.path.abspath(os.path.join(path, name)),
                               os.path.join(self.tmp, name))
            self.db = plyvel.DB(self.tmp, paranoid_checks=True, **CAFFE_OPTIONS)
            self.tables = _tables(self.db)
        except plyvel.Error as e:
            why = self.say(e)
            self.close()
            raise HpcioError(f"{path}: corrupt LevelDB database ({why})")
        except OSError as e:
            self.close()
            raise HpcioError(f"{path}: cannot open it privately ({e})")
        written = [t[1] for t in self.tables if not os.path.islink(self.file(t[1]))]
        why = _due(self.tables) or (f"it wrote table {written[0]}" if written else None)
        if why:
            self.close()
            raise HpcioError(f"{path}: LevelDB compacts its tables when it opens it ({why}); "
                             f"compact it first: {_remedy(path)}")

    def file(self, number):
        """The path of table ``number`` in the private directory (.ldb, or .sst of old)."""
        p = os.path.join(self.tmp, f"{number:06d}.ldb")
        return p if os.path.lexists(p) else p[:-4] + ".sst"

    def say(self, e):
        """LevelDB's message, first line, naming the dataset instead of the private copy."""
        text = e.args[0] if e.args else ""
        text = (text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text))
        text = text.strip().splitlines()[0] if text.strip() else type(e).__name__
        return text.replace(self.tmp, self.path) if self.tmp else text

    def close(self):
        if self.db is not None:
            self.db.close()
            self.db = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


# ---- table files -----------------------------------------------------------------------

class _Corrupt(ValueError):
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
            raise _Corrupt("bad snappy copy")
        s = len(out) - off
        out += out[s:s + ln] if off >= ln else (out[s:] * (ln // off + 1))[:ln]
    if len(out) != n or p != end:
        raise _Corrupt("bad snappy block")
    return bytes(out)


def _block_items(raw):
    """(key, value) of every entry of a block's contents, in order (index blocks)."""
    nrest = int.from_bytes(raw[-4:], "little")
    end, p, key, out = len(raw) - 4 - 4 * nrest, 0, b"", []
    if end < 0:
        raise _Corrupt("bad block")
    while p < end:
        shared, p = read_varint(raw, p)
        ns, p = read_varint(raw, p)
        vl, p = read_varint(raw, p)
        key = key[:shared] + raw[p:p + ns]
        out.append((key, raw[p + ns:p + ns + vl]))
        p += ns + vl
    if p != end:
        raise _Corrupt("bad block entry")
    return out


def _handle(b, p=0):
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
        raise _Corrupt("bad varint")
    if (v >> np.uint64(32)).any():
        raise _Corrupt("bad varint")
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
        raise _Corrupt("bad restart array")
    blk = np.repeat(np.arange(len(offs)), nrest)
    k = np.arange(int(nrest.sum())) - np.repeat(np.cumsum(nrest) - nrest, nrest)
    start = offs[blk] + _u32(buf, rarr[blk] + 4 * k)
    nxt = offs[blk] + _u32(buf, rarr[blk] + 4 * np.minimum(k + 1, nrest[blk] - 1))
    end = np.where(k + 1 < nrest[blk], nxt, rarr[blk])
    if (start > end).any() or (start < offs[blk]).any():
        raise _Corrupt("bad restart point")
    parts, pos, run, step = [], start.copy(), np.flatnonzero(start < end), 0
    while len(run):
        shared, p = _varints(buf, pos[run], end[run])
        ns, p = _varints(buf, p, end[run])
        vl, p = _varints(buf, p, end[run])
        after = p + ns + vl
        if (after > end[run]).any() or (step == 0 and shared.any()):
            raise _Corrupt("bad block entry")
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
            raise _Corrupt("bad shared key prefix")
        keys[has, t] = buf[koff[s] + t - shared[s]]
    if (klen < 8).any():
        raise _Corrupt("key shorter than its sequence number")
    return keys, klen, voff, vl


def _table(size, buf):
    """One table's data blocks (offsets, compression types, upper user keys), whether its
    index block is compressed, and the entries of its uncompressed blocks."""
    if size < 48:
        raise _Corrupt("too short for a table")
    foot = bytes(buf[size - 48:size])
    if int.from_bytes(foot[40:], "little") != _MAGIC:
        raise _Corrupt("not a table (bad magic number)")
    _, _, p = _handle(foot)
    ioff, isize, _ = _handle(foot, p)
    if ioff + isize + 5 > size:
        raise _Corrupt("index block past the end")
    raw, kind = bytes(buf[ioff:ioff + isize]), int(buf[ioff + isize])
    if kind not in (0, 1):
        raise _Corrupt(f"unknown block compression {kind}")
    items = _block_items(_unsnappy(raw) if kind == 1 else raw)
    hs = np.array([_handle(v)[:2] for _, v in items], np.int64).reshape(-1, 2)
    offs, sizes = hs[:, 0], hs[:, 1]
    if len(offs) and (offs + sizes + 5 > ioff).any():
        raise _Corrupt("data block past the index block")
    kinds = buf[offs + sizes].astype(np.int64)
    if not np.isin(kinds, (0, 1)).all():
        raise _Corrupt("unknown block compression")
    unc = kinds == 0
    upper = [k[:-8] for k, _ in items]
    return offs, kinds, upper, kind == 1, _entries(buf, offs[unc], sizes[unc])


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
                    raise _Corrupt(f"{os.fstat(f.fileno()).st_size} bytes, its MANIFEST "
                                   f"says {size}")
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            offs, kinds, upper, packed_index, (keys, klen, voff, vl) = \
                _table(size, np.frombuffer(maps[-1], np.uint8))
        except IndexError:
            raise _Corrupt(f"{name}: truncated block")
        except _Corrupt as e:
            raise _Corrupt(f"{name}: {e}")
        snappy |= packed_index or bool(kinds.any())
        blocks += [(upper[b], j, int(offs[b])) for b in np.flatnonzero(kinds)]
        # user keys: the trailer (sequence number and type) zeroed, then one bytes each
        rows = np.arange(len(klen))
        if (keys[rows, klen - 8] != 1).any():
            raise _Corrupt(f"{name}: holds deletions (not compacted)")
        if ((klen > 8) & (keys[rows, np.maximum(klen - 9, 0)] == 0)).any():
            raise HpcioError(f"{path}: keys ending in a NUL byte cannot be indexed")
        keys[np.arange(keys.shape[1]) >= (klen - 8)[:, None]] = 0
        ukeys = np.ascontiguousarray(keys).view(f"S{keys.shape[1]}").ravel().tolist()
        before = len(where)
        where.update(zip(ukeys, zip([j] * len(ukeys), voff.tolist(), vl.tolist())))
        if len(where) != before + len(ukeys):
            raise _Corrupt(f"{name}: holds overwritten keys (not compacted)")
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
                raise _Corrupt(priv.say(e))
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
                    raise _Corrupt(f"key {keys[i][:40]!r} lies in no block")
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
                raise _Corrupt(f"key {keys[bad][:40]!r}: the table's bytes differ from "
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
            raise _Corrupt(f"{len(where)} keys in its tables are not in the database")
    except _Corrupt as e:
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


# ---- writing -----------------------------------------------------------------------------

class Writer:
    """Puts records in key order, one write batch per block, into a database opened with
    Caffe's options; ``close`` compacts it and indexes it with :func:`scan`."""

    def __init__(self, root, k, lo, hi, spec):
        o = _options(spec)
        self.rel = shard_stem(k) + ".leveldb"
        self.path = os.path.join(root, self.rel)
        self.lo, self.hi = lo, hi
        self.datum = o["value"] == "datum"
        self.raw = spec.encoding == "raw"
        self.shape = tuple(spec.shape)
        self.labels = []
        self.db = plyvel.DB(self.path, create_if_missing=True, error_if_exists=True,
                            compression=None if o["compression"] == "none" else "snappy",
                            **CAFFE_OPTIONS)

    def _values(self, block):
        n = block.hi - block.lo
        if not self.datum:
            return (block.record(k) for k in range(n))
        if self.raw:  # Caffe's raw Datum: C x H x W
            h, w, c = self.shape
            px = block.data.reshape(n, h, w, c).transpose(0, 3, 1, 2)
            return (make_datum(px[k].tobytes(), int(block.labels[k]), c, h, w)
                    for k in range(n))
        return (make_datum(block.record(k), int(block.labels[k]), encoded=True)
                for k in range(n))

    def write(self, block):
        with self.db.write_batch() as wb:
            for k, v in enumerate(self._values(block)):
                wb.put(b"%08d" % (block.lo + k), v)
        self.labels.append(block.labels)

    def close(self):
        db, self.db = self.db, None
        try:
            db.compact_range()
            _settle(db, self.path)
        finally:
            db.close()
        s = scan(self.path)
        n = self.hi - self.lo
        if s.keys != [b"%08d" % i for i in range(self.lo, self.hi)]:
            raise HpcioError(f"{self.path}: holds {len(s.keys)} keys, wrote {n}")
        label = np.concatenate(self.labels) if self.labels else np.zeros(0, np.int64)
        files = [f"{self.rel}/{t}" for t in s.tables]
        sha = ranges_sha256([os.path.join(self.path, t) for t in s.tables], s.file,
                            s.offset, s.length)
        extra = {"compressed_records": s.compressed} if s.compressed else {}
        return ShardResult(self.rel, (self.lo, self.hi), files, s.table_bytes, s.file,
                           s.offset, s.length, label, sha, extra)

    def abort(self):
        if self.db is not None:
            self.db.close()
            self.db = None


# ---- reading -----------------------------------------------------------------------------

class Native:
    """Every shard's database opened by this rank through its own private directory
    (:class:`Private`); ``get(i)`` is one ``db.get``, ``walk`` steps an iterator
    over the other ranks' records, as Caffe's data layer reads a LevelDB."""

    def __init__(self, ds):
        m = ds.manifest.get("leveldb", {})
        self.template = m.get("key") or KEY
        self.datum = m.get("value") == "datum"
        self.keys = None
        if m.get("keys"):
            self.keys = np.load(os.path.join(ds.root, m["keys"]), allow_pickle=False)
        self.starts = np.array([s["records"][0] for s in ds.manifest["shards"]], np.int64)
        self.dbs, self._its = [], None
        try:
            for shard in ds.manifest["shards"]:
                self.dbs.append(Private(os.path.join(ds.root, shard["path"])))
        except BaseException:
            self.close()
            raise
        self.opens = len(self.dbs)  # databases opened (ReaderStats.opens)

    def _shard(self, i):
        return int(np.searchsorted(self.starts, i, side="right")) - 1 if len(self.dbs) > 1 \
            else 0

    def _record(self, v):
        if self.datum:
            o, n, _ = parse_datum(v)
            return memoryview(v)[o:o + n]
        return v

    def get(self, i):
        s = self._shard(i)
        key = bytes(self.keys[i]) if self.keys is not None else (self.template % i).encode()
        try:
            v = self.dbs[s].db.get(key)
        except plyvel.Error as e:
            raise HpcioError(f"{self.dbs[s].path}: record {i}: LevelDB failed "
                             f"({self.dbs[s].say(e)})")
        if v is None:
            raise HpcioError(f"record {i}: key {key!r} not in {self.dbs[s].path}")
        return self._record(v)

    def walk(self, ids, skipped):
        """Records ``ids`` (increasing) as Caffe's data layer fetches them: an iterator per
        shard walks the keys in order and steps over (``next``) the records in between,
        which are other ranks' in a data-parallel job; ``skipped[0]`` counts them."""
        if self._its is None:
            self._its = [[p.db.iterator(include_key=False), None, None] for p in self.dbs]
        for i in ids:
            s = self._shard(i)
            cur = self._its[s]
            it, at, v = cur
            try:
                if at is None or at > i:  # a new pass over this shard: from its first key
                    it.seek_to_start()
                    at = int(self.starts[s]) - 1
                    skipped[0] += i - at - 1
                else:  # the record under the iterator was taken: the ones after it are not
                    skipped[0] += max(0, i - at - 1)
                while at < i:
                    v = next(it)
                    at += 1
            except StopIteration:
                raise HpcioError(f"record {i}: the iterator ran past the last key of "
                                 f"{self.dbs[s].path}")
            except plyvel.Error as e:
                raise HpcioError(f"{self.dbs[s].path}: record {i}: LevelDB failed "
                                 f"({self.dbs[s].say(e)})")
            cur[1], cur[2] = at, v
            yield self._record(v)

    def close(self):
        for it in self._its or []:
            it[0].close()
        self._its = None
        for p in self.dbs:
            p.close()
        self.dbs = []


def open_native(ds):
    return Native(ds)


def index(path, out, **_):
    """Manifest and record index of a LevelDB made elsewhere (:func:`scan`); keys other
    than Caffe's ``%08d`` go to a ``keys.npy`` side file in ``out``."""
    s = scan(path)
    n = len(s.keys)
    if not n:
        raise HpcioError(f"{path}: the LevelDB database holds no records")
    extra = {"leveldb": {"key": None, "value": s.kind,
                         "compression": "snappy" if s.snappy else "none"}}
    extra["side_files"] = save_keys(path, out, s.keys, extra["leveldb"])
    enc, shape, dtype, more = describe(s.first, s.kind, s.length)
    extra.update(more)
    paths = [os.path.join(path, t) for t in s.tables]
    shard = {"path": os.path.relpath(path, out), "records": [0, n],
             "bytes": int(sum(s.table_bytes)),
             "sha256": ranges_sha256(paths, s.file, s.offset, s.length)}
    if s.compressed:
        shard["compressed_records"] = s.compressed
    idx = RecordIndex(s.file, s.offset, s.length, s.label,
                      [os.path.relpath(p, out) for p in paths], s.table_bytes)
    return index_manifest(NAME, enc, shape, dtype, classes_of(s.label), n, shard, extra), idx
