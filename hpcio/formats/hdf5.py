"""HDF5: one file per shard with an ``images`` and a ``labels`` dataset.

Layouts (``hdf5.layout`` in the manifest):

* ``contiguous`` (default, raw encoding): ``images`` is (N, H, W, C) uint8, contiguous;
  record ``j`` of the shard is ``H*W*C`` bytes at ``images.id.get_offset() + j*H*W*C``.
* ``chunked`` (raw encoding, option ``chunk_records=c``): chunks of (c, H, W, C), no
  filters, so each chunk is the plain bytes of ``c`` records at its own file offset
  (``get_chunk_info``); records do not straddle chunks.
* ``blob`` (png/jpeg, variable length): ``images`` is one contiguous 1-D uint8 dataset of
  the encoded records back to back and ``offsets`` (N+1,) int64 gives record ``j`` as
  ``images[offsets[j]:offsets[j+1]]``. Each record's bytes stay contiguous in the file —
  which h5py's variable-length type (records scattered over the global heap) would not give.

``labels`` is (N,) int64. Attributes ``first_record`` and ``records`` give the shard's
record range. Native access: h5py with the default (sec2) driver, one read per sample.

``dtype float32`` (raw encoding, contiguous or chunked) is what Caffe's HDF5 data layer
reads: a ``data`` dataset (N, C, H, W) float32 of the pixels times :data:`SCALE` and a
``label`` dataset (N,) float32, as Caffe's examples write them. A record is then
``C*H*W*4`` bytes, plane after plane (manifest ``layout: chw``, ``scale``); the layer
applies no transform, so the data is stored already scaled, as convert scripts do.
"""

import gc
import os

import numpy as np

from ..data import pictures
from ..data.dataset import RecordIndex, sha256_file
from ..errors import HpcioError
from .base import SURE, FormatInfo, ShardResult, classes_of, fsync_path, index_manifest, \
    shard_stem

__all__ = ["NAME", "INFO", "Writer", "Native", "open_native", "targets", "manifest_keys",
           "record_offsets", "open_h5", "index", "detect"]

NAME = "hdf5"
COPY = 64 << 20
INFO = FormatInfo(dtypes=("uint8", "float32"), named=True)  # float32: Caffe's HDF5 data layer
#: pixel -> stored value of float32 records: Caffe's MNIST/LeNet examples scale pixels by
#: 0.00390625 (1/256, ``transform_param { scale }``); the HDF5 data layer has no transform,
#: so its data is stored pre-scaled. A power of two: every stored value is exactly px/256
SCALE = 0.00390625


def targets(k, spec):
    return [shard_stem(k) + ".h5", "." + shard_stem(k) + ".h5.blob"]


def _layout(spec):
    c = spec.options.get("chunk_records")
    if spec.encoding != "raw":
        if spec.dtype != "uint8":
            raise HpcioError(f"hdf5 --dtype {spec.dtype} stores pixels (Caffe's HDF5 "
                             f"layout) and needs raw encoding: {spec.encoding} records are "
                             f"encoded bytes, not pixels", everywhere=True)
        if c:
            raise HpcioError("hdf5 chunk_records needs raw encoding: variable-length "
                             "records would straddle chunks", everywhere=True)
        return "blob"
    return "chunked" if c else "contiguous"


def _names(spec):
    """(images, labels) dataset names: Caffe's top blobs for float32 records."""
    return ("data", "label") if spec.dtype != "uint8" else ("images", "labels")


def manifest_keys(spec):
    layout = _layout(spec)
    images, labels = _names(spec)
    keys = {"images": images, "labels": labels, "layout": layout}
    if layout == "blob":
        keys["offsets"] = "offsets"
    if layout == "chunked":
        keys["chunk_records"] = int(spec.options["chunk_records"])
    if spec.dtype != "uint8":
        return {"hdf5": keys, "layout": "chw", "scale": SCALE}
    return {"hdf5": keys}


def open_h5(path, mode="r"):
    import h5py  # h5py: its HDF5 library loads only where HDF5 is read or written
    try:
        return h5py.File(path, mode)
    except OSError as e:
        msg = str(e).splitlines()[0] if str(e) else "unreadable"
        raise HpcioError(f"{path}: not a readable HDF5 file ({msg})")


