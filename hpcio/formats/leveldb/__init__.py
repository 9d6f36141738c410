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

The package: this module is the format's face (the names of
:class:`hpcio.formats.base.Format`); :mod:`.writer` writes a shard's database,
:mod:`.table` parses table files, :mod:`.scanner` indexes a database (its tables checked
against LevelDB), :mod:`.native` opens databases privately and reads them natively.
"""

import os

from ...data.dataset import RecordIndex
from ...errors import HpcioError
from ..base import CAFFE_KEY, SURE, FormatInfo, classes_of, index_manifest, save_keys, \
    shard_stem
from ..datum import describe
from .native import CAFFE_OPTIONS, Native, Private, compact, in_use, owned
from .native import compaction_due  # noqa: F401  (the package's details, reached as leveldb.<name>)
from .scanner import Scan, ranges_sha256, scan  # noqa: F401
from .table import handle  # noqa: F401
from .writer import OPTIONS, Writer, writer_options

__all__ = ["NAME", "INFO", "KEY", "OPTIONS", "CAFFE_OPTIONS", "Writer", "Native",
           "open_native", "targets", "manifest_keys", "index", "detect", "scan", "in_use",
           "owned", "compact", "Private"]

NAME = "leveldb"
KEY = CAFFE_KEY
#: LevelDB maps its table files (readers check a file before touching it); the native
#: reader walks an iterator in key order
INFO = FormatInfo(mapped=True, cursor=True, options=OPTIONS)


def targets(k, spec):
    return [shard_stem(k) + ".leveldb"]


def manifest_keys(spec):
    o = writer_options(spec)
    keys = {"leveldb": {"key": KEY, "value": o["value"], "compression": o["compression"]}}
    if o["value"] == "datum" and spec.encoding == "raw":
        keys["layout"] = "chw"  # a raw Datum's data is plane after plane
    return keys


def detect(path):
    """A database directory: LevelDB's ``CURRENT``, a ``MANIFEST-*`` or a table."""
    if not os.path.isdir(path):
        return 0
    return SURE if any(n == "CURRENT" or n.startswith("MANIFEST-") or n.endswith(".ldb")
                       for n in os.listdir(path)) else 0


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
    enc, shape, dtype, more = describe(s.first, s.kind, s.length,
                                       f"{path}: its first value")
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
