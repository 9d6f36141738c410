"""Writing a shard's database the way Caffe writes one, then compacting and indexing it."""

import os

import numpy as np
import plyvel

from ...errors import HpcioError
from ..base import ShardResult, shard_stem
from ..datum import make_datum
from .native import CAFFE_OPTIONS, settle
from .scanner import ranges_sha256, scan

#: format options (``--format-option KEY=VALUE``), the first of each the default
OPTIONS = {"value": ("record", "datum"), "compression": ("none", "snappy")}


def writer_options(spec):
    bad = sorted(set(spec.options) - set(OPTIONS))
    if bad:
        raise HpcioError(f"the leveldb format has no option {', '.join(bad)} (it has "
                         f"{', '.join(OPTIONS)})", everywhere=True)
    out = {}
    for k, choices in OPTIONS.items():
        out[k] = str(spec.options.get(k, choices[0]))
        if out[k] not in choices:
            raise HpcioError(f"leveldb {k}={out[k]}: choose from {'|'.join(choices)}",
                             everywhere=True)
    return out


class Writer:
    """Puts records in key order, one write batch per block, into a database opened with
    Caffe's options; ``close`` compacts it and indexes it with :func:`scan`."""

    def __init__(self, root, k, lo, hi, spec):
        o = writer_options(spec)
        self.rel = shard_stem(k) + ".leveldb"
        self.path = os.path.join(root, self.rel)
        self.lo, self.hi = lo, hi
        self.datum = o["value"] == "datum"
        self.raw = spec.encoding == "raw"
        self.shape = tuple(spec.shape)
        self.labels = []
        self.db = plyvel.DB(self.path, create_if_missing=True, error_if_exists=True,
                            compression=None if o["compression"] == "none" else "snappy",
                            **CAFFE_OPTIONS)

    def _values(self, block):
        n = block.hi - block.lo
        if not self.datum:
            return (block.record(k) for k in range(n))
        if self.raw:  # Caffe's raw Datum: C x H x W
            h, w, c = self.shape
            px = block.data.reshape(n, h, w, c).transpose(0, 3, 1, 2)
            return (make_datum(px[k].tobytes(), int(block.labels[k]), c, h, w)
                    for k in range(n))
        return (make_datum(block.record(k), int(block.labels[k]), encoded=True)
                for k in range(n))

    def write(self, block):
        with self.db.write_batch() as wb:
            for k, v in enumerate(self._values(block)):
                wb.put(b"%08d" % (block.lo + k), v)
        self.labels.append(block.labels)

    def close(self):
        db, self.db = self.db, None
        try:
            db.compact_range()
            settle(db, self.path)
        finally:
            db.close()
        s = scan(self.path)
        n = self.hi - self.lo
        if s.keys != [b"%08d" % i for i in range(self.lo, self.hi)]:
            raise HpcioError(f"{self.path}: holds {len(s.keys)} keys, wrote {n}")
        label = np.concatenate(self.labels) if self.labels else np.zeros(0, np.int64)
        files = [f"{self.rel}/{t}" for t in s.tables]
        sha = ranges_sha256([os.path.join(self.path, t) for t in s.tables], s.file,
                            s.offset, s.length)
        extra = {"compressed_records": s.compressed} if s.compressed else {}
        return ShardResult(self.rel, (self.lo, self.hi), files, s.table_bytes, s.file,
                           s.offset, s.length, label, sha, extra)

    def abort(self):
        if self.db is not None:
            self.db.close()
            self.db = None
