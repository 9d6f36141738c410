"""The dataset contract: a manifest and a record index, saved beside the data.

Every format writes, into its dataset directory,

* ``hpcio.json`` — the manifest: format, encoding, sample shape, classes, record count,
  shards (record range, bytes, sha256), generator version and seed;
* ``index.npz`` — the record index: for record ``i``, the file ``files[file[i]]`` (a path
  relative to the dataset directory), the byte ``offset[i]`` and ``length[i]`` of its bytes
  in that file, its ``label[i]`` and the CRC32C ``crc[i]`` of its bytes (absent in
  indexes made before hpcio recorded them); ``file_bytes[j]`` is the size of file ``j``.

The manifest holds the index's own sha256 (``index_sha256``): an index edited after it was
written (offsets swapped, shifted, shortened) is refused on open, before any read; the
CRCs catch data that changed under an intact index, record by record, on delivery.
The manifest's ``contract`` says which of these it promises (:data:`CONTRACT`): a
dataset made before CRCs has none (version 1); one that says 2 and lacks either is
refused, so stripping them never turns a dataset into an "old" one.

The index is what the coordinated reader reads instead of the format's library: a record is
the ``length`` bytes at ``offset`` of its file, whatever the format. Except where a shard's
manifest entry counts ``compressed_records`` (a LevelDB's snappy blocks): those records lie
compressed in their file, indexed at the block that holds them, and only the format's
library reads them.
"""

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass

import numpy as np

from ..errors import HpcioError
from ..fsutil import atomic_json, atomic_write
from ..mpiutil import bcast_array, raise_everywhere, rank_size
from .checksum import crc32c, range_crcs

__all__ = ["MANIFEST", "INDEX", "KIND", "RecordIndex", "Dataset", "open_dataset",
           "sha256_file", "shard_sha256", "is_dataset", "compressed_records", "record_crcs_of",
           "NO_CRC", "CONTRACT"]

MANIFEST = "hpcio.json"
INDEX = "index.npz"
KIND = "hpcio-dataset"
ARRAYS = ("file", "offset", "length", "label", "files", "file_bytes")
#: the dataset contract's version: 2 = record CRC32Cs in the index and the index's sha256
#: in the manifest (a manifest without ``contract`` is 1: made before hpcio recorded them)
CONTRACT = 2
#: the note for an index without record CRCs (``{root}``: the dataset directory)
NO_CRC = ("note: {root}: its index has no record checksums (made before hpcio recorded "
          "them): records are checked by size only; add them with 'python -m "
          "hpcio.datagen index --update {root}'")


