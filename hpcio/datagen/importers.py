"""Data the user already has: imports (written anew as hpcio datasets) and indexes (the
data left as it is, a manifest and record index written beside it).

Imports read local files only — never a download: a folder of images in class
sub-folders, MNIST idx files, CIFAR-10 batches (python pickles or the binary version).
Indexes cover an LMDB environment or a LevelDB database (e.g. made by Caffe's
``convert_imageset``), an HDF5 file with images/labels datasets, ``.npz`` and TFRecord
files (DLIO's), and an image folder.
"""

import codecs
import gzip
import io
import os
import pickle
import time

import numpy as np

from ..data import pictures
from .. import __version__
from ..data.dataset import INDEX, MANIFEST, Dataset, compressed_records, is_dataset, \
    open_dataset, record_crcs_of, shard_sha256
from ..errors import HpcioError, lookup
from ..formats import detect, open_native
from ..formats.base import Block, write_error
from ..formats.images import FolderSource
from ..mpiutil import on_root
from .write import DLIO_SPLITS, owned_files, remove_owned, write_dataset

__all__ = ["read_idx", "load_mnist", "load_cifar10", "ArraySource", "FolderSource",
           "import_data", "index_path", "update_index", "IMPORTERS"]



# ---- sources ---------------------------------------------------------------------------------

class ArraySource:
    """Records from in-memory pixels (N, H, W, C) uint8 and labels."""

    def __init__(self, pixels, labels, classes=None):
        self.pixels = pixels
        self.labels = np.asarray(labels, dtype=np.int64)
        self.records = len(pixels)
        self.shape = tuple(pixels.shape[1:])
        self.classes = int(classes if classes is not None else self.labels.max() + 1)

    def block(self, lo, hi, encoding, quality):
        data, lengths = pictures.encode(self.pixels[lo:hi], encoding, quality)
        return Block(lo, hi, self.labels[lo:hi], data, lengths)


# ---- MNIST and CIFAR-10 files ---------------------------------------------------------------

def _open_maybe_gz(path):
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")
    except OSError as e:
        raise HpcioError(f"{path}: {e.strerror}")


def read_idx(path):
    """An MNIST idx file (optionally gzipped) as a uint8 array."""
    try:
        with _open_maybe_gz(path) as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise HpcioError(f"{path}: unreadable idx file ({e})")
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise HpcioError(f"{path}: not an idx file of unsigned bytes")
    nd = data[3]
    if len(data) < 4 + 4 * nd:
        raise HpcioError(f"{path}: truncated idx header")
    dims = [int.from_bytes(data[4 + 4 * k: 8 + 4 * k], "big") for k in range(nd)]
    need = 4 + 4 * nd + int(np.prod(dims))
    if len(data) < need:
        raise HpcioError(f"{path}: truncated ({len(data)} bytes, the header needs {need})")
    return np.frombuffer(data, np.uint8, count=need - 4 - 4 * nd, offset=4 + 4 * nd).reshape(dims)


def _find(src, names):
    for n in names:
        for p in (os.path.join(src, n), os.path.join(src, n + ".gz")):
            if os.path.exists(p):
                return p
    raise HpcioError(f"{src}: none of {', '.join(names)} (or .gz) found")


def load_mnist(src, split="train"):
    """(pixels (N, 28, 28, 1), labels) from the MNIST idx files in folder ``src`` (or the
    images file ``src``, the labels file beside it)."""
    stem = "train" if split == "train" else "t10k"
    if os.path.isdir(src):
        ip = _find(src, [f"{stem}-images-idx3-ubyte", f"{stem}-images.idx3-ubyte"])
        lp = _find(src, [f"{stem}-labels-idx1-ubyte", f"{stem}-labels.idx1-ubyte"])
    else:
        ip = src
        lp = src.replace("images-idx3", "labels-idx1").replace("images.idx3", "labels.idx1")
        if lp == ip or not os.path.exists(lp):
            raise HpcioError(f"{src}: no labels file beside it ({os.path.basename(lp)})")
    x, y = read_idx(ip), read_idx(lp)
    if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
        raise HpcioError(f"{ip}: {x.shape} images do not match {y.shape} labels")
    return x[..., None], y.astype(np.int64)