def record_offsets(dset, n, record_bytes):
    """File offset of each of the first ``n`` records of a contiguous or chunked,
    unfiltered (N, ...) dataset; raises where a record's bytes are not plain and
    contiguous in the file."""
    import h5py  # h5py: its HDF5 library loads only where HDF5 is read or written
    plist = dset.id.get_create_plist()
    layout = plist.get_layout()
    if plist.get_nfilters():
        raise HpcioError(f"{dset.name}: filtered (compressed) chunks: records are not "
                         f"plain bytes in the file")
    if layout == h5py.h5d.CONTIGUOUS:
        base = dset.id.get_offset()
        if base is None:
            raise HpcioError(f"{dset.name}: no storage allocated (empty dataset)")
        return base + np.arange(n, dtype=np.int64) * record_bytes
    if layout == h5py.h5d.CHUNKED:
        chunk = dset.chunks
        if tuple(chunk[1:]) != tuple(dset.shape[1:]):
            raise HpcioError(f"{dset.name}: chunks {chunk} split records of shape "
                             f"{dset.shape[1:]}")
        out = np.full(n, -1, dtype=np.int64)
        for c in range(dset.id.get_num_chunks()):
            info = dset.id.get_chunk_info(c)
            lo = info.chunk_offset[0]
            hi = min(lo + chunk[0], n)
            out[lo:hi] = info.byte_offset + np.arange(hi - lo, dtype=np.int64) * record_bytes
        if (out < 0).any():
            raise HpcioError(f"{dset.name}: record {int(np.argmax(out < 0))} has no "
                             f"storage (unwritten chunk)")
        return out
    raise HpcioError(f"{dset.name}: compact or virtual layout is not indexable")