@dataclass
class RecordIndex:
    """Where every record lives. Arrays have one entry per record (``files`` and
    ``file_bytes`` one per file)."""

    file: np.ndarray  # int32
    offset: np.ndarray  # int64
    length: np.ndarray  # int64
    label: np.ndarray  # int64
    files: np.ndarray  # str, relative to the dataset directory
    file_bytes: np.ndarray  # int64
    crc: np.ndarray = None  # uint32 CRC32C of each record's bytes, None if not recorded

    def __post_init__(self):
        self.file = np.ascontiguousarray(self.file, dtype=np.int32)
        self.offset = np.ascontiguousarray(self.offset, dtype=np.int64)
        self.length = np.ascontiguousarray(self.length, dtype=np.int64)
        self.label = np.ascontiguousarray(self.label, dtype=np.int64)
        self.files = np.asarray(self.files, dtype=str)
        self.file_bytes = np.ascontiguousarray(self.file_bytes, dtype=np.int64)
        if self.crc is not None:
            self.crc = np.ascontiguousarray(self.crc, dtype=np.uint32)
        n = len(self.file)
        if not (len(self.offset) == len(self.length) == len(self.label) == n) or \
                (self.crc is not None and len(self.crc) != n):
            raise HpcioError("record index arrays differ in length")

    def __len__(self):
        return len(self.file)

    @property
    def arrays(self):
        """The names of the arrays it holds (``crc`` where recorded)."""
        return ARRAYS + (("crc",) if self.crc is not None else ())

    def save(self, path):
        """Write it to ``path``; returns the sha256 of the bytes written."""
        # what np.savez does, written out: its first parameter is called ``file``, so
        # ``np.savez(buf, file=...)`` cannot store an array named "file"
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for k in self.arrays:
                with z.open(k + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(getattr(self, k)),
                                              allow_pickle=False)
        atomic_write(path, lambda f: f.write(buf.getbuffer()))
        return hashlib.sha256(buf.getbuffer()).hexdigest()

    @classmethod
    def load(cls, path, sha256=None):
        """The index in ``path``; with ``sha256``, refused unless its bytes have it."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise HpcioError(f"{path}: record index missing")
        except OSError as e:
            raise HpcioError(f"{path}: {e.strerror}")
        if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
            raise HpcioError(f"{path}: its sha256 is not the one in the manifest (the index "
                             f"was edited or replaced since it was written)")
        try:
            with np.load(io.BytesIO(raw), allow_pickle=False) as z:
                return cls(**{k: z[k] for k in ARRAYS}, crc=z["crc"] if "crc" in z else None)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            # EOFError: a truncated array inside the archive
            raise HpcioError(f"{path}: not a readable record index ({e or type(e).__name__})")

    def check(self, root, ends=True):
        """Raise :class:`HpcioError` if any record lies outside its file (``ends=False``:
        if any starts outside it), or a file is missing or has another size than the index
        says (cheap: one stat per file)."""
        nfiles = len(self.files)
        if len(self) and (self.file.min() < 0 or self.file.max() >= nfiles):
            raise HpcioError("record index names a file it does not list")
        if len(self) and (self.offset.min() < 0 or self.length.min() < 0):
            raise HpcioError("record index has a negative offset or length")
        end = self.offset + (self.length if ends else 1)
        for j, rel in enumerate(self.files):
            p = os.path.join(root, rel)
            try:
                size = os.stat(p).st_size
            except FileNotFoundError:
                raise HpcioError(f"{p}: shard file missing")
            except OSError as e:
                raise HpcioError(f"{p}: {e.strerror}")
            if size != self.file_bytes[j]:
                raise HpcioError(f"{p}: {size} bytes on disk, the index says "
                                 f"{self.file_bytes[j]} (data changed since it was indexed)")
        if len(self):
            limit = self.file_bytes[self.file]
            bad = np.flatnonzero(end > limit)
            if len(bad):
                i = int(bad[0])
                raise HpcioError(f"record {i} ends at byte {int(end[i])}, beyond the "
                                 f"{int(limit[i])}-byte file {self.files[self.file[i]]}")


def compressed_records(manifest):
    """How many records lie compressed in their files (see the module docstring)."""
    return sum(int(s.get("compressed_records", 0)) for s in manifest.get("shards", []))


def sha256_file(path, bufsize=8 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def is_dataset(root):
    return os.path.isfile(os.path.join(root, MANIFEST))


@dataclass
class Dataset:
    """A dataset directory: its manifest (a dict) and record index."""

    root: str
    manifest: dict
    index: RecordIndex

    @property
    def format(self):
        return self.manifest["format"]

    @property
    def encoding(self):
        return self.manifest["encoding"]

    @property
    def shape(self):
        return tuple(self.manifest["shape"])

    @property
    def records(self):
        return len(self.index)

    @property
    def classes(self):
        return self.manifest.get("classes")

    def path(self, j):
        """Absolute path of index file ``j``."""
        return os.path.join(self.root, self.index.files[j])

    @property
    def paths(self):
        return [self.path(j) for j in range(len(self.index.files))]

    def nbytes(self):
        return int(self.index.length.sum())

    def verify_checksums(self):
        """Compare every shard's sha256 with the manifest (reads all data)."""
        for shard in self.manifest.get("shards", []):
            want = shard.get("sha256")
            if not want:
                continue
            got = shard_sha256(self, shard)
            if got != want:
                raise HpcioError(f"{shard['path']}: checksum mismatch (data changed since "
                                 f"it was written)")

    def verify_records(self, open_native=None):
        """Compare every record's CRC32C with the index (reads all records once;
        ``open_native``: as for :func:`record_crcs_of`)."""
        want = self.index.crc
        if want is None:
            raise HpcioError(NO_CRC.format(root=self.root)[6:])
        got = record_crcs_of(self, open_native)
        bad = np.flatnonzero(got != want)
        if len(bad):
            i, idx = int(bad[0]), self.index
            raise HpcioError(f"{self.path(idx.file[i])}: record {i} at byte "
                             f"{int(idx.offset[i])} ({int(idx.length[i])} bytes) is not the "
                             f"record indexed (CRC32C {int(got[i]):08x}, the index says "
                             f"{int(want[i]):08x}; {len(bad)} records differ)")

    def save(self):
        if self.index.crc is None:
            raise HpcioError(f"{self.root}: an index is saved with its record CRCs")
        self.manifest["records"] = len(self.index)
        self.manifest["contract"] = CONTRACT
        self.manifest["index_sha256"] = self.index.save(os.path.join(self.root, INDEX))
        atomic_json(os.path.join(self.root, MANIFEST), self.manifest)


def shard_sha256(ds, shard):
    """sha256 of a shard: of its file when it has one file, else of its records' bytes
    in record order (a folder of image files)."""
    full = os.path.join(ds.root, shard["path"])
    if os.path.isfile(full):
        return sha256_file(full)
    h = hashlib.sha256()
    lo, hi = shard["records"]
    idx = ds.index
    for i in range(lo, hi):
        with open(ds.path(idx.file[i]), "rb") as f:
            f.seek(int(idx.offset[i]))
            h.update(f.read(int(idx.length[i])))
    return h.hexdigest()


