"""Every format x encoding: the index's bytes are the records the format's own library
returns, the records are the ones (seed, id) define, and native access agrees."""

import os
import shutil
import tempfile

import h5py
import lmdb
import numpy as np
import plyvel
import pyarrow.parquet as pq
import pytest

from hpcio.data import pictures
from hpcio.data.dataset import open_dataset
from hpcio.errors import HpcioError
from hpcio.formats import FORMATS, get_format
from hpcio.formats.example import example_images
from hpcio.formats.lmdb import mapping_start, value_offsets
from hpcio.data.presets import PRESETS

from common.datasets import FORMATS_X_ENCODINGS, make_dataset


def index_bytes(ds, i):
    """Record ``i`` read with plain file I/O at the index's (file, offset, length)."""
    idx = ds.index
    with open(ds.path(idx.file[i]), "rb") as f:
        f.seek(int(idx.offset[i]))
        return f.read(int(idx.length[i]))


def library_bytes(ds, i):
    """Record ``i`` through the format's own library, independently of hpcio's readers."""
    m = ds.manifest
    shard = next(s for s in m["shards"] if s["records"][0] <= i < s["records"][1])
    j = i - shard["records"][0]
    p = os.path.join(ds.root, shard["path"])
    if ds.format == "lmdb":
        with lmdb.open(p, readonly=True, lock=False) as env, env.begin() as txn:
            return txn.get(b"%08d" % i)
    if ds.format == "leveldb":  # plyvel on a copy: opening a LevelDB writes into it
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(p, os.path.join(tmp, "db"))
            db = plyvel.DB(os.path.join(tmp, "db"))
            try:
                return db.get(b"%08d" % i)
            finally:
                db.close()
    if ds.format == "hdf5":
        with h5py.File(p, "r") as f:
            images = f[m["hdf5"]["images"]]
            if "offsets" in f:
                o = f["offsets"]
                return images[o[j]:o[j + 1]].tobytes()
            return images[j].tobytes()
    if ds.format == "images":
        lab = int(ds.index.label[i])
        ext = pictures.EXTENSIONS[ds.encoding]
        with open(os.path.join(p, f"{lab:04d}", f"{i:08d}.{ext}"), "rb") as f:
            return f.read()
    if ds.format == "npz":  # numpy alone: the shard's files in order, samples of x
        for name in sorted(os.listdir(p)):
            with np.load(os.path.join(p, name)) as z:
                if j < len(z["y"]):
                    x = z["x"]
                    if "offsets" in z:
                        return x[z["offsets"][j]:z["offsets"][j + 1]].tobytes()
                    return x[j].tobytes()
                j -= len(z["y"])
    if ds.format == "tfrecord":  # the j-th record's data, TensorFlow's framing walked
        with open(p, "rb") as f:
            data = f.read()
        at = 0
        for _ in range(j):
            at += 16 + int.from_bytes(data[at:at + 8], "little")
        return data[at + 12:at + 12 + int.from_bytes(data[at:at + 8], "little")]
    if ds.format == "parquet":  # pyarrow: the j-th row's value of the data column
        return pq.read_table(p, columns=["data"]).column("data")[j].as_py()
    with open(p, "rb") as f:  # packed: the shard is the records back to back
        data = f.read()
    before = int(ds.index.length[shard["records"][0]:i].sum())
    return data[before:before + int(ds.index.length[i])]


def native_records(ds, ids):
    """Records through ``open_native`` (what the naive reader calls), as bytes."""
    nat = FORMATS[ds.format].open_native(ds)
    try:
        return [bytes(memoryview(nat.get(i)).cast("B")) for i in ids]
    finally:
        nat.close()


@pytest.mark.parametrize("fmt,enc", FORMATS_X_ENCODINGS)
def test_index_bytes_are_the_library_records(tmp_path, fmt, enc):
    ds = make_dataset(tmp_path, fmt, enc, records=37, shards=3, seed=5)
    ds = open_dataset(ds.root)  # what readers see: checked against the files
    assert ds.records == 37 and ds.format == fmt and ds.encoding == enc
    p = PRESETS["mnist"]
    px, lab = pictures.render(p.style, 5, np.arange(37), p.shape, p.classes)
    assert np.array_equal(ds.index.label, lab)
    native = native_records(ds, range(37))  # py-lmdb opens an env once per process
    for i in range(37):
        b = index_bytes(ds, i)
        assert b == library_bytes(ds, i), i
        assert native[i] == b, i
        if ds.manifest.get("container") == "example":  # the image inside the record
            o, n, _ = example_images(np.frombuffer(b, np.uint8), [0], [len(b)])
            b = b[int(o[0]):int(o[0] + n[0])]
        if enc != "jpeg":
            assert np.array_equal(pictures.decode(b, enc, p.shape), px[i])
    m = ds.manifest
    assert m["kind"] == "hpcio-dataset" and m["preset"] == "mnist" and m["seed"] == 5
    assert [s["records"] for s in m["shards"]] == [[0, 12], [12, 24], [24, 37]]
    assert m["generator"].startswith("hpcio ")
    ds.verify_checksums()


