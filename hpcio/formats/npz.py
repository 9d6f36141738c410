"""NumPy ``.npz`` archives as DLIO (the MLPerf Storage generator) writes them: zip archives
of uncompressed (``ZIP_STORED``) ``.npy`` members, ``x`` the samples and ``y`` the labels,
one or more samples per file (``--format-option samples_per_file=N``, default 1 as for
3D U-Net).

Layout: ``shard-00000/<first record:08d>.npz``. Raw records: ``x`` is (n, H, W, C) uint8,
samples on the first axis, so each sample's bytes are contiguous in the file (DLIO puts
them on the last axis, which strides them when a file holds more than one). PNG/JPEG
records: ``x`` is the 1-D uint8 blob of the encoded samples back to back and ``offsets``
(n+1,) int64 gives sample ``j`` as ``x[offsets[j]:offsets[j+1]]``. A record is its bytes
inside member ``x``: offset = the member's zip local header + its ``.npy`` header, found
once when the file is written or indexed, so the coordinated reader reads those bytes only.

Native access: ``np.load(file)['x'][j]``, as DLIO's reader and a framework's loader do; the
array of the file last loaded is kept (DLIO keeps its open files), so samples of one file
read in a row load it once.
"""

import hashlib
import io
import os
import struct
import zipfile

import numpy as np

from ..data import pictures
from ..data.dataset import INDEX, RecordIndex, sha256_file
from ..errors import HpcioError
from .base import SURE, FormatInfo, ShardResult, classes_of, files_under, index_manifest, \
    shard_stem, sync_tree, take_records

__all__ = ["NAME", "INFO", "Writer", "Native", "open_native", "targets", "manifest_keys",
           "members", "array_at", "index", "detect"]

NAME = "npz"
#: samples_per_file: any positive integer (1 or N)
INFO = FormatInfo(options={"samples_per_file": ("1", "N")}, named=True)
_LOCAL = b"PK\x03\x04"
_METHODS = {zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
            zipfile.ZIP_LZMA: "lzma"}


def _per_file(spec):
    bad = sorted(set(spec.options) - set(INFO.options))
    if bad:
        raise HpcioError(f"the npz format has no option {', '.join(bad)} (it has "
                         f"samples_per_file)", everywhere=True)
    v = str(spec.options.get("samples_per_file", "1"))
    if not v.isdigit() or int(v) < 1:
        raise HpcioError(f"npz samples_per_file={v}: must be a positive integer",
                         everywhere=True)
    return int(v)


def targets(k, spec):
    return [shard_stem(k)]


def manifest_keys(spec):
    layout = "array" if spec.encoding == "raw" else "blob"
    keys = {"member": "x", "labels": "y", "layout": layout,
            "samples_per_file": _per_file(spec),
            "pattern": "shard-{shard:05d}/{first:08d}.npz"}
    if layout == "array":
        keys["axis"] = 0
    else:
        keys["offsets"] = "offsets"
    return {"npz": keys}


# ---- zip members -------------------------------------------------------------------------

def members(f, path):
    """The members of the zip archive open in ``f``, by name less ``.npy``."""
    try:
        infos = zipfile.ZipFile(f).infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise HpcioError(f"{path}: not an .npz (zip) archive ({e})")
    return {(i.filename[:-4] if i.filename.endswith(".npy") else i.filename): i
            for i in infos}


def array_at(f, info, path):
    """(data offset, shape, fortran order, dtype) of the ``.npy`` member ``info`` of the
    archive in ``f``, from its local header: its bytes must lie plain in the file."""
    name = info.filename
    if info.compress_type != zipfile.ZIP_STORED:
        how = _METHODS.get(info.compress_type, f"method {info.compress_type}")
        raise HpcioError(f"{path}: member {name} is compressed ({how}, as "
                         f"np.savez_compressed writes): records must lie uncompressed at "
                         f"file offsets (np.savez)")
    if info.flag_bits & 1:
        raise HpcioError(f"{path}: member {name} is encrypted")
    f.seek(info.header_offset)
    head = f.read(30)
    if len(head) < 30 or head[:4] != _LOCAL:
        raise HpcioError(f"{path}: member {name}: no zip local header at byte "
                         f"{info.header_offset}")
    nlen, xlen = struct.unpack("<HH", head[26:30])
    start = info.header_offset + 30 + nlen + xlen
    f.seek(start)
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
        if version not in read:
            raise ValueError(f".npy version {version[0]}.{version[1]}")
        shape, fortran, dtype = read[version](f)
    except (ValueError, EOFError, SyntaxError) as e:
        raise HpcioError(f"{path}: member {name} is not a .npy array ({e})")
    if dtype.hasobject:
        raise HpcioError(f"{path}: member {name} holds Python objects (pickled), not "
                         f"fixed-size elements")
    at = f.tell()
    need = int(np.prod(shape)) * dtype.itemsize
    if at + need > start + info.file_size:
        raise HpcioError(f"{path}: member {name} is truncated ({need} bytes of data "
                         f"declared, {start + info.file_size - at} stored)")
    return at, tuple(shape), bool(fortran), dtype