def record_crcs_of(ds, open_native=None):
    """CRC32C of every record of ``ds`` as its readers deliver it: its bytes at the
    index's offsets, or from the format's library where records lie compressed: there
    ``open_native(ds)`` opens them (:func:`hpcio.formats.open_native`; passed in, since
    the dataset contract knows no format)."""
    idx = ds.index
    if not compressed_records(ds.manifest):
        return range_crcs(ds.paths, idx.file, idx.offset, idx.length)
    if open_native is None:
        raise HpcioError(f"{ds.root}: its records lie compressed: only the {ds.format} "
                         f"format's library reads them (pass open_native)")
    native = open_native(ds)
    try:
        return np.fromiter((crc32c(native.get(i)) for i in range(ds.records)), np.uint32,
                           ds.records)
    finally:
        native.close()


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


#: manifest fields every reader relies on, with what each must be
FIELDS = {
    "format": (lambda v: isinstance(v, str), "a format name"),
    "encoding": (lambda v: isinstance(v, str), "an encoding name"),
    "records": (lambda v: _is_int(v) and v >= 0, "a record count"),
    "shape": (lambda v: isinstance(v, list) and all(_is_int(d) and d > 0 for d in v),
              "a list of positive dimensions"),
    "index": (lambda v: isinstance(v, str) and v and "/" not in v and v not in (".", ".."),
              "a file name in the dataset directory"),
    "shards": (lambda v: isinstance(v, list) and all(
        isinstance(s, dict) and isinstance(s.get("path"), str)
        and isinstance(s.get("records"), list) and len(s["records"]) == 2
        and all(_is_int(r) for r in s["records"]) and _is_int(s.get("bytes", 0))
        for s in v), "a list of {path, records: [first, end), bytes}"),
}


def check_manifest(mpath, manifest):
    """One line naming the first field of ``manifest`` (read from ``mpath``) that is
    missing or not what readers need (:data:`FIELDS`)."""
    for key, (ok, what) in FIELDS.items():
        if key == "index" and key not in manifest:
            continue  # the default name
        if key not in manifest:
            raise HpcioError(f"{mpath}: field {key!r} missing (it must be {what})")
        if not ok(manifest[key]):
            raise HpcioError(f"{mpath}: field {key!r} is {json.dumps(manifest[key])[:60]}, "
                             f"not {what}")


def check_contract(mpath, manifest, index):
    """Refuse a manifest whose ``contract`` promises record CRCs and the index's sha256
    where either is missing (stripped, not old), or a contract newer than this hpcio's."""
    v = manifest.get("contract", 1)
    if not _is_int(v) or not 1 <= v <= CONTRACT:
        raise HpcioError(f"{mpath}: field 'contract' is {json.dumps(v)[:40]}, not 1 or "
                         f"{CONTRACT}" + (" (made by a newer hpcio?)" if _is_int(v) and
                                          v > CONTRACT else ""))
    if v < 2:
        return
    if index.crc is None:
        raise HpcioError(f"{os.path.join(os.path.dirname(mpath), manifest.get('index', INDEX))}"
                         f": no record checksums, but the manifest's contract ({v}) says "
                         f"they were recorded (the index was replaced)")
    if not manifest.get("index_sha256"):
        raise HpcioError(f"{mpath}: field 'index_sha256' missing, but its contract ({v}) "
                         f"says the index's sha256 was recorded (the manifest was edited)")


def _load(root, check):
    mpath = os.path.join(root, MANIFEST)
    try:
        with open(mpath) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        if not os.path.isdir(root):
            raise HpcioError(f"{root}: no such dataset directory")
        raise HpcioError(f"{root}: not an hpcio dataset (no {MANIFEST}; make one with "
                         f"'python -m hpcio.datagen' or index it with "
                         f"'python -m hpcio.datagen index {root}')")
    except (OSError, ValueError) as e:
        raise HpcioError(f"{mpath}: unreadable manifest ({e})")
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        raise HpcioError(f"{mpath}: not an hpcio dataset manifest")
    check_manifest(mpath, manifest)
    index = RecordIndex.load(os.path.join(root, manifest.get("index", INDEX)),
                             manifest.get("index_sha256"))
    check_contract(mpath, manifest, index)
    if manifest.get("records") != len(index):
        raise HpcioError(f"{root}: manifest says {manifest.get('records')} records, the "
                         f"index has {len(index)}")
    if check:
        index.check(root, ends=not compressed_records(manifest))
    return manifest, index


def open_dataset(root, comm=None, check=True):
    """Open a dataset. With ``comm``, rank 0 alone reads the manifest and index and checks
    them against the files, and broadcasts them: metadata is read once, not by every rank.
    An error found on rank 0 is raised on every rank."""
    root = os.path.abspath(root)
    if rank_size(comm)[1] == 1:
        manifest, index = _load(root, check)
        return Dataset(root, manifest, index)
    err, manifest, index = None, None, None
    if comm.rank == 0:
        try:
            manifest, index = _load(root, check)
        except HpcioError as e:
            err = str(e)
    raise_everywhere(comm, err)
    manifest = comm.bcast(manifest, root=0)
    arrays = {}
    has_crc = comm.bcast(index.crc is not None if comm.rank == 0 else None, root=0)
    for k in ARRAYS + (("crc",) if has_crc else ()):
        arrays[k] = bcast_array(comm, getattr(index, k) if comm.rank == 0 else None)
    return Dataset(root, manifest, RecordIndex(**arrays))
