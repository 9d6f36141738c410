"""What a format is (:class:`Format`, built from a format module; :class:`FormatInfo`,
:class:`ShardWriter`, :class:`NativeReader`) and what every format module shares: a block
of encoded records, a shard's result, and the one-line translation of write failures (disk
full above all)."""

import ctypes
import errno
import os
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

import numpy as np

from .. import __version__
from ..data.dataset import INDEX, KIND
from ..errors import HpcioError
from ..fsutil import free_bytes

__all__ = ["Format", "FormatInfo", "ShardWriter", "NativeReader", "Block", "ShardResult",
           "take_records", "files_under",
           "Spec", "MAYBE", "SURE", "shard_stem", "write_error", "sync_tree", "fsync_path",
           "record_ranges", "index_manifest", "classes_of", "save_keys", "CAFFE_KEY"]


class ShardWriter(Protocol):
    """Writes one shard: blocks in record order, then ``close`` describes it."""

    def write(self, block: "Block") -> None: ...
    def close(self) -> "ShardResult": ...
    def abort(self) -> None: ...


class NativeReader(Protocol):
    """The format's own library, as a framework uses it (the naive reader). A key-value
    store's also has ``walk(ids, skipped)``: the records ``ids`` (ascending) through a
    cursor in key order, counting the records stepped over in ``skipped[0]``, as Caffe's
    data reader reads (``access=cursor``); :attr:`FormatInfo.cursor` says it has one."""

    opens: int  # files the library opened

    def get(self, i: int) -> bytes: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class FormatInfo:
    """What code elsewhere needs to know of a format, declared by its module as ``INFO``
    (a module without one: these defaults), so that no caller asks a module which
    attributes it has."""

    #: its native reader maps the files: a page past the end of a truncated file is a
    #: SIGBUS, not an error, so the naive reader checks every file before reading any
    mapped: bool = False
    #: every record is a file of its own (image folders): readers check the file they
    #: open instead of listing or stat-ing all of them up front
    file_per_record: bool = False
    #: its native reader walks a cursor in key order (:class:`NativeReader`'s ``walk``)
    cursor: bool = False
    #: element types raw records may be stored as (``--dtype``; blocks come as uint8)
    dtypes: tuple = ("uint8",)
    #: the ``--format-option`` names and their choices, the first of each the default
    options: dict = field(default_factory=dict)
    #: its files name the samples and labels inside them (HDF5 datasets, npz members,
    #: TFRecord feature keys): ``datagen index --images/--labels`` choose them; elsewhere
    #: those options are refused
    named: bool = False


#: what :attr:`Format.detect` answers: the data may be this format's (nothing more specific
#: claims it: any folder may be an image folder), or surely is (the format's own files or
#: signature); 0: it is not
MAYBE, SURE = 1, 2


def _never(path):
    return 0


def _nothing(path):
    return []


def _unused(path):
    return None


