"""Image files: one file per record in class folders, as ImageFolder-style loaders expect.

Layout: ``shard-00000/<class:04d>/<record:08d>.<png|jpg|raw>``. Every file is one record
(offset 0, its whole length). Native access: every rank lists the class folders itself on
open (the metadata storm of many ranks on one directory tree), then opens and reads one
file per sample.
"""

import hashlib
import io
import os

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..data import pictures
from ..data.dataset import RecordIndex
from ..data.pictures import EXTENSIONS
from ..errors import HpcioError
from .base import MAYBE, Block, FormatInfo, ShardResult, index_manifest, shard_stem, sync_tree

__all__ = ["NAME", "INFO", "Writer", "Native", "open_native", "targets", "manifest_keys",
           "list_tree", "record_path", "FolderSource", "read_image_file", "index", "detect"]

NAME = "images"
INFO = FormatInfo(file_per_record=True)  # readers check each file as they open it
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".raw")


def targets(k, spec):
    return [shard_stem(k)]


def manifest_keys(spec):
    return {"images": {"pattern": "shard-{shard:05d}/{label:04d}/{record:08d}." +
                       EXTENSIONS[spec.encoding]}}


def detect(path):
    """Any folder may be one of images in class sub-folders: the last resort of
    ``datagen index``, when no other format claims it."""
    return MAYBE if os.path.isdir(path) else 0


def record_path(k, label, i, encoding):
    return f"{shard_stem(k)}/{label:04d}/{i:08d}.{EXTENSIONS[encoding]}"


class Writer:
    """One file per record; the shard's sha256 is that of its records' bytes in record
    order (what :func:`hpcio.dataset.shard_sha256` computes for a folder)."""

    def __init__(self, root, k, lo, hi, spec):
        self.root, self.k, self.lo, self.hi = root, k, lo, hi
        self.rel = shard_stem(k)
        self.enc = spec.encoding
        self.h = hashlib.sha256()
        self.made = set()
        self.files, self.length, self.label = [], [], []
        os.makedirs(os.path.join(root, self.rel), exist_ok=True)

    def write(self, block):
        for k in range(block.hi - block.lo):
            i, lab = block.lo + k, int(block.labels[k])
            rel = record_path(self.k, lab, i, self.enc)
            d = os.path.dirname(rel)
            if d not in self.made:
                os.makedirs(os.path.join(self.root, d), exist_ok=True)
                self.made.add(d)
            rec = block.record(k)
            with open(os.path.join(self.root, rel), "wb") as f:
                f.write(rec)
            self.h.update(rec)
            self.files.append(rel)
        self.length.append(block.lengths)
        self.label.append(block.labels)

    def close(self):
        sync_tree(os.path.join(self.root, self.rel))
        n = self.hi - self.lo
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
        length = cat(self.length)
        return ShardResult(self.rel, (self.lo, self.hi), self.files, length.tolist(),
                           np.arange(n, dtype=np.int32), np.zeros(n, np.int64), length,
                           cat(self.label), self.h.hexdigest())

    def abort(self):
        pass


def list_tree(folder):
    """Class folders of ``folder`` (sorted) and, per class, its image files (sorted), with
    ``os.scandir``: [(class_name, [file names])]. Hidden entries are skipped."""
    try:
        classes = sorted(e.name for e in os.scandir(folder)
                         if e.is_dir() and not e.name.startswith("."))
    except OSError as e:
        raise HpcioError(f"{folder}: cannot list ({e.strerror})")
    if not classes:  # one folder of images, no classes (DLIO's train/): class ""
        classes = [""]
    out = []
    for c in classes:
        try:
            names = sorted(e.name for e in os.scandir(os.path.join(folder, c))
                           if e.is_file() and not e.name.startswith("."))
        except OSError as e:
            raise HpcioError(f"{os.path.join(folder, c)}: cannot list ({e.strerror})")
        out.append((c, names))
    return out


class Native:
    """Lists every shard's class folders on open (as each rank of a framework does), then
    one open + read per record."""

    def __init__(self, ds):
        self.ds = ds
        listed = 0
        for shard in ds.manifest["shards"]:
            top = os.path.join(ds.root, shard["path"])
            listed += sum(len(names) for _, names in list_tree(top)) \
                if os.path.isdir(top) else 0
        if listed < ds.records:
            raise HpcioError(f"{ds.root}: listed {listed} image files, the index has "
                             f"{ds.records} records")
        self.listed = listed
        self.opens = 0  # files opened so far (ReaderStats.opens)

    def get(self, i):
        self.opens += 1
        p = self.ds.path(self.ds.index.file[i])
        try:
            with open(p, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise HpcioError(f"{p}: record file missing")
        except OSError as e:
            raise HpcioError(f"{p}: {e.strerror}")

    def close(self):
        pass


def open_native(ds):
    return Native(ds)


# ---- folders made elsewhere: import and index ---------------------------------------

def read_image_file(path):
    """The bytes of one image file; an unreadable one is a one-line error."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise HpcioError(f"{path}: unreadable image ({e.strerror})")


def _decode(path, data, mode):
    try:
        img = Image.open(io.BytesIO(data))
        img = np.asarray(img.convert(mode))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise HpcioError(f"{path}: unreadable image ({str(e).splitlines()[0] if str(e) else 'cannot decode'})")
    return img[..., None] if img.ndim == 2 else img


def _channels(data):
    try:
        return 1 if Image.open(io.BytesIO(data)).mode in ("L", "1", "I;16", "I") else 3
    except Exception:
        return 3


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
        tree = list_tree(root)
        paths, labels = [], []
        for c, (name, files) in enumerate(tree):
            paths += [os.path.join(root, name, f) for f in files]
            labels += [c] * len(files)
        if not paths:
            raise HpcioError(f"{root}: no image files in class sub-folders "
                             f"(expected {root}/<class>/<image>)")
        first = read_image_file(paths[0])
        enc = pictures.sniff(first)
        if enc is None:
            raise HpcioError(f"{paths[0]}: unreadable image (not a PNG or JPEG file)")
        shape = _decode(paths[0], first, "RGB" if _channels(first) == 3 else "L").shape
        return cls(root, paths, labels, [n for n, _ in tree], shape, enc)

    def block(self, lo, hi, encoding, quality):
        blobs = []
        mode = "L" if self.shape[2] == 1 else "RGB"
        for p in self.paths[lo:hi]:
            data = read_image_file(p)
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


def index(path, out, **_):
    """Manifest and record index of a folder of images in class sub-folders, made
    elsewhere: every file is one record, read once here for its length and checksum."""
    s = FolderSource.scan(path)
    h = hashlib.sha256()
    length = np.zeros(s.records, np.int64)
    encs = set()
    for i, p in enumerate(s.paths):
        data = read_image_file(p)
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
    return index_manifest("images", enc, s.shape, "uint8", s.classes, n, shard,
                     {"images": {"class_names": s.class_names}}), index