def _small(f, info, path):
    """A small member (labels, offsets) read whole."""
    at, shape, fortran, dtype = array_at(f, info, path)
    f.seek(at)
    a = np.frombuffer(f.read(int(np.prod(shape)) * dtype.itemsize), dtype)
    return a.reshape(shape, order="F" if fortran else "C")


# ---- writing -----------------------------------------------------------------------------

class Writer:
    """Collects blocks into files of ``samples_per_file`` records (a shard's last file may
    hold fewer), each written with ``np.savez`` into memory, its ``x`` located there, then
    written out in one call. The shard's sha256 is that of its records' bytes in record
    order (what :func:`hpcio.data.dataset.shard_sha256` computes for a folder)."""

    def __init__(self, root, k, lo, hi, spec):
        self.root, self.rel = root, shard_stem(k)
        self.lo, self.hi = lo, hi
        self.per = _per_file(spec)
        self.raw = spec.encoding == "raw"
        self.shape = tuple(spec.shape)
        self.h = hashlib.sha256()
        self.files, self.sizes, self.file, self.offset, self.length, self.label = \
            [], [], [], [], [], []
        self.pending = []  # blocks not yet in a file
        self.count = 0  # their records
        self.done = 0  # records in files
        self.at = {}  # x's shape -> the offset of its data in the file
        os.makedirs(os.path.join(root, self.rel), exist_ok=True)

    def write(self, block):
        self.pending.append(block)
        self.count += block.hi - block.lo
        while self.count >= self.per:
            self._flush(self.per)

    def _flush(self, n):
        """Write the first ``n`` pending records as one file."""
        data, length, label = take_records(self.pending, n)
        self.count -= n
        length, label = length.astype(np.int64), label.astype(np.int64)
        first = self.lo + self.done
        self.done += n
        rel = f"{self.rel}/{first:08d}.npz"
        arrays = {"x": data.reshape((n,) + self.shape) if self.raw else data, "y": label}
        if not self.raw:
            arrays["offsets"] = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        # x's bytes lie where they lay in the last file of its shape: checked, not parsed
        key = arrays["x"].shape
        at = self.at.get(key)
        whole = np.frombuffer(buf.getbuffer(), np.uint8)
        if at is None or not np.array_equal(whole[at:at + len(data)], data):
            at = self.at[key] = array_at(buf, members(buf, rel)["x"], rel)[0]
        del whole
        with open(os.path.join(self.root, rel), "wb") as f:
            f.write(buf.getbuffer())
        self.h.update(data)
        self.file.append(np.full(n, len(self.files), np.int32))
        self.files.append(rel)
        self.sizes.append(buf.getbuffer().nbytes)
        starts = np.zeros(n, np.int64)
        np.cumsum(length[:-1], out=starts[1:])
        self.offset.append(at + starts)
        self.length.append(length)
        self.label.append(label)

    def close(self):
        if self.count:
            self._flush(self.count)
        sync_tree(os.path.join(self.root, self.rel))
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
        return ShardResult(self.rel, (self.lo, self.hi), self.files, self.sizes,
                           cat(self.file, np.int32), cat(self.offset, np.int64),
                           cat(self.length, np.int64), cat(self.label, np.int64),
                           self.h.hexdigest())

    def abort(self):
        self.pending = []


# ---- native reads ------------------------------------------------------------------------