@dataclass(frozen=True)
class Format:
    """A storage format as the rest of hpcio uses it (the values of
    :data:`hpcio.formats.FORMATS`), made by :meth:`of` from the format's module.

    A format module provides ``NAME``, ``Writer``, ``targets``, ``manifest_keys`` and
    ``open_native``; it may provide ``INFO`` (a :class:`FormatInfo`) and the hooks
    ``index``, ``detect``, ``owned`` and ``in_use``. A hook it leaves out is the default
    below, given here once: callers call every hook of every format and never ask a
    module what it has, and a new format is a module in ``formats/`` and nothing else.
    """

    name: str
    #: ``Writer(root, k, lo, hi, spec)``: the writer of shard ``k`` (records lo..hi-1)
    Writer: Callable[..., ShardWriter]
    #: ``targets(k, spec)``: the paths (relative) shard ``k`` creates, claimed before
    #: writing so that an unfinished run's leftovers are known to be hpcio's
    targets: Callable[..., list]
    #: ``manifest_keys(spec)``: the format's part of the manifest; refuses bad options
    manifest_keys: Callable[..., dict]
    #: ``open_native(ds)``: the dataset's records through the format's own library
    open_native: Callable[..., NativeReader]
    info: FormatInfo = FormatInfo()
    #: ``index(path, out, **options) -> (manifest, RecordIndex)``: index data made
    #: elsewhere where it lies (``datagen index``); None: the format indexes nothing
    index: Optional[Callable] = None
    #: ``detect(path)``: 0, :data:`MAYBE` or :data:`SURE` that ``path`` (made elsewhere)
    #: is this format's data, for ``index``; by default never
    detect: Callable[[str], int] = _never
    #: ``owned(path)``: the files the format's library keeps in shard folder ``path`` of
    #: an hpcio dataset besides those indexed (``--force`` replaces them); by default none
    owned: Callable[[str], list] = _nothing
    #: ``in_use(path)``: a line saying another process holds shard ``path`` open (a
    #: dataset is not replaced under it), else None; by default never in use
    in_use: Callable[[str], Optional[str]] = _unused

    #: the optional hooks a module may define (a class attribute, not a field)
    HOOKS = ("index", "detect", "owned", "in_use")

    @classmethod
    def of(cls, module):
        """The format a module describes, its missing hooks the defaults."""
        have = vars(module)
        return cls(module.NAME, module.Writer, module.targets, module.manifest_keys,
                   module.open_native, have.get("INFO", FormatInfo()),
                   **{h: have[h] for h in cls.HOOKS if h in have})


@dataclass
class Block:
    """Records ``lo`` .. ``hi``-1 as one uint8 buffer; record ``k`` is
    ``data[offsets[k]:offsets[k+1]]`` (no per-record Python objects)."""

    lo: int
    hi: int
    labels: np.ndarray
    data: np.ndarray
    lengths: np.ndarray

    def __post_init__(self):
        self.offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])

    def record(self, k):
        return self.data[self.offsets[k]:self.offsets[k + 1]]


def take_records(pending, n):
    """The first ``n`` records of the blocks ``pending`` (a list, consumed in place: a
    block taken in part stays with its rest) as (bytes, lengths, labels): what a writer
    that cuts records into files or row groups of ``n`` needs."""
    datas, lens, labs, got = [], [], [], 0
    while got < n:
        b = pending[0]
        take = min(n - got, b.hi - b.lo)
        datas.append(b.data[b.offsets[0]:b.offsets[take]])
        lens.append(b.lengths[:take])
        labs.append(b.labels[:take])
        got += take
        if take == b.hi - b.lo:
            pending.pop(0)
        else:
            pending[0] = Block(b.lo + take, b.hi, b.labels[take:],
                               b.data[b.offsets[take]:b.offsets[-1]], b.lengths[take:])
    return np.concatenate(datas), np.concatenate(lens), np.concatenate(labs)


def files_under(path, suffixes, skip=()):
    """``path`` itself if a file, else the files under it whose names end with one of
    ``suffixes`` (hidden folders left out, sorted), less the paths in ``skip``."""
    if os.path.isfile(path):
        return [path]
    found = []
    for d, dirs, names in os.walk(path):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        found += [os.path.join(d, n) for n in sorted(names)
                  if n.endswith(suffixes) and os.path.join(d, n) not in skip]
    return found


@dataclass
class Spec:
    """What is being written: dataset-wide facts and the format's options. ``dtype`` is
    the element type of raw records on disk (a format lists the ones it stores in
    ``FormatInfo.dtypes``); blocks always come as uint8 pixels."""

    format: str
    encoding: str
    shape: tuple
    classes: int
    records: int
    shards: int
    options: dict = field(default_factory=dict)
    dtype: str = "uint8"