def need_space(folder, nbytes):
    """Refuse before HDF5 starts writing what will not fit: HDF5's own disk-full paths
    leave half-closed objects behind (and crash on some versions)."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < nbytes + (1 << 20):
        raise HpcioError(f"{folder}: no space left on device (an HDF5 shard needs "
                         f"{nbytes} bytes, {free} free)")


class Writer:
    """Raw: writes blocks straight into the (N, H, W, C) dataset (float32: converted to
    Caffe's scaled (N, C, H, W), a block at a time). Encoded: appends to a
    temporary blob file beside the shard and makes the HDF5 file at the end, with an
    exactly sized contiguous dataset (HDF5 cannot grow a contiguous dataset). Free space is
    checked before HDF5 writes anything: its disk-full paths leave objects half-closed
    (and crash the interpreter on exit with h5py 3.16)."""

    def __init__(self, root, k, lo, hi, spec):
        self.rel = shard_stem(k) + ".h5"
        self.path = os.path.join(root, self.rel)
        self.lo, self.hi, self.n = lo, hi, hi - lo
        self.layout = _layout(spec)
        self.shape = tuple(spec.shape)
        self.caffe = spec.dtype != "uint8"
        self.names = _names(spec)
        self.item = np.dtype(spec.dtype).itemsize
        self.lengths, self.labels, self.f = [], [], None
        if self.layout == "blob":
            self.blob_path = os.path.join(root, "." + self.rel + ".blob")
            self.blob = open(self.blob_path, "wb")
            return
        h, w, c = self.shape
        dims = (c, h, w) if self.caffe else self.shape
        need_space(root, self.n * (int(np.prod(dims)) * self.item + 8))
        chunks = None
        if self.layout == "chunked":
            chunks = (min(int(spec.options["chunk_records"]), max(self.n, 1)),) + dims
        self.f = self._create()
        self.images = self.f.create_dataset(self.names[0], (self.n,) + dims,
                                            dtype=np.dtype(spec.dtype).newbyteorder("<"),
                                            chunks=chunks)
        if self.caffe:
            self.images.attrs["scale"] = SCALE

    def _create(self):
        import h5py  # h5py: its HDF5 library loads only where HDF5 is read or written
        f = h5py.File(self.path, "w", libver="earliest")
        f.attrs["first_record"] = self.lo
        f.attrs["records"] = self.n
        return f

    def write(self, block):
        if self.layout == "blob":
            self.blob.write(memoryview(block.data))
        else:
            a, b = block.lo - self.lo, block.hi - self.lo
            px = block.data.reshape((b - a,) + self.shape)
            if self.caffe:  # NHWC pixels -> NCHW, scaled, in one numpy pass
                px = np.multiply(px.transpose(0, 3, 1, 2), np.float32(SCALE),
                                 dtype=np.float32)
            self.images[a:b] = px
        self.lengths.append(block.lengths)
        self.labels.append(block.labels)

    def close(self):
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
        length, labels = cat(self.lengths) * self.item, cat(self.labels)
        self.images = None  # dataset handles go before the file (see abort)
        if self.layout == "blob":
            self.blob.close()
            offsets = np.zeros(self.n + 1, np.int64)
            np.cumsum(length, out=offsets[1:])
            total = int(offsets[-1])
            need_space(os.path.dirname(self.path), total + 24 * self.n)
            self.f = self._create()
            images = self.f.create_dataset("images", (total,), dtype="u1")
            self.f.create_dataset("offsets", data=offsets)
            with open(self.blob_path, "rb") as src:
                for pos in range(0, total, COPY):
                    images[pos:pos + COPY] = np.frombuffer(src.read(COPY), np.uint8)
            del images
            os.unlink(self.blob_path)
        self.f.create_dataset(self.names[1], data=labels.astype("<f4" if self.caffe
                                                                else "<i8"))
        # a full disk fails here, as an exception, and abort() closes what is open; a close
        # that fails with dataset handles still open crashes HDF5 (segfault)
        self.f.flush()
        self.f.close()
        self.f = None
        fsync_path(self.path)
        with open_h5(self.path) as f:
            if self.layout == "blob":
                offset = f["images"].id.get_offset() + f["offsets"][:-1] \
                    if self.n else np.zeros(0, np.int64)
            else:
                offset = record_offsets(f[self.names[0]], self.n,
                                        int(np.prod(self.shape)) * self.item) \
                    if self.n else np.zeros(0, np.int64)
        size = os.path.getsize(self.path)
        return ShardResult(self.rel, (self.lo, self.hi), [self.rel], [size],
                           np.zeros(self.n, np.int32), np.asarray(offset, np.int64), length,
                           labels, sha256_file(self.path))

    def abort(self):
        # dataset handles go before the file: freeing them after a failed close crashes
        self.images = None
        if self.f is not None:
            gc.collect()
            try:
                self.f.close()
            except Exception:
                pass
            self.f = None
            gc.collect()
        if self.layout == "blob":
            try:
                self.blob.close()
                os.unlink(self.blob_path)
            except OSError:
                pass


class Native:
    """h5py, default driver, one read per sample: ``images[j]`` (raw) or the slice of the
    blob (encoded; ``offsets`` read once on open, as a loader would)."""

    def __init__(self, ds):
        keys = ds.manifest.get("hdf5", {})
        self.names = keys.get("images", "images"), keys.get("offsets")
        self.files, self.dsets, self.offs = [], [], []
        self.starts = np.array([s["records"][0] for s in ds.manifest["shards"]], np.int64)
        for shard in ds.manifest["shards"]:
            f = open_h5(os.path.join(ds.root, shard["path"]))
            self.files.append(f)
            self.dsets.append(f[self.names[0]])
            self.offs.append(f[self.names[1]][:] if self.names[1] else None)
        self.opens = len(self.files)  # files opened so far (ReaderStats.opens)

    def get(self, i):
        s = int(np.searchsorted(self.starts, i, side="right")) - 1
        j = i - int(self.starts[s])
        off = self.offs[s]
        if off is None:
            return self.dsets[s][j].reshape(-1).view(np.uint8)  # len() = byte count
        return self.dsets[s][int(off[j]):int(off[j + 1])]

    def close(self):
        for f in self.files:
            f.close()
        self.files = []


def open_native(ds):
    return Native(ds)


def _pick(f, name, defaults, what, path):
    for cand in ([name] if name else defaults):
        if cand in f:
            return cand
    if name or what == "images":
        raise HpcioError(f"{path}: no {what} dataset ({' or '.join([name] if name else defaults)})")
    return None


def _caffe_keys(d, path):
    """Manifest keys of a 4-D float dataset, read as Caffe's HDF5 data layer reads it:
    (N, C, H, W), little-endian, pixels times the ``scale`` attribute (hpcio writes it;
    :data:`SCALE`, the one of Caffe's examples, where there is none)."""
    if d.dtype.byteorder == ">":
        raise HpcioError(f"{path}: {d.name} is big-endian {d.dtype.name}; float records "
                         f"are read as little-endian")
    return {"layout": "chw",
            "scale": float(np.asarray(d.attrs.get("scale", SCALE)).reshape(-1)[0])}


def detect(path):
    """An HDF5 file: h5py recognises it, or it starts with the signature (a file h5py
    refuses that starts with one is corrupt HDF5, this format's to report)."""
    if os.path.isdir(path):
        return 0
    import h5py  # h5py: its HDF5 library loads only where HDF5 is read or written
    try:
        if h5py.is_hdf5(path):
            return SURE
    except OSError:
        pass
    with open(path, "rb") as f:
        head = f.read(8)
    return SURE if head.startswith(b"\x89HDF") else 0


def index(path, out, images=None, labels=None, **_):
    """Manifest and record index of an HDF5 file made elsewhere: a fixed-size ``images``
    dataset (contiguous or chunked; a 4-D float one is Caffe's (N, C, H, W) ``data``), or
    a blob with ``offsets``."""
    import h5py  # h5py: its HDF5 library loads only where HDF5 is read or written
    with open_h5(path) as f:
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
            shape = list(pictures.decode(first, enc, where=f"{path}: {iname}[0]").shape) \
                if enc != "raw" else []
            extra["hdf5"].update(layout="blob", offsets="offsets")
            dtype = "uint8"
        else:
            n = d.shape[0] if d.ndim else 0
            rec = int(d.dtype.itemsize * np.prod(d.shape[1:]))
            off = record_offsets(d, n, rec)
            length = np.full(n, rec, np.int64)
            enc, shape, dtype = "raw", list(d.shape[1:]), d.dtype.name
            extra["hdf5"]["layout"] = "chunked" if d.chunks else "contiguous"
            if d.dtype.kind == "f" and d.ndim == 4:
                extra.update(_caffe_keys(d, path))
                shape = shape[1:] + shape[:1]  # C, H, W -> H, W, C
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
    return index_manifest("hdf5", enc, shape, dtype, classes_of(label), n, shard, extra), index
