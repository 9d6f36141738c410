"""Data the user already has: imports (written anew as hpcio datasets) and indexes (the
data left as it is, a manifest and record index written beside it).

Imports read local files only — never a download: a folder of images in class
sub-folders, MNIST idx files, CIFAR-10 batches (python pickles or the binary version).
Indexes cover an LMDB environment (e.g. made by Caffe's ``convert_imageset``), an HDF5
file with images/labels datasets, and an image folder.
"""

import gzip
import io
import os
import pickle

import numpy as np

from . import __version__
from . import images as pictures
from .dataset import INDEX, KIND, MANIFEST, Dataset, RecordIndex, is_dataset, sha256_file
from .datagen import _owned, _remove, write_dataset
from .errors import HpcioError
from .formats import hdf5 as h5fmt
from .formats import images as imgfmt
from .formats import lmdb as lmdbfmt
from .formats.base import Block

__all__ = ["read_idx", "load_mnist", "load_cifar10", "ArraySource", "FolderSource",
           "import_data", "index_path", "IMPORTERS", "INDEXERS"]


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


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise HpcioError(f"{path}: unreadable image ({e.strerror})")


def _decode(path, data, mode):
    from PIL import Image, UnidentifiedImageError
    try:
        img = Image.open(io.BytesIO(data))
        img = np.asarray(img.convert(mode))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise HpcioError(f"{path}: unreadable image ({str(e).splitlines()[0] if str(e) else 'cannot decode'})")
    return img[..., None] if img.ndim == 2 else img


class FolderSource:
    """Records from ``root/<class>/<file>`` (classes sorted by name, files sorted within a
    class, as ImageFolder numbers them). ``encoding='keep'`` stores each file's bytes as
    they are (all PNG or all JPEG); another encoding decodes and re-encodes."""

    def __init__(self, root, paths, labels, class_names, shape, file_encoding):
        self.root, self.paths = root, paths
        self.labels = np.asarray(labels, np.int64)
        self.records = len(paths)
        self.class_names = class_names
        self.classes = len(class_names)
        self.shape = tuple(shape)
        self.file_encoding = file_encoding

    @classmethod
    def scan(cls, root):
        """List ``root`` and look at its first image (rank 0 does this once)."""
        if not os.path.isdir(root):
            raise HpcioError(f"{root}: no such image folder")
        tree = imgfmt.list_tree(root)
        paths, labels = [], []
        for c, (name, files) in enumerate(tree):
            paths += [os.path.join(root, name, f) for f in files]
            labels += [c] * len(files)
        if not paths:
            raise HpcioError(f"{root}: no image files in class sub-folders "
                             f"(expected {root}/<class>/<image>)")
        first = _read(paths[0])
        enc = pictures.sniff(first)
        if enc is None:
            raise HpcioError(f"{paths[0]}: unreadable image (not a PNG or JPEG file)")
        shape = _decode(paths[0], first, "RGB" if _channels(first) == 3 else "L").shape
        return cls(root, paths, labels, [n for n, _ in tree], shape, enc)

    def block(self, lo, hi, encoding, quality):
        blobs = []
        mode = "L" if self.shape[2] == 1 else "RGB"
        for p in self.paths[lo:hi]:
            data = _read(p)
            if encoding == self.file_encoding:
                if pictures.sniff(data) != self.file_encoding:
                    raise HpcioError(f"{p}: unreadable image (not a "
                                     f"{self.file_encoding.upper()} file like the others)")
                blobs.append(data)
                continue
            img = _decode(p, data, mode)
            if encoding == "raw" and img.shape != self.shape:
                raise HpcioError(f"{p}: {img.shape[1]}x{img.shape[0]} pixels, the others "
                                 f"are {self.shape[1]}x{self.shape[0]} (raw records need "
                                 f"one size; keep the encoding or resize first)")
            d, _ = pictures.encode(img[None], encoding, quality)
            blobs.append(d.tobytes())
        lengths = np.fromiter((len(b) for b in blobs), np.int64, len(blobs))
        return Block(lo, hi, self.labels[lo:hi], np.frombuffer(b"".join(blobs), np.uint8),
                     lengths)


def _channels(data):
    from PIL import Image
    try:
        return 1 if Image.open(io.BytesIO(data)).mode in ("L", "1", "I;16", "I") else 3
    except Exception:
        return 3


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
            import codecs
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
    from .datagen import _rank0
    s = _rank0(comm, lambda: FolderSource.scan(os.path.abspath(src)))
    if comm is not None and comm.Get_size() > 1:
        s = comm.bcast(s, root=0)  # the listing, once: metadata read by one rank
    return s, "keep"


IMPORTERS = {"mnist": _mnist_source, "cifar10": _cifar_source, "folder": _folder_source}


