"""TFRecord files as TensorFlow writes them, each record a ``tf.train.Example`` as DLIO's
generator makes it (feature ``image`` the sample's bytes, ``size`` int64), with the label
as feature ``label`` (int64) beside them.

Framing of a record: its data length (uint64, little endian), the masked CRC32C of those 8
bytes (uint32), the data, the masked CRC32C of the data (mask: ``((crc >> 15) | (crc <<
17)) + 0xa282ead8`` mod 2**32). Layout: ``shard-00000.tfrecord``, records in record-id
order. A record of the index is a record's data, the Example (manifest ``container:
example``): the coordinated reader reads those bytes, and decoding takes the image out of
them (:func:`hpcio.formats.example.payloads`), as ``tf.io.parse_single_example`` would.

Native access: as ``TFRecordDataset``, each file read front to back through a 256 KiB
buffer (its default ``buffer_size``), both CRCs of every record checked; a record asked
out of order is read alone at its place, as a reader with a TFRecord index (DALI's) does.
"""

import hashlib
import mmap
import os
import struct
import zlib

import numpy as np
from crc32c import crc32c

from ..data import pictures
from ..data.dataset import RecordIndex, sha256_file
from ..errors import HpcioError
from .base import SURE, FormatInfo, ShardResult, classes_of, files_under, index_manifest, \
    shard_stem
from .example import example_images, example_parts

__all__ = ["NAME", "INFO", "Writer", "Native", "open_native", "targets", "manifest_keys",
           "masked_crc", "frames", "index", "detect", "SUFFIXES"]

NAME = "tfrecord"
INFO = FormatInfo(named=True)  # --images/--labels: the feature keys
SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")
BUFFER = 256 << 10  # TFRecordDataset's default read buffer
_DELTA = 0xA282EAD8
_M32 = 0xFFFFFFFF


def _mask(c):
    return (((c >> 15) | (c << 17)) + _DELTA) & _M32


def masked_crc(data):
    """TFRecord's masked CRC32C of ``data``."""
    return _mask(crc32c(data))


def _masks(c):
    """:func:`masked_crc` of CRCs ``c`` (uint32 array), all at once."""
    c = np.asarray(c, np.uint64)
    return ((((c >> np.uint64(15)) | (c << np.uint64(17))) + np.uint64(_DELTA)) &
            np.uint64(_M32)).astype(np.uint32)


def targets(k, spec):
    return [shard_stem(k) + ".tfrecord"]


def manifest_keys(spec):
    return {"container": "example",
            "tfrecord": {"record": "example", "image": "image", "label": "label"}}


class Writer:
    """Frames each record's Example (made around the image bytes, never copying them
    but into the one write of the block) and keeps each Example's CRC32C for the index."""

    def __init__(self, root, k, lo, hi, spec):
        self.rel = shard_stem(k) + ".tfrecord"
        self.path = os.path.join(root, self.rel)
        self.lo, self.hi = lo, hi
        self.f = open(self.path, "wb", buffering=0)
        self.h = hashlib.sha256()
        self.pos = 0
        self.offset, self.length, self.label, self.crc = [], [], [], []

    def write(self, block):
        mv = memoryview(block.data)
        o = block.offsets.tolist()
        parts, off, ln, crcs = [], [], [], []
        pos = self.pos
        for k, lab in enumerate(block.labels.tolist()):
            img = mv[o[k]:o[k + 1]]
            head, tail = example_parts(len(img), lab)
            n = len(head) + len(img) + len(tail)
            size = struct.pack("<Q", n)
            c = crc32c(tail, crc32c(img, crc32c(head)))
            parts += [size, struct.pack("<I", masked_crc(size)), head, img, tail,
                      struct.pack("<I", _mask(c))]
            off.append(pos + 12)
            ln.append(n)
            crcs.append(c)
            pos += n + 16
        buf = b"".join(parts)
        self.h.update(buf)
        done = 0
        while done < len(buf):
            done += self.f.write(memoryview(buf)[done:])
        self.pos = pos
        self.offset.append(np.array(off, np.int64))
        self.length.append(np.array(ln, np.int64))
        self.label.append(block.labels)
        self.crc.append(np.array(crcs, np.uint32))

    def close(self):
        os.fsync(self.f.fileno())
        self.f.close()
        n = self.hi - self.lo
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
        return ShardResult(self.rel, (self.lo, self.hi), [self.rel], [self.pos],
                           np.zeros(n, np.int32), cat(self.offset, np.int64),
                           cat(self.length, np.int64), cat(self.label, np.int64),
                           self.h.hexdigest(), crc=cat(self.crc, np.uint32))

    def abort(self):
        try:
            self.f.close()
        except OSError:
            pass