class Native:
    """``np.load(file)[x][j]`` per sample, the array of the last file loaded kept."""

    def __init__(self, ds):
        keys = ds.manifest.get("npz", {})
        self.ds = ds
        self.member = keys.get("member", "x")
        self.offsets = keys.get("offsets")  # blob layout
        self.last = keys.get("axis", 0) != 0  # samples on the last axis
        # records of a file are consecutive: a record's place in its file
        self.first = np.searchsorted(ds.index.file, np.arange(len(ds.index.files)))
        self.cur, self.x, self.off = -1, None, None
        self.opens = 0  # files opened so far (ReaderStats.opens)

    def _load(self, j):
        p = self.ds.path(j)
        try:
            with np.load(p) as z:
                self.x = z[self.member]
                self.off = z[self.offsets] if self.offsets else None
        except FileNotFoundError:
            raise HpcioError(f"{p}: file missing")
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            raise HpcioError(f"{p}: unreadable .npz ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
        self.cur = j
        self.opens += 1

    def get(self, i):
        j = int(self.ds.index.file[i])
        if j != self.cur:
            self._load(j)
        k = i - int(self.first[j])
        if self.off is not None:
            return self.x[int(self.off[k]):int(self.off[k + 1])]
        a = self.x[..., k] if self.last else self.x[k]
        return np.ravel(a, order="K").view(np.uint8)  # its bytes in file order

    def close(self):
        self.x = self.off = None


def open_native(ds):
    return Native(ds)


# ---- data made elsewhere -----------------------------------------------------------------

def _npz_files(path, out):
    return files_under(path, (".npz",), skip=(os.path.join(out, INDEX),))  # hpcio's own
    # index is an .npz too


def detect(path):
    """An ``.npz`` file (a zip whose first member is a ``.npy``), or a folder holding
    some (besides an hpcio index)."""
    if os.path.isdir(path):
        try:
            return SURE if any(n.endswith(".npz") and n != INDEX for n in os.listdir(path)) \
                else 0
        except OSError:
            return 0
    try:
        with open(path, "rb") as f:
            head = f.read(30)
            if head[:4] != _LOCAL:
                return 0
            nlen = struct.unpack("<H", head[26:28])[0]
            first = f.read(nlen)
    except OSError:
        return 0
    return SURE if path.endswith(".npz") or first.endswith(b".npy") else 0


def _labels(a, path, yname):
    """Member ``yname`` as class labels: integers, or floats that hold whole numbers."""
    a = a.reshape(-1)
    if a.dtype.kind in "iub":
        return a
    if a.dtype.kind == "f" and np.isfinite(a).all() and (a == np.round(a)).all():
        return a.astype(np.int64)
    raise HpcioError(f"{path}: member {yname} holds {a.dtype.name} values, not integer class "
                     f"labels (--labels names another member)")


def _one(path, xname, yname):
    """(offsets, lengths, labels, sample shape, dtype, layout, axis, strided) of one
    file's records. ``strided``: each sample's bytes are strided in the file (several
    samples on the last axis in C order, as DLIO writes them, or on the first in Fortran
    order): only NumPy reads such a sample, so its record is indexed at the block of the
    array that holds it, as a compressed record is (:mod:`hpcio.data.dataset`)."""
    with open(path, "rb") as f:
        mem = members(f, path)
        if xname not in mem:
            raise HpcioError(f"{path}: no member {xname} (the samples; "
                             f"--images names another)")
        at, shape, fortran, dtype = array_at(f, mem[xname], path)
        label = _labels(_small(f, mem[yname], path), path, yname) if yname in mem else None
        if "offsets" in mem and len(shape) == 1 and dtype == np.uint8:
            offs = _small(f, mem["offsets"], path).astype(np.int64)
            if len(offs) < 2 or (np.diff(offs) < 0).any() or offs[0] < 0 or \
                    offs[-1] > shape[0]:
                raise HpcioError(f"{path}: member offsets does not cut {xname} into records")
            return at + offs[:-1], np.diff(offs), label, None, dtype, "blob", None, False
    if dtype.byteorder == ">":
        raise HpcioError(f"{path}: {xname} is big-endian {dtype.name}; records are read as "
                         f"little-endian")
    if not shape:
        raise HpcioError(f"{path}: {xname} is a scalar, not samples")
    n = len(label) if label is not None else shape[0]
    if n == 1 and shape[-1] == 1 and shape[0] != 1:
        axis = -1  # DLIO's one sample per file: (d1, d2, 1)
    elif shape[0] == n:
        axis = 0
    elif shape[-1] == n:
        axis = -1
    else:
        raise HpcioError(f"{path}: {xname} of shape {shape} does not hold the {n} samples "
                         f"of {yname} on its first or last axis")
    strided = n > 1 and (axis == 0) == fortran
    sample = shape[1:] if axis == 0 else shape[:-1]
    rec = int(np.prod(sample)) * dtype.itemsize
    return at + np.arange(n, dtype=np.int64) * rec, np.full(n, rec, np.int64), label, \
        sample, dtype, "array", axis, strided


def _picture_shape(sample):
    """[H, W, C] of a sample's array shape: (H, W) is one channel; others flat."""
    if len(sample) == 3:
        return list(sample)
    if len(sample) == 2:
        return list(sample) + [1]
    return [int(np.prod(sample)), 1, 1]


def index(path, out, images=None, labels=None, **_):
    """Manifest and record index of ``.npz`` files made elsewhere (one file, or a folder of
    them, sorted by path): member ``x`` (``images``) holds the samples, ``y``
    (``labels``) their labels. Every file is read for its headers and labels only."""
    xname, yname = images or "x", labels or "y"
    paths = _npz_files(path, out)
    if not paths:
        raise HpcioError(f"{path}: no .npz files")
    offs, lens, labs, file_of, sizes = [], [], [], [], []
    kind, axes, sizes_vary, strided = None, set(), False, 0
    for j, p in enumerate(paths):
        off, ln, lab, sample, dtype, layout, axis, apart = _one(p, xname, yname)
        strided += len(off) if apart else 0
        this = (layout, sample, dtype.str)
        if kind is None:
            kind = this
        elif this[::2] != kind[::2] or (sample is None) != (kind[1] is None) or (
                sample is not None and len(sample) != len(kind[1])):
            raise HpcioError(f"{p}: {xname} holds {this[0]} samples {this[1]} {this[2]}, "
                             f"{paths[0]} holds {kind[0]} {kind[1]} {kind[2]}")
        elif sample != kind[1]:
            sizes_vary = True  # DLIO's record_length_bytes_stdev: raw sizes drawn per file
        axes.add(axis)
        offs.append(off)
        lens.append(ln)
        labs.append(lab.astype(np.int64) if lab is not None
                    else np.full(len(ln), -1, np.int64))
        file_of.append(np.full(len(ln), j, np.int32))
        sizes.append(os.path.getsize(p))
    layout, sample, _ = kind
    off, length, label = np.concatenate(offs), np.concatenate(lens), np.concatenate(labs)
    n = len(off)
    if n == 0:
        raise HpcioError(f"{path}: its .npz files hold no records")
    file = np.concatenate(file_of)
    files = [os.path.relpath(p, out) for p in paths]
    keys = {"member": xname, "labels": yname, "layout": layout}
    if len(axes) > 1:
        raise HpcioError(f"{path}: some files hold samples on the first axis of "
                         f"{xname}, others on the last")
    if layout == "blob":
        with open(paths[0], "rb") as f:
            f.seek(int(off[0]))
            rec = f.read(int(length[0]))
        enc = pictures.sniff(rec) or "raw"
        shape = [int(length[0]), 1, 1] if enc == "raw" else \
            list(pictures.decode(rec, enc, where=f"{paths[0]}: record 0").shape)
        keys["offsets"] = "offsets"
        dtype = "uint8"
    else:
        enc, shape, dtype = "raw", _picture_shape(sample), np.dtype(kind[2]).name
        keys["axis"] = axes.pop()
        keys["shape"] = list(sample)  # the first file's
        if sizes_vary:
            keys["sizes_vary"] = True
    h = hashlib.sha256()  # of the records' bytes in order: one read per file
    for j, p in enumerate(paths if os.path.isdir(path) else []):
        sel = np.flatnonzero(file == j)
        if len(sel):
            a, b = int(off[sel[0]]), int(off[sel[-1]] + length[sel[-1]])
            with open(p, "rb") as f:
                f.seek(a)
                h.update(f.read(b - a))
    top = os.path.relpath(path, out)
    shard = {"path": top, "records": [0, n], "bytes": int(sum(sizes)),
             "sha256": h.hexdigest() if os.path.isdir(path) else sha256_file(path)}
    if strided:  # read through NumPy only: the coordinated reader says so in one line
        shard["compressed_records"] = strided
        keys["compression"] = "none, strided samples"
    idx = RecordIndex(file, off, length, label, files, sizes)
    return index_manifest("npz", enc, shape, dtype, classes_of(label), n, shard,
                          {"npz": keys}), idx
