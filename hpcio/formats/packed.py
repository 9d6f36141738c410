"""Packed record shards: records concatenated back to back, the TFRecord idea without
per-record framing — the record index is the directory of the shard.

Layout: ``shard-00000.rec`` holds its records in record-id order, nothing else.
Native access: one ``os.pread`` per record at the index's offset (what a TFRecord-style
reader with an index does).
"""

import hashlib
import os

import numpy as np

from .base import ShardResult, shard_stem

__all__ = ["NAME", "Writer", "Native", "open_native", "targets", "manifest_keys"]

NAME = "packed"


def targets(k, spec):
    """Paths (relative) that shard ``k`` creates."""
    return [shard_stem(k) + ".rec"]


def manifest_keys(spec):
    return {"packed": {"layout": "concatenated", "suffix": ".rec"}}


class Writer:
    """Appends blocks to one shard file, hashing as it goes (no second read)."""

    def __init__(self, root, k, lo, hi, spec):
        self.rel = shard_stem(k) + ".rec"
        self.path = os.path.join(root, self.rel)
        self.lo, self.hi = lo, hi
        self.f = open(self.path, "wb", buffering=0)
        self.h = hashlib.sha256()
        self.pos = 0
        self.offset, self.length, self.label = [], [], []

    def write(self, block):
        buf = memoryview(block.data)
        self.h.update(buf)
        done = 0
        while done < len(buf):
            done += self.f.write(buf[done:])
        self.offset.append(self.pos + block.offsets[:-1])
        self.length.append(block.lengths)
        self.label.append(block.labels)
        self.pos += len(buf)

    def close(self):
        os.fsync(self.f.fileno())
        self.f.close()
        n = self.hi - self.lo
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
        return ShardResult(self.rel, (self.lo, self.hi), [self.rel], [self.pos],
                           np.zeros(n, np.int32), cat(self.offset), cat(self.length),
                           cat(self.label), self.h.hexdigest())

    def abort(self):
        try:
            self.f.close()
        except OSError:
            pass


class Native:
    """One ``os.pread`` per record, each shard file opened once."""

    def __init__(self, ds):
        self.ds = ds
        self.fds = [os.open(p, os.O_RDONLY) for p in ds.paths]
        self.opens = len(self.fds)  # files opened so far (ReaderStats.opens)

    def get(self, i):
        idx = self.ds.index
        return os.pread(self.fds[idx.file[i]], int(idx.length[i]), int(idx.offset[i]))

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def open_native(ds):
    return Native(ds)