def _frame(view, path, at, want=None):
    """The data of the record framed at byte ``at`` of ``path``, whose bytes from there
    on are ``view``: both CRCs checked, a short file named."""
    if len(view) < 12:
        raise HpcioError(f"{path}: truncated record at byte {at} (the file ends inside "
                         f"its length field)")
    n = int.from_bytes(view[:8], "little")
    if masked_crc(view[:8]) != int.from_bytes(view[8:12], "little"):
        raise HpcioError(f"{path}: corrupt record at byte {at}: the CRC of its length "
                         f"field does not match")
    if len(view) < n + 16:
        raise HpcioError(f"{path}: truncated record at byte {at} ({n} data bytes declared, "
                         f"the file ends {len(view) - 12} bytes later)")
    if want is not None and n != want:
        raise HpcioError(f"{path}: the record at byte {at} holds {n} bytes, the index says "
                         f"{want} (the data changed since it was indexed)")
    data = view[12:12 + n]
    if masked_crc(data) != int.from_bytes(view[12 + n:16 + n], "little"):
        raise HpcioError(f"{path}: corrupt record at byte {at}: the CRC of its {n} data "
                         f"bytes does not match")
    return data


class Native:
    """TFRecordDataset's reads (see the module docstring): a 256 KiB buffer per file,
    refilled from the next record on when records are read in order."""

    def __init__(self, ds):
        self.ds = ds
        self.fds, self.bufs, self.next = {}, {}, {}
        self.opens = 0  # files opened so far (ReaderStats.opens)

    def _fd(self, j):
        fd = self.fds.get(j)
        if fd is None:
            p = self.ds.path(j)
            try:
                fd = self.fds[j] = os.open(p, os.O_RDONLY)
            except OSError as e:
                raise HpcioError(f"{p}: {e.strerror}")
            self.opens += 1
        return fd

    def get(self, i):
        idx = self.ds.index
        j, n = int(idx.file[i]), int(idx.length[i])
        at = int(idx.offset[i]) - 12
        start, buf = self.bufs.get(j, (0, b""))
        if not (start <= at and at + n + 16 <= start + len(buf)):
            size = max(BUFFER, n + 16) if self.next.get(j, 0) == at else n + 16
            buf, start = os.pread(self._fd(j), size, at), at
            self.bufs[j] = (start, buf)
        self.next[j] = at + n + 16
        return _frame(memoryview(buf)[at - start:], self.ds.path(j), at, n)

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds, self.bufs = {}, {}


def open_native(ds):
    return Native(ds)


# ---- data made elsewhere -----------------------------------------------------------------

