"""LMDB: one environment per shard, Caffe-style keys, value = the encoded record.

Layout: ``shard-00000.lmdb/data.mdb`` (plus LMDB's ``lock.mdb``); record ``i`` is stored
under the key ``b"%08d" % i`` (``lmdb.key`` in the manifest), written in key order with
``append=True`` so pages fill densely. Values are contiguous in ``data.mdb`` (inline in
leaf pages when small, in overflow pages when large); :func:`value_offsets` finds where.

Data made elsewhere (:func:`index_env`): keys of any form are kept in ``keys.npy`` beside
the index, in key order; values that are Caffe ``Datum`` protobufs are indexed at their
``data`` field (``lmdb.value = "datum"``), anything else as the whole value.

Native access: each rank opens every shard env itself (read-only, ``lock=False``,
``readahead`` left at the library default) and fetches records with ``txn.get``.
"""

import hashlib
import mmap
import os

import lmdb
import numpy as np

from ..data.dataset import RecordIndex, sha256_file
from ..errors import HpcioError
from .base import CAFFE_KEY, SURE, FormatInfo, ShardResult, classes_of, index_manifest, \
    save_keys, shard_stem
from .datum import describe, parse_datum

__all__ = ["NAME", "INFO", "KEY", "Writer", "Native", "open_native", "targets",
           "manifest_keys", "value_offsets", "mapping_start", "parse_datum", "open_env",
           "index_env", "index", "detect", "owned"]

NAME = "lmdb"
#: the native reader maps data.mdb (readers check a file before touching it) and walks a
#: cursor in key order
INFO = FormatInfo(mapped=True, cursor=True)
KEY = CAFFE_KEY
_GROW = 1 << 30


def targets(k, spec):
    return [shard_stem(k) + ".lmdb"]


def manifest_keys(spec):
    return {"lmdb": {"key": KEY, "value": "record", "subdir": True}}


def owned(path):
    """LMDB's lock file, which every open of a shard environment may create."""
    return ["lock.mdb"]


def detect(path):
    """An environment directory (its ``data.mdb``) or an ``.mdb`` file."""
    if os.path.isdir(path):
        return SURE if os.path.exists(os.path.join(path, "data.mdb")) else 0
    return SURE if path.endswith(".mdb") else 0


def mapping_start(path):
    """Start address of this process's mapping of ``path`` (its offset-0 mapping), from
    ``/proc/self/maps``; py-lmdb's ``env.info()['map_addr']`` is 0 unless the map is fixed."""
    real = os.path.realpath(path)
    st = os.stat(real)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[5].rstrip("\n") != real:
                continue
            dev_ino_ok = int(parts[4]) == st.st_ino
            if dev_ino_ok and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16)
    raise HpcioError(f"{path}: no memory mapping of it found in /proc/self/maps")


def _address(buf):
    return np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0] if len(buf) \
        else None


def open_env(path, readonly=True):
    """Open an env read-only without a lock file, checking that the file holds every page
    the env says it has: touching a page past the end of a truncated ``data.mdb`` through
    the map would kill the process with SIGBUS instead of giving an error."""
    subdir = os.path.isdir(path)
    data = os.path.join(path, "data.mdb") if subdir else path
    if not os.path.exists(data):
        raise HpcioError(f"{path}: not an LMDB environment (no data.mdb)")
    try:
        env = lmdb.open(path, subdir=subdir, readonly=True, lock=False, create=False)
    except lmdb.Error as e:
        raise HpcioError(f"{path}: not a readable LMDB environment ({e})")
    need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    size = os.path.getsize(data)
    if size < need:
        env.close()
        raise HpcioError(f"{data}: truncated ({size} bytes, the environment needs {need})")
    return env, data