class _NumpyOnly(pickle.Unpickler):
    """Unpickles dicts, lists and numpy arrays only: a batch file is data, never code."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray",
               "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype"),
               ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
               ("_codecs", "encode")}  # protocol-2 pickles written by Python 3 use it for bytes

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a batch file")
        if name in ("ndarray", "dtype"):
            return getattr(np, name)
        if module == "_codecs":
            return codecs.encode
        core = getattr(np, "_core", None) or np.core
        return getattr(core.multiarray, name)


def _cifar_batch(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise HpcioError(f"{path}: {e.strerror}")
    if path.endswith(".bin"):
        if len(raw) % 3073:
            raise HpcioError(f"{path}: not a CIFAR-10 binary batch ({len(raw)} bytes is not "
                             f"a multiple of 3073)")
        a = np.frombuffer(raw, np.uint8).reshape(-1, 3073)
        return a[:, 1:], a[:, 0].astype(np.int64)
    try:
        d = _NumpyOnly(io.BytesIO(raw), encoding="bytes").load()
        data = np.asarray(d[b"data"], np.uint8)
        labels = np.asarray(d[b"labels"], np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError,
            AttributeError, IndexError) as e:
        raise HpcioError(f"{path}: not a CIFAR-10 python batch ({e})")
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise HpcioError(f"{path}: not a CIFAR-10 batch (data {data.shape})")
    return data, labels


def load_cifar10(src, split="train"):
    """(pixels (N, 32, 32, 3), labels) from the CIFAR-10 batches in folder ``src``
    (``data_batch_1..5`` or ``test_batch``, python or ``.bin``), or one batch file."""
    if os.path.isdir(src):
        names = [f"data_batch_{k}" for k in range(1, 6)] if split == "train" else ["test_batch"]
        paths = []
        for n in names:
            for cand in (n, n + ".bin"):
                if os.path.exists(os.path.join(src, cand)):
                    paths.append(os.path.join(src, cand))
                    break
        if not paths:
            raise HpcioError(f"{src}: no CIFAR-10 batches ({names[0]}, ...) found")
    else:
        paths = [src]
    parts = [_cifar_batch(p) for p in paths]
    data = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    # rows are 1024 red, 1024 green, 1024 blue values: CHW planes to HWC pixels
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)), labels


def _mnist_source(src, split, comm):
    x, y = load_mnist(src, split)
    return ArraySource(x, y, 10), "png"


def _cifar_source(src, split, comm):
    x, y = load_cifar10(src, split)
    return ArraySource(x, y, 10), "png"


def _folder_source(src, split, comm):
    # the listing, once: metadata read by one rank and broadcast
    return on_root(comm, lambda: FolderSource.scan(os.path.abspath(src)), share=True), "keep"


IMPORTERS = {"mnist": _mnist_source, "cifar10": _cifar_source, "folder": _folder_source}


def import_data(kind, src, out, format="packed", encoding=None, shards=1, split="train",
                force=False, comm=None, progress=False, quality=None, **format_options):
    """Write the data at ``src`` (``kind`` in :data:`IMPORTERS`) as an hpcio dataset in
    ``out``; collective over ``comm``."""
    make = lookup(IMPORTERS, kind, "import kind")
    source, default = make(src, split, comm)
    encoding = encoding or default
    extra = {"source": "import", "imported_from": os.path.abspath(src), "import_kind": kind}
    if kind == "folder":
        extra["class_names"] = source.class_names
        if encoding == "keep":
            encoding = source.file_encoding
    elif encoding == "keep":
        raise HpcioError("--encoding keep applies to folder imports only", everywhere=True)
    return write_dataset(out, source, format, encoding, shards, force, comm, progress,
                         quality or 90, manifest=extra, desc=f"import {kind}",
                         **format_options)


# ---- indexes of data made elsewhere ---------------------------------------------------------


def _dlio_train(path):
    """``path/train`` where ``path`` is a DLIO data folder (``train/`` and ``valid/``
    and nothing else but hpcio's files): its training set is what a run reads."""
    try:
        names = [n for n in os.listdir(path) if not n.startswith(".")]
    except OSError:
        return path
    if "train" not in names or not os.path.isdir(os.path.join(path, "train")):
        return path
    rest = set(names) - set(DLIO_SPLITS) - {MANIFEST, INDEX, "keys.npy"}
    return path if rest else os.path.join(path, "train")


def index_path(path, out=None, images=None, labels=None, force=False):
    """Write ``hpcio.json`` + ``index.npz`` for the dataset at ``path`` (made elsewhere)
    into ``out`` (default: ``path`` if a directory, else its folder); the data is only
    read. Returns the :class:`~hpcio.dataset.Dataset`."""
    path = os.path.abspath(path)
    out = os.path.abspath(out or (path if os.path.isdir(path) else os.path.dirname(path)))
    path = _dlio_train(path)
    fmt = detect(path)  # the format that indexes it
    given = [f"--{k}" for k, v in (("images", images), ("labels", labels)) if v is not None]
    if given and not fmt.info.named:
        raise HpcioError(f"{path}: {given[0]} names what is inside HDF5, npz or TFRecord "
                         f"files; this is {fmt.name} data", everywhere=True)
    os.makedirs(out, exist_ok=True)
    if is_dataset(out):
        if not force:
            raise HpcioError(f"{out}: already holds an hpcio manifest (pass --force to "
                             f"replace it)")
        files, _ = owned_files(out)
        keep = {MANIFEST, INDEX, "keys.npy"}
        remove_owned(out, [f for f in files if f in keep], [])
    for rel in (MANIFEST, INDEX):
        if os.path.lexists(os.path.join(out, rel)):
            raise HpcioError(f"{os.path.join(out, rel)}: exists and was not written by "
                             f"hpcio")
    if not os.access(out, os.W_OK):
        raise HpcioError(f"{out}: not writable (use --out to write the index elsewhere)")
    manifest, index = fmt.index(path, out, images=images, labels=labels)
    ds = Dataset(out, manifest, index)
    index.check(out, ends=not compressed_records(manifest))
    index.crc = record_crcs_of(ds, open_native)
    try:
        ds.save()
    except OSError as e:
        raise write_error(out, e)
    return ds


def update_index(root, accept_changed=False):
    """Add the record CRCs (reading every record once) and the index's sha256 to the
    dataset in ``root`` (one indexed before hpcio recorded them); returns it.

    The bytes on disk are compared first with what the dataset recorded (its records'
    CRCs, its shards' sha256): a change is refused, since the user who has just seen a
    CRC error is the one most likely to run this, unless ``accept_changed`` says it is
    wanted; then it is written in the manifest's ``history``."""
    ds = open_dataset(root)
    got = record_crcs_of(ds, open_native)
    changes = _changes(ds, got)
    if changes and not accept_changed:
        n = sum(c["records"] for c in changes)
        more = (f"; {n} records" if n > 1 else "") + (
            f" in {len(changes)} shards" if len(changes) > 1 else "")
        raise HpcioError(f"{changes[0]['why']}{more}: refused (pass --accept-changed if "
                         f"the change is wanted)")
    for c in changes:
        c.pop("why")
        if c["sha256"]:
            c["was"] = c["shard"]["sha256"]
            c["shard"]["sha256"] = c["sha256"]
        c["shard"] = c["shard"]["path"]
    if changes:
        ds.manifest.setdefault("history", []).append(
            {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by": f"hpcio {__version__}",
             "what": "index --update --accept-changed", "changed": changes})
    ds.index.crc = got
    ds.save()
    return ds


def _changes(ds, got):
    """What changed on disk since ``ds`` was written or indexed, per shard: records whose
    CRCs ``got`` are not the ones recorded, bytes whose sha256 is not the manifest's."""
    out, want, idx = [], ds.index.crc, ds.index
    for shard in ds.manifest.get("shards", []):
        lo, hi = shard["records"]
        bad = np.flatnonzero(got[lo:hi] != want[lo:hi]) + lo if want is not None else []
        sha = shard.get("sha256") and shard_sha256(ds, shard)
        sha = sha if sha and sha != shard["sha256"] else None
        if not len(bad) and not sha:
            continue
        if len(bad):
            i = int(bad[0])
            why = (f"{ds.path(idx.file[i])}: record {i} at byte {int(idx.offset[i])} changed "
                   f"since it was indexed (CRC32C {int(got[i]):08x}, the index says "
                   f"{int(want[i]):08x})")
        else:
            why = (f"{os.path.join(ds.root, shard['path'])}: its bytes changed since it was "
                   f"written (sha256 {sha[:12]}..., the manifest says "
                   f"{shard['sha256'][:12]}...)")
        out.append({"why": why, "shard": shard, "records": int(len(bad)),
                    "sha256": sha})
    return out