def frames(buf, path):
    """(data offsets, data lengths, data CRC32Cs) of every record of the TFRecord file
    whose bytes are the uint8 array ``buf``, every CRC checked: one vectorised pass where
    all records have one length (DLIO's), else a walk over the length fields."""
    size = len(buf)
    if size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint32)
    if size < 12:
        _frame(memoryview(buf), path, 0)
    first = int(buf[:8].view("<u8")[0])
    stride = first + 16
    pos = None
    if stride <= size and size % stride == 0:
        pos = np.arange(size // stride, dtype=np.int64) * stride
        if (buf[pos[:, None] + np.arange(8)].view("<u8").ravel() != first).any():
            pos = None
    mv = memoryview(buf)
    if pos is None:
        at, found = 0, []
        while at < size:
            n = int.from_bytes(mv[at:at + 8], "little") if at + 12 <= size else -1
            if n < 0 or at + n + 16 > size or masked_crc(mv[at:at + 8]) != \
                    int.from_bytes(mv[at + 8:at + 12], "little"):
                _frame(mv[at:], path, at)  # the line that says what is wrong
            found.append(at)
            at += n + 16
        pos = np.array(found, np.int64)
    length = buf[pos[:, None] + np.arange(8)].view("<u8").ravel().astype(np.int64)
    stored = buf[(pos + 8)[:, None] + np.arange(4)].view("<u4").ravel()
    p = pos.tolist()
    got = np.fromiter((crc32c(mv[a:a + 8]) for a in p), np.uint32, len(p))
    bad = np.flatnonzero(_masks(got) != stored)
    if len(bad):
        _frame(mv[p[bad[0]]:], path, p[bad[0]])
    ends = (pos + 12 + length)
    stored = buf[ends[:, None] + np.arange(4)].view("<u4").ravel()
    got = np.fromiter((crc32c(mv[a + 12:b]) for a, b in zip(p, ends.tolist())), np.uint32,
                      len(p))
    bad = np.flatnonzero(_masks(got) != stored)
    if len(bad):
        _frame(mv[p[bad[0]]:], path, p[bad[0]])
    return pos + 12, length, got


def detect(path):
    """A TFRecord file (named so, or its first length field's CRC holds), or a folder
    of ``.tfrecord`` files."""
    if os.path.isdir(path):
        try:
            return SURE if any(n.endswith(SUFFIXES) for n in os.listdir(path)) else 0
        except OSError:
            return 0
    if path.endswith(SUFFIXES):
        return SURE
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return 0
    return SURE if len(head) == 12 and masked_crc(head[:8]) == \
        int.from_bytes(head[8:], "little") else 0


def _mapped(path):
    """The bytes of ``path`` as a uint8 array (mapped; empty files too)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return np.zeros(0, np.uint8)
        return np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)


#: the feature keys (image bytes, int64 label) of the Example layouts found by themselves,
#: first match wins: DLIO's generator's, and TensorFlow's ImageNet (build_imagenet_data.py,
#: the TF models' and slim's readers)
KEYS = {"dlio": ("image", "label"), "tensorflow": ("image/encoded", "image/class/label")}


def _keys_of(buf, off, ln, images, labels, path):
    """(image key, label key) of the Examples ``buf[off:off+ln]``: the user's (``images``,
    ``labels``), else the first layout of ``KEYS`` whose image feature every record has;
    None: records of no such layout (kept as their data)."""
    if images is None:
        for image, label in KEYS.values():
            try:
                example_images(buf, off, ln, image.encode(), (labels or label).encode())
                return image, labels or label
            except ValueError:
                pass
        if labels is None:
            return None
        raise HpcioError(f"{path}: --labels {labels}: its records are not Examples with "
                         f"an image feature of a known layout ({_known()}); name it with "
                         f"--images")
    try:
        example_images(buf, off, ln, images.encode(), (labels or "label").encode())
    except ValueError:
        raise HpcioError(f"{path}: --images {images}: not every record is a "
                         f"tf.train.Example with one '{images}' bytes feature") from None
    return images, labels or "label"


def _known():
    return "; ".join(f"{n}: {i}, {lab}" for n, (i, lab) in KEYS.items())


def _compression(path, head):
    """The compression of a TFRecord file whose first bytes (``head``) are not a record:
    TFRecordOptions' GZIP (gzip's magic) or ZLIB (a zlib stream whose start inflates to
    a record's length field and its CRC), or None."""
    if head[:2] == b"\x1f\x8b":
        return "GZIP"
    try:
        got = zlib.decompressobj().decompress(head, 12)
    except zlib.error:
        return None
    return "ZLIB" if len(got) == 12 and masked_crc(got[:8]) == \
        int.from_bytes(got[8:], "little") else None


_DECOMPRESS = {"GZIP": "gzip -dc FILE > FILE.tfrecord",
               "ZLIB": "python -c \"import sys,zlib; sys.stdout.buffer.write(zlib.decompress("
                       "open(sys.argv[1],'rb').read()))\" FILE > FILE.tfrecord"}


def _refuse_compressed(buf, path):
    """A compressed TFRecord (TFRecordOptions' compression_type) refused in one line:
    readers read its records at their byte offsets, which compression hides."""
    head = bytes(buf[:1 << 12])
    if len(head) >= 12 and masked_crc(head[:8]) == int.from_bytes(head[8:12], "little"):
        return
    comp = _compression(path, head)
    if comp:
        raise HpcioError(f"{path}: a {comp}-compressed TFRecord: hpcio reads records at "
                         f"their byte offsets (decompress it first: "
                         f"{_DECOMPRESS[comp].replace('FILE', path)})")


def index(path, out, images=None, labels=None, **_):
    """Manifest and record index of TFRecord files made elsewhere (one file, or a folder
    of ``.tfrecord`` files, sorted by path), every CRC checked. Records that are all
    Examples with an image feature (the keys ``images`` and ``labels`` name, else a layout
    of ``KEYS``) are decoded to it (``container: example``), with their label; other
    records are their data as it is, unlabelled. Compressed files are refused."""
    paths = files_under(path, SUFFIXES)
    if not paths:
        raise HpcioError(f"{path}: no .tfrecord files")
    offs, lens, labs, images_at, file_of, shards, sizes = [], [], [], [], [], [], []
    keys, lo = False, 0
    for j, p in enumerate(paths):
        buf = _mapped(p)
        _refuse_compressed(buf, p)
        off, ln, _ = frames(buf, p)
        if keys is False and len(off):
            keys = _keys_of(buf, off, ln, images, labels, p)
        if not len(off):
            images_at.append((off, ln))
            labs.append(np.zeros(0, np.int64))
        elif keys:
            try:
                io, il, lab = example_images(buf, off, ln, keys[0].encode(),
                                             keys[1].encode())
            except ValueError:
                raise HpcioError(f"{p}: not every record is a tf.train.Example with one "
                                 f"'{keys[0]}' bytes feature, as those of "
                                 f"{paths[0]} are") from None
            images_at.append((io, il))
            labs.append(lab)
        offs.append(off)
        lens.append(ln)
        file_of.append(np.full(len(off), j, np.int32))
        sizes.append(len(buf))
        shards.append({"path": os.path.relpath(p, out), "records": [lo, lo + len(off)],
                       "bytes": len(buf), "sha256": sha256_file(p)})
        lo += len(off)
        del buf
    off, length = np.concatenate(offs), np.concatenate(lens)
    n = len(off)
    if n == 0:
        raise HpcioError(f"{path}: its TFRecord files hold no records")
    example = bool(keys)
    label = np.concatenate(labs) if example else np.full(n, -1, np.int64)
    file = np.concatenate(file_of)
    a, b = int(off[0]), int(length[0])
    if example:
        io = np.concatenate([x[0] for x in images_at])
        il = np.concatenate([x[1] for x in images_at])
        a, b = a + int(io[0]), int(il[0])
    with open(paths[int(file[0])], "rb") as f:  # the first record's sample
        f.seek(a)
        first = f.read(b)
    enc = pictures.sniff(first) or "raw"
    if enc != "raw":
        where = f"{paths[int(file[0])]}: record 0"
        shape = list(pictures.decode(first, enc, where=where).shape)
    else:
        shape = [len(first)]
    extra = {"tfrecord": {"record": "example" if example else "data"}}
    if example:
        extra["container"] = "example"
        extra["tfrecord"].update(image=keys[0], label=keys[1])
    files = [os.path.relpath(p, out) for p in paths]
    idx = RecordIndex(file, off, length, label, files, sizes)
    m = index_manifest("tfrecord", enc, shape, "uint8", classes_of(label), n, shards[0],
                       extra)
    m["shards"] = shards
    return m, idx