def import_data(kind, src, out, format="packed", encoding=None, shards=1, split="train",
                force=False, comm=None, progress=False, quality=None, **format_options):
    """Write the data at ``src`` (``kind`` in :data:`IMPORTERS`) as an hpcio dataset in
    ``out``; collective over ``comm``."""
    try:
        make = IMPORTERS[kind]
    except KeyError:
        raise HpcioError(f"unknown import kind {kind!r} (choose from {', '.join(IMPORTERS)})",
                         everywhere=True)
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

def _manifest(fmt, encoding, shape, dtype, classes, n, shard, extra):
    m = {"kind": KIND, "format": fmt, "encoding": encoding, "shape": list(shape),
         "dtype": dtype, "classes": classes, "records": n, "source": "index",
         "generator": f"hpcio {__version__}", "index": INDEX, "shards": [shard]}
    m.update(extra)
    return m


def _classes(label):
    lab = label[label >= 0]
    return int(lab.max()) + 1 if len(lab) else 0


def _index_lmdb(path, out):
    keys, off, length, label, data, kind, first = lmdbfmt.index_env(path)
    n = len(keys)
    env_path = os.path.dirname(data) if os.path.isdir(path) else data
    extra = {"lmdb": {"key": None, "value": kind, "subdir": os.path.isdir(path)}}
    template = [b"%08d" % i for i in range(n)]
    side = []
    if keys == template:
        extra["lmdb"]["key"] = lmdbfmt.KEY
    else:
        if any(k.endswith(b"\0") for k in keys):
            raise HpcioError(f"{path}: keys ending in a NUL byte cannot be stored")
        kp = os.path.join(out, "keys.npy")
        if os.path.lexists(kp):
            raise HpcioError(f"{kp}: exists and was not written by hpcio")
        np.save(kp, np.array(keys, dtype=bytes))
        extra["lmdb"]["keys"] = "keys.npy"
        side.append("keys.npy")
    extra["side_files"] = side
    fo, fl, _ = (lmdbfmt.parse_datum(first) if kind == "datum" else (0, len(first), -1))
    rec = first[fo:fo + fl]
    enc = pictures.sniff(rec) or "raw"
    shape, dtype = [], "uint8"
    if kind == "datum":
        c, h, w, _ = lmdbfmt.datum_fields(first)
        shape = [h, w, c] if h and w else []
        if enc == "raw" and shape and int(np.prod(shape)) != fl:
            dtype = "float32"  # Datum float_data / other element types
    if enc != "raw" and not shape:
        shape = list(pictures.decode(rec, enc).shape)
    if enc == "raw" and not shape and len(set(length.tolist())) == 1:
        shape = [int(length[0])]
    if kind != "datum":
        extra["note"] = "values are not Caffe Datums: each record is the whole value, " \
                        "labels are -1"
    rel = os.path.relpath(data, out)
    shard_rel = os.path.relpath(env_path, out)
    sha = sha256_file(data) if os.path.isfile(os.path.join(out, shard_rel)) else \
        lmdbfmt.records_sha256(data, off, length)
    size = os.path.getsize(data)
    shard = {"path": shard_rel, "records": [0, n], "bytes": size, "sha256": sha}
    index = RecordIndex(np.zeros(n, np.int32), off, length, label, [rel], [size])
    return _manifest("lmdb", enc, shape, dtype, _classes(label), n, shard, extra), index


def _pick(f, name, defaults, what, path):
    for cand in ([name] if name else defaults):
        if cand in f:
            return cand
    if name or what == "images":
        raise HpcioError(f"{path}: no {what} dataset ({' or '.join([name] if name else defaults)})")
    return None