def value_offsets(path, parse=None):
    """Walk an env in key order: keys (list of bytes), and per value its file offset,
    length and label (-1). ``parse(buf) -> (offset, length, label)`` narrows a value to
    the record inside it (a Datum's ``data`` field)."""
    env, data = open_env(path)
    try:
        base = mapping_start(data)
        size = os.path.getsize(data)
        keys, off, length, label = [], [], [], []
        with env.begin(buffers=True) as txn:
            for k, v in txn.cursor():
                addr = _address(v)
                o, n, lab = (0, len(v), -1) if parse is None else parse(v)
                keys.append(bytes(k))
                off.append((addr - base + o) if addr is not None else 0)
                length.append(n)
                label.append(lab)
    except lmdb.Error as e:
        raise HpcioError(f"{path}: corrupt LMDB environment ({e})")
    finally:
        env.close()
    off = np.asarray(off, np.int64)
    length = np.asarray(length, np.int64)
    if len(off) and (off.min() < 0 or (off + length).max() > size):
        raise HpcioError(f"{data}: a value lies outside the file (corrupt environment)")
    return keys, off, length, np.asarray(label, np.int64), data


def records_sha256(path, off, length):
    """sha256 of the records' bytes in record order: an env directory is not one file, so
    its checksum is the one :func:`hpcio.dataset.shard_sha256` computes for it."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return h.hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            for o, n in zip(off.tolist(), length.tolist()):
                h.update(view[o:o + n])
            view.release()
    return h.hexdigest()


class Writer:
    """Puts records in key order, one write transaction per block; the map grows when
    full. Offsets are found after the env is closed, from a read-only reopen."""

    def __init__(self, root, k, lo, hi, spec):
        self.rel = shard_stem(k) + ".lmdb"
        self.path = os.path.join(root, self.rel)
        self.lo, self.hi = lo, hi
        self.map_size = _GROW
        self.env = lmdb.open(self.path, map_size=self.map_size, subdir=True, sync=False,
                             metasync=False, meminit=False, max_dbs=0)
        self.labels = []

    def write(self, block):
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for k in range(block.hi - block.lo):
                        txn.put(b"%08d" % (block.lo + k), block.record(k), append=True)
                break
            except lmdb.MapFullError:
                self.map_size = self.map_size * 2 + int(block.data.nbytes) * 2
                self.env.set_mapsize(self.map_size)
        self.labels.append(block.labels)

    def close(self):
        self.env.sync(True)
        self.env.close()
        keys, off, length, _, data = value_offsets(self.path)
        want = [b"%08d" % i for i in (self.lo, self.hi - 1)] if self.hi > self.lo else []
        if len(keys) != self.hi - self.lo or (want and [keys[0], keys[-1]] != want):
            raise HpcioError(f"{self.path}: holds {len(keys)} keys, wrote "
                             f"{self.hi - self.lo}")
        label = np.concatenate(self.labels) if self.labels else np.zeros(0, np.int64)
        rel = self.rel + "/data.mdb"
        return ShardResult(self.rel, (self.lo, self.hi), [rel], [os.path.getsize(data)],
                           np.zeros(len(keys), np.int32), off, length, label,
                           records_sha256(data, off, length))

    def abort(self):
        try:
            self.env.close()
        except Exception:
            pass


def index_env(path):
    """Index an LMDB made elsewhere: (keys, offset, length, label, data.mdb path, value
    kind). Values that all parse as Datums are indexed at their ``data`` field with their
    label; otherwise every record is the whole value with label -1."""
    keys, off, length, label, data = value_offsets(path)
    if not keys:
        raise HpcioError(f"{path}: the LMDB environment holds no records")
    env, _ = open_env(path)
    try:
        with env.begin(buffers=True) as txn:
            first = bytes(txn.get(keys[0]))
    finally:
        env.close()
    try:
        parse_datum(first)
        is_datum = True
    except (ValueError, IndexError):
        is_datum = False
    if is_datum:
        try:
            keys, off, length, label, data = value_offsets(path, parse=parse_datum)
        except (ValueError, IndexError):
            is_datum = False  # mixed values: fall back to whole values
    return keys, off, length, label, data, ("datum" if is_datum else "record"), first


class Native:
    """Every shard env opened by this rank (read-only, no lock, default readahead), one
    long-lived read transaction each; ``get(i)`` is one ``txn.get``."""

    def __init__(self, ds):
        keys = ds.manifest.get("lmdb", {})
        self.template = keys.get("key", KEY)
        self.datum = keys.get("value") == "datum"
        self.keys = None
        if keys.get("keys"):
            self.keys = np.load(os.path.join(ds.root, keys["keys"]), allow_pickle=False)
        self.starts = np.array([s["records"][0] for s in ds.manifest["shards"]], np.int64)
        self.envs, self.txns = [], []
        for shard in ds.manifest["shards"]:
            p = os.path.join(ds.root, shard["path"])
            env = lmdb.open(p, subdir=os.path.isdir(p), readonly=True, lock=False)
            self.envs.append(env)
            self.txns.append(env.begin())
        self.opens = len(self.envs)  # data.mdb files opened (ReaderStats.opens)

    def walk(self, ids, skipped):
        """Records ``ids`` (increasing) as Caffe's data reader fetches them: a cursor per
        shard walks the keys in order and steps over (``cursor.next``) the records in
        between, which are other ranks' in a data-parallel job; ``skipped[0]`` counts
        them. Yields each record's bytes."""
        if getattr(self, "_cursors", None) is None:
            self._cursors = [[t.cursor(), None] for t in self.txns]  # cursor, id under it
        for i in ids:
            s = int(np.searchsorted(self.starts, i, side="right")) - 1
            cur = self._cursors[s]
            c, at = cur
            if at is None or at > i:  # a new pass over this shard: from its first key
                if not c.first():
                    raise HpcioError(f"record {i}: shard {s}'s LMDB environment is empty")
                at = int(self.starts[s])
                skipped[0] += i - at
            elif at < i:  # the record under the cursor was taken: the ones after it are not
                skipped[0] += i - at - 1
            while at < i:
                if not c.next():
                    raise HpcioError(f"record {i}: the cursor ran past shard {s}'s last key")
                at += 1
            cur[1] = at
            v = c.value()
            if self.datum:
                o, n, _ = parse_datum(v)
                yield memoryview(v)[o:o + n]
            else:
                yield v

    def get(self, i):
        s = int(np.searchsorted(self.starts, i, side="right")) - 1 if len(self.txns) > 1 else 0
        key = bytes(self.keys[i]) if self.keys is not None else \
            (self.template % i).encode()
        v = self.txns[s].get(key)
        if v is None:
            raise HpcioError(f"record {i}: key {key!r} not in the LMDB environment")
        if self.datum:
            o, n, _ = parse_datum(v)
            return memoryview(v)[o:o + n]
        return v

    def close(self):
        for t in self.txns:
            t.abort()
        for e in self.envs:
            e.close()
        self.envs, self.txns = [], []


def open_native(ds):
    return Native(ds)


def index(path, out, **_):
    """Manifest and record index of an LMDB made elsewhere (:func:`index_env`); side
    files (``keys.npy``) are written into ``out``."""
    keys, off, length, label, data, kind, first = index_env(path)
    n = len(keys)
    env_path = os.path.dirname(data) if os.path.isdir(path) else data
    extra = {"lmdb": {"key": None, "value": kind, "subdir": os.path.isdir(path)}}
    extra["side_files"] = save_keys(path, out, keys, extra["lmdb"])
    enc, shape, dtype, more = describe(first, kind, length, f"{path}: its first value")
    extra.update(more)
    rel = os.path.relpath(data, out)
    shard_rel = os.path.relpath(env_path, out)
    sha = sha256_file(data) if os.path.isfile(os.path.join(out, shard_rel)) else \
        records_sha256(data, off, length)
    size = os.path.getsize(data)
    shard = {"path": shard_rel, "records": [0, n], "bytes": size, "sha256": sha}
    index = RecordIndex(np.zeros(n, np.int32), off, length, label, [rel], [size])
    return index_manifest("lmdb", enc, shape, dtype, classes_of(label), n, shard, extra), index
