"""LevelDB as hpcio opens it: the database's files (:func:`owned`, :func:`in_use`), its
compaction state, the private directory through which a process opens a database without
writing into it (:class:`Private`, see :mod:`hpcio.formats.leveldb`), and the native
reader over those (:class:`Native`)."""

import fcntl
import os
import re
import shutil
import socket
import tempfile
import time

import numpy as np
import plyvel

from ...errors import HpcioError
from ..base import CAFFE_KEY
from ..datum import parse_datum

#: what Caffe's db_leveldb.cpp sets; the rest is LevelDB's default
CAFFE_OPTIONS = {"block_size": 64 << 10, "write_buffer_size": 256 << 20,
                 "max_open_files": 100}
_TABLE = re.compile(r"\d+\.(ldb|sst)")
_LOG = re.compile(r"\d+\.log")
_L0_TRIGGER = 4  # LevelDB's kL0_CompactionTrigger
_LEVELS = 7


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


def compaction_due(tables):
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


def settle(db, path, patience=60.0):
    """Wait until LevelDB's background compaction has nothing left to do."""
    last, since = None, time.monotonic()
    while True:
        tables = _tables(db)
        why = compaction_due(tables)
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
        settle(db, path)
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
        why = compaction_due(self.tables) or (f"it wrote table {written[0]}" if written else None)
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


# ---- reading -----------------------------------------------------------------------------

class Native:
    """Every shard's database opened by this rank through its own private directory
    (:class:`Private`); ``get(i)`` is one ``db.get``, ``walk`` steps an iterator
    over the other ranks' records, as Caffe's data layer reads a LevelDB."""

    def __init__(self, ds):
        m = ds.manifest.get("leveldb", {})
        self.template = m.get("key") or CAFFE_KEY
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