def _index_hdf5(path, out, images=None, labels=None):
    import h5py
    with h5fmt.open_h5(path) as f:
        iname = _pick(f, images, ["images", "data"], "images", path)
        lname = _pick(f, labels, ["labels", "label"], "labels", path)
        d = f[iname]
        if not isinstance(d, h5py.Dataset):
            raise HpcioError(f"{path}: {iname} is a group, not a dataset")
        if h5py.check_vlen_dtype(d.dtype) is not None or d.dtype.kind == "O":
            raise HpcioError(f"{path}: {iname} has variable-length elements: records live "
                             f"in the HDF5 global heap and are not indexable")
        extra = {"hdf5": {"images": iname, "labels": lname}}
        if "offsets" in f and d.ndim == 1 and d.dtype == np.uint8:
            offs = f["offsets"][:].astype(np.int64)
            n = len(offs) - 1
            base = d.id.get_offset()
            if base is None or d.id.get_create_plist().get_layout() != h5py.h5d.CONTIGUOUS:
                raise HpcioError(f"{path}: {iname} blob is not contiguous")
            off, length = base + offs[:-1], np.diff(offs)
            first = d[int(offs[0]):int(offs[1])] if n else b""
            enc = pictures.sniff(first) or "raw"
            shape = list(pictures.decode(first, enc).shape) if enc != "raw" else []
            extra["hdf5"].update(layout="blob", offsets="offsets")
            dtype = "uint8"
        else:
            n = d.shape[0] if d.ndim else 0
            rec = int(d.dtype.itemsize * np.prod(d.shape[1:]))
            off = h5fmt.record_offsets(d, n, rec)
            length = np.full(n, rec, np.int64)
            enc, shape, dtype = "raw", list(d.shape[1:]), d.dtype.name
            extra["hdf5"]["layout"] = "chunked" if d.chunks else "contiguous"
        if lname:
            label = np.asarray(f[lname][:]).reshape(len(f[lname]), -1)[:, 0].astype(np.int64)
            if len(label) != n:
                raise HpcioError(f"{path}: {n} images but {len(label)} labels")
        else:
            label = np.full(n, -1, np.int64)
    if n == 0:
        raise HpcioError(f"{path}: {iname} holds no records")
    size = os.path.getsize(path)
    rel = os.path.relpath(path, out)
    shard = {"path": rel, "records": [0, n], "bytes": size, "sha256": sha256_file(path)}
    index = RecordIndex(np.zeros(n, np.int32), off, length, label, [rel], [size])
    return _manifest("hdf5", enc, shape, dtype, _classes(label), n, shard, extra), index


def _index_folder(path, out):
    import hashlib
    s = FolderSource.scan(path)
    h = hashlib.sha256()
    length = np.zeros(s.records, np.int64)
    encs = set()
    for i, p in enumerate(s.paths):
        data = _read(p)
        enc = pictures.sniff(data)
        if enc is None:
            raise HpcioError(f"{p}: unreadable image (not a PNG or JPEG file)")
        encs.add(enc)
        length[i] = len(data)
        h.update(data)
    files = [os.path.relpath(p, out) for p in s.paths]
    n = s.records
    top = os.path.relpath(path, out)
    shard = {"path": top, "records": [0, n], "bytes": int(length.sum()),
             "sha256": h.hexdigest()}
    index = RecordIndex(np.arange(n, dtype=np.int32), np.zeros(n, np.int64), length,
                        s.labels, files, length)
    enc = encs.pop() if len(encs) == 1 else "mixed"
    return _manifest("images", enc, s.shape, "uint8", s.classes, n, shard,
                     {"images": {"class_names": s.class_names}}), index


def _kind(path):
    """Which indexer fits ``path``."""
    import h5py
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "data.mdb")):
            return "lmdb"
        return "folder"
    if not os.path.exists(path):
        raise HpcioError(f"{path}: no such file or directory")
    if path.endswith(".mdb"):
        return "lmdb"
    try:
        if h5py.is_hdf5(path):
            return "hdf5"
    except OSError:
        pass
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"\x89HDF"):
        return "hdf5"
    raise HpcioError(f"{path}: not an LMDB environment, HDF5 file or image folder "
                     f"(an HDF5 file whose signature is missing is corrupt)")


INDEXERS = {"lmdb": lambda p, o, a: _index_lmdb(p, o),
            "hdf5": lambda p, o, a: _index_hdf5(p, o, **a),
            "folder": lambda p, o, a: _index_folder(p, o)}


def index_path(path, out=None, images=None, labels=None, force=False):
    """Write ``hpcio.json`` + ``index.npz`` for the dataset at ``path`` (made elsewhere)
    into ``out`` (default: ``path`` if a directory, else its folder); the data is only
    read. Returns the :class:`~hpcio.dataset.Dataset`."""
    path = os.path.abspath(path)
    kind = _kind(path)
    out = os.path.abspath(out or (path if os.path.isdir(path) else os.path.dirname(path)))
    os.makedirs(out, exist_ok=True)
    if is_dataset(out):
        if not force:
            raise HpcioError(f"{out}: already holds an hpcio manifest (pass --force to "
                             f"replace it)")
        files, _ = _owned(out)
        keep = {MANIFEST, INDEX, "keys.npy"}
        _remove(out, [f for f in files if f in keep], [])
    for rel in (MANIFEST, INDEX):
        if os.path.lexists(os.path.join(out, rel)):
            raise HpcioError(f"{os.path.join(out, rel)}: exists and was not written by "
                             f"hpcio")
    if not os.access(out, os.W_OK):
        raise HpcioError(f"{out}: not writable (use --out to write the index elsewhere)")
    manifest, index = INDEXERS[kind](path, out, {"images": images, "labels": labels})
    ds = Dataset(out, manifest, index)
    index.check(out)
    try:
        ds.save()
    except OSError as e:
        from .formats.base import write_error
        raise write_error(out, e)
    return ds