@dataclass
class ShardResult:
    """A written shard, described for the manifest and the record index: ``file[k]`` is an
    index into ``files`` (paths relative to the dataset directory) for the shard's record
    ``k``; offsets and lengths are bytes in that file."""

    path: str
    records: tuple
    files: list
    file_bytes: list
    file: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    label: np.ndarray
    sha256: str
    extra: dict = field(default_factory=dict)
    crc: np.ndarray = None  # CRC32C of each record (None: computed from the whole dataset)

    @property
    def bytes(self):
        return int(sum(self.file_bytes))

    def entry(self):
        """The manifest's entry for this shard."""
        e = {"path": self.path, "records": [int(self.records[0]), int(self.records[1])],
             "bytes": self.bytes, "sha256": self.sha256}
        e.update(self.extra)
        return e


def shard_stem(k):
    return f"shard-{k:05d}"


def record_ranges(records, shards):
    """Shard ``k`` holds records ``[k*N//K, (k+1)*N//K)``: contiguous, sizes within one."""
    edges = (np.arange(shards + 1, dtype=np.int64) * records) // shards
    return [(int(edges[k]), int(edges[k + 1])) for k in range(shards)]


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def write_error(path, exc):
    """An :class:`HpcioError` naming ``path`` and what went wrong while writing it (one
    line; 'no space left on device' whichever library reported it)."""
    if isinstance(exc, HpcioError):
        return exc
    code = getattr(exc, "errno", None)
    text = str(exc)
    if code in _FULL or "No space left" in text or "ENOSPC" in text or "errno = 28" in text:
        return HpcioError(f"{path}: no space left on device (disk or quota full)")
    free = free_bytes(path)
    if free is not None and free < (1 << 20) and not isinstance(exc, PermissionError):
        # LMDB reports a failed write of a full disk as EIO from mdb_txn_commit
        line = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return HpcioError(f"{path}: no space left on device ({free} bytes free; the "
                          f"library said: {line})")
    if code == errno.EROFS or "Read-only file system" in text:
        return HpcioError(f"{path}: read-only file system")
    if code in (errno.EACCES, errno.EPERM) or "Permission denied" in text:
        return HpcioError(f"{path}: permission denied")
    if isinstance(exc, OSError) and exc.strerror:
        return HpcioError(f"{path}: {exc.strerror}")
    line = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return HpcioError(f"{path}: {line}")


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_libc = None


def sync_tree(path):
    """Flush everything written under ``path`` to disk: one ``syncfs`` of its file system
    (one call instead of an fsync per small file), ``sync`` where syncfs is missing."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            if _libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


# ---- indexes of data made elsewhere ------------------------------------------------

def index_manifest(fmt, encoding, shape, dtype, classes, n, shard, extra):
    """The manifest of data indexed where it lies (``source: index``)."""
    m = {"kind": KIND, "format": fmt, "encoding": encoding, "shape": list(shape),
         "dtype": dtype, "classes": classes, "records": n, "source": "index",
         "generator": f"hpcio {__version__}", "index": INDEX, "shards": [shard]}
    m.update(extra)
    return m


def classes_of(label):
    """Class count of labels 0..K-1 (-1 for unlabelled records)."""
    lab = label[label >= 0]
    return int(lab.max()) + 1 if len(lab) else 0


#: Caffe's key of record ``i`` (convert_mnist_data, convert_cifar_data, db writers)
CAFFE_KEY = "%08d"


def save_keys(path, out, keys, section):
    """Say in ``section`` (a format's part of the manifest) how records map to ``keys``
    (key order): ``key`` = Caffe's ``%08d`` where they are exactly that, else a
    ``keys.npy`` side file written into ``out``. Returns the side files written."""
    if keys == [b"%08d" % i for i in range(len(keys))]:
        section["key"] = CAFFE_KEY
        return []
    if any(k.endswith(b"\0") for k in keys):
        raise HpcioError(f"{path}: keys ending in a NUL byte cannot be stored")
    kp = os.path.join(out, "keys.npy")
    if os.path.lexists(kp):
        raise HpcioError(f"{kp}: exists and was not written by hpcio")
    np.save(kp, np.array(keys, dtype=bytes))
    section["key"], section["keys"] = None, "keys.npy"
    return ["keys.npy"]