@pytest.mark.parametrize("preset,fmt,enc", [("cifar10", "hdf5", "raw"),
                                            ("imagenet", "lmdb", "jpeg"),
                                            ("imagenet", "hdf5", "jpeg"),
                                            ("cifar10", "images", "png")])
def test_larger_pictures(tmp_path, preset, fmt, enc):
    ds = open_dataset(make_dataset(tmp_path, fmt, enc, preset=preset, records=9,
                                   shards=2).root)
    native = native_records(ds, range(9))
    for i in range(9):
        assert index_bytes(ds, i) == library_bytes(ds, i) == native[i]
    if enc == "jpeg":  # overflow pages / blob: ~110 KB records, contiguous in the file
        assert ds.index.length.mean() > 80_000


def test_hdf5_chunked_layout(tmp_path):
    ds = make_dataset(tmp_path, "hdf5", "raw", preset="cifar10", records=23, shards=2,
                      chunk_records=5)
    assert ds.manifest["hdf5"]["layout"] == "chunked"
    with h5py.File(ds.path(0), "r") as f:
        assert f["images"].chunks == (5, 32, 32, 3)
        assert f["images"].compression is None
    for i in range(23):
        assert index_bytes(ds, i) == library_bytes(ds, i)
    with pytest.raises(HpcioError, match="chunk_records needs raw"):
        make_dataset(tmp_path, "hdf5", "png", records=8, chunk_records=4)


@pytest.mark.parametrize("preset,chunk", [("mnist", None), ("cifar10", None),
                                          ("cifar10", 4)])
def test_hdf5_float32_is_caffes_layout(tmp_path, preset, chunk):
    """``dtype float32``: Caffe's HDF5 data layer's ``data`` (N, C, H, W) float32 of the
    pixels x 1/256 (exactly) and float ``label``; records of C*H*W*4 bytes whose index
    bytes are the library's, and the uint8 dataset of the same seed, transposed."""
    kw = {"chunk_records": chunk} if chunk else {}
    ds = open_dataset(make_dataset(tmp_path, "hdf5", "raw", preset=preset, records=11,
                                   shards=2, dtype="float32", **kw).root)
    u8 = make_dataset(tmp_path, "hdf5", "raw", preset=preset, records=11, shards=2)
    h, w, c = PRESETS[preset].shape
    m = ds.manifest
    assert (m["dtype"], m["layout"], m["scale"], m["shape"]) == ("float32", "chw",
                                                                  0.00390625, [h, w, c])
    assert m["hdf5"]["images"] == "data" and m["hdf5"]["labels"] == "label"
    assert m["hdf5"]["layout"] == ("chunked" if chunk else "contiguous")
    assert set(ds.index.length.tolist()) == {c * h * w * 4}
    with h5py.File(ds.path(0), "r") as f, h5py.File(u8.path(0), "r") as g:
        d = f["data"]
        assert d.shape == (5, c, h, w) and d.dtype == np.float32 and d.compression is None
        assert d.chunks == ((4, c, h, w) if chunk else None)
        assert np.array_equal(d[:] * 256, g["images"][:].transpose(0, 3, 1, 2))
        assert f["label"].dtype == np.float32
        assert np.array_equal(f["label"][:], g["labels"][:])
    native = native_records(ds, range(11))
    for i in range(11):
        assert index_bytes(ds, i) == library_bytes(ds, i) == native[i]
    assert np.array_equal(ds.index.label, u8.index.label)
    ds.verify_checksums()


def test_hdf5_contiguous_by_default(tmp_path):
    ds = make_dataset(tmp_path, "hdf5", "raw", records=10, shards=1)
    with h5py.File(ds.path(0), "r") as f:
        assert f["images"].chunks is None and f["images"].shape == (10, 28, 28, 1)
        base = f["images"].id.get_offset()
    assert list(ds.index.offset) == [base + 784 * k for k in range(10)]


def test_lmdb_offsets_from_the_process_mapping(tmp_path):
    """Offsets = value buffer address - data.mdb mapping start (/proc/self/maps); every one
    checked against the file's bytes, and overflow-page values (JPEG) included."""
    ds = make_dataset(tmp_path, "lmdb", "jpeg", preset="cifar10", records=12, shards=1)
    env_dir = os.path.join(ds.root, "shard-00000.lmdb")
    keys, off, length, _, data = value_offsets(env_dir)
    assert keys == [b"%08d" % i for i in range(12)]
    with open(data, "rb") as f:
        raw = f.read()
    with lmdb.open(env_dir, readonly=True, lock=False) as env, env.begin() as txn:
        for k, o, n in zip(keys, off, length):
            assert raw[o:o + n] == txn.get(k)
    with pytest.raises(HpcioError, match="no memory mapping"):
        mapping_start(data)  # the env is closed: no mapping left


def test_unknown_format_and_bad_shards(tmp_path):
    with pytest.raises(HpcioError, match="unknown format 'petastorm'"):
        get_format("petastorm")
    with pytest.raises(HpcioError, match="--shards must be between 1 and the record count"):
        make_dataset(tmp_path, "packed", "raw", records=3, shards=4)
    with pytest.raises(HpcioError, match="--records must be at least 1"):
        make_dataset(tmp_path, "packed", "raw", records=0, shards=1)
