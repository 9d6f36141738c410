"""Image files: one file per record in class folders, as ImageFolder-style loaders expect.

Layout: ``shard-00000/<class:04d>/<record:08d>.<png|jpg|raw>``. Every file is one record
(offset 0, its whole length). Native access: every rank lists the class folders itself on
open (the metadata storm of many ranks on one directory tree), then opens and reads one
file per sample.
"""

import hashlib
import os

import numpy as np

from ..errors import HpcioError
from ..images import EXTENSIONS
from .base import ShardResult, shard_stem, sync_tree

__all__ = ["NAME", "Writer", "Native", "open_native", "targets", "manifest_keys",
           "list_tree", "record_path"]

NAME = "images"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".raw")


def targets(k, spec):
    return [shard_stem(k)]


def manifest_keys(spec):
    return {"images": {"pattern": "shard-{shard:05d}/{label:04d}/{record:08d}." +
                       EXTENSIONS[spec.encoding]}}


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

    def get(self, i):
        with open(self.ds.path(self.ds.index.file[i]), "rb") as f:
            return f.read()

    def close(self):
        pass


def open_native(ds):
    return Native(ds)
