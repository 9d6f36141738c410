"""Imports of data the user has, and indexes of datasets made elsewhere (a Caffe-style
LMDB of Datums, HDF5 files, image folders): the index's bytes are the records the format's
library returns; broken inputs are one line."""

import gzip
import os
import pickle

import h5py
import lmdb
import numpy as np
import pytest

from hpcio.data import pictures
from hpcio.data.dataset import open_dataset
from hpcio.errors import HpcioError
from hpcio.formats import FORMATS
from hpcio.formats.datum import make_datum, parse_datum
from hpcio.datagen.importers import import_data, index_path, load_cifar10, load_mnist
from hpcio.data.presets import PRESETS
from hpcio.plan import make_plan
from hpcio.readers import make_reader
from hpcio.train.decode import decode_records

from common.datasets import records_of
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi

DG = ["-m", "hpcio.datagen"]


def draw(name, n, seed=0):
    p = PRESETS[name]
    return pictures.render(p.style, seed, np.arange(n), p.shape, p.classes)


def native_records(ds):
    nat = FORMATS[ds.format].open_native(ds)
    try:
        return [bytes(memoryview(nat.get(i)).cast("B")) for i in range(ds.records)]
    finally:
        nat.close()


def fails(p, *words):
    line = one_line(p)
    for w in words:
        assert w in line, line


# ---- imports --------------------------------------------------------------------------------

def write_idx(path, arr, gz=False):
    head = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(data)


def test_import_mnist_idx(tmp_path):
    x, y = draw("mnist", 30)
    src = tmp_path / "mnist"
    src.mkdir()
    write_idx(src / "train-images-idx3-ubyte.gz", x[..., 0], gz=True)
    write_idx(src / "train-labels-idx1-ubyte.gz", y)
    px, lab = load_mnist(str(src))
    assert np.array_equal(px, x) and np.array_equal(lab, y)
    p = run_mpi(2, DG + ["import", "mnist", src, tmp_path / "out", "--format", "hdf5",
                         "--encoding", "raw", "--shards", 2])
    assert p.returncode == 0, p.stderr
    ds = open_dataset(tmp_path / "out")
    labels, recs = records_of(ds)
    assert np.array_equal(labels, y)
    assert all(np.array_equal(pictures.decode(r, "raw", (28, 28, 1)), x[i])
               for i, r in enumerate(recs))
    assert ds.manifest["source"] == "import" and ds.manifest["import_kind"] == "mnist"
    (src / "train-labels-idx1-ubyte.gz").write_bytes(b"\x00\x00\x08\x01\x00\x00")
    fails(run_main(DG + ["import", "mnist", src, tmp_path / "o2"]), "train-labels", "idx")


def test_import_cifar10_batches(tmp_path):
    x, y = draw("cifar10", 24)
    planes = x.transpose(0, 3, 1, 2).reshape(24, 3072)  # CIFAR rows: R, G, B planes
    py_dir, bin_dir = tmp_path / "py", tmp_path / "bin"
    py_dir.mkdir()
    bin_dir.mkdir()
    for k, sl in enumerate([slice(0, 12), slice(12, 24)], 1):
        with open(py_dir / f"data_batch_{k}", "wb") as f:
            pickle.dump({b"data": planes[sl], b"labels": y[sl].tolist(),
                         b"batch_label": b"x"}, f, protocol=2)
        rows = np.concatenate([y[sl, None].astype(np.uint8), planes[sl]], 1)
        (bin_dir / f"data_batch_{k}.bin").write_bytes(rows.tobytes())
    for src in (py_dir, bin_dir):
        px, lab = load_cifar10(str(src))
        assert np.array_equal(px, x) and np.array_equal(lab, y)
    ds = import_data("cifar10", str(py_dir), str(tmp_path / "out"), format="lmdb",
                     encoding="png", shards=3)
    labels, recs = records_of(ds)
    assert np.array_equal(labels, y)
    assert all(np.array_equal(pictures.decode(r, "png"), x[i]) for i, r in enumerate(recs))
    assert native_records(ds) == recs
    # a pickle that would run code is refused, not executed
    with open(py_dir / "data_batch_1", "wb") as f:
        f.write(b"cos\nsystem\n(S'echo pwned'\ntR.")
    with pytest.raises(HpcioError, match="not a CIFAR-10 python batch"):
        load_cifar10(str(py_dir))


def make_folder(root, n=12, classes=("cat", "dog", "eel"), enc="png"):
    x, _ = draw("cifar10", n)
    paths = []
    for i in range(n):
        d = root / classes[i % len(classes)]
        d.mkdir(parents=True, exist_ok=True)
        data, _ = pictures.encode(x[i:i + 1], enc)
        p = d / f"img{i:03d}.{pictures.EXTENSIONS[enc]}"
        p.write_bytes(data.tobytes())
        paths.append(p)
    return x, paths


def test_import_folder_keeps_or_reencodes(tmp_path):
    x, paths = make_folder(tmp_path / "src")
    ds = import_data("folder", str(tmp_path / "src"), str(tmp_path / "keep"),
                     format="packed", shards=2)
    assert ds.encoding == "png" and ds.manifest["class_names"] == ["cat", "dog", "eel"]
    order = sorted(paths, key=lambda p: (p.parent.name, p.name))  # ImageFolder order
    labels, recs = records_of(ds)
    assert recs == [p.read_bytes() for p in order]
    assert labels.tolist() == [["cat", "dog", "eel"].index(p.parent.name) for p in order]
    p = run_mpi(2, DG + ["import", "folder", tmp_path / "src", tmp_path / "raw",
                         "--encoding", "raw", "--format", "hdf5"])
    assert p.returncode == 0, p.stderr
    raw = open_dataset(tmp_path / "raw")
    _, rr = records_of(raw)
    assert [pictures.decode(r, "raw", (32, 32, 3)).tobytes() for r in rr] == \
        [pictures.decode(p.read_bytes(), "png").tobytes() for p in order]


def test_folder_with_an_unreadable_image(tmp_path):
    make_folder(tmp_path / "src", n=6)
    (tmp_path / "src" / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    fails(run_main(DG + ["import", "folder", tmp_path / "src", tmp_path / "o",
                           "--encoding", "raw"]), "broken.png", "unreadable image")
    (tmp_path / "src" / "dog" / "broken.png").write_bytes(b"not an image at all")
    fails(run_main(DG + ["index", tmp_path / "src"]), "broken.png", "unreadable image")
    assert not (tmp_path / "src" / "hpcio.json").exists()


# ---- indexes --------------------------------------------------------------------------------

def make_caffe_lmdb(path, n=10, encoded=True):
    """Like Caffe's convert_imageset: keys '%08d_<file name>', Datum values."""
    x, y = draw("cifar10", n)
    with lmdb.open(str(path), map_size=64 << 20) as env, env.begin(write=True) as txn:
        for i in range(n):
            if encoded:
                data, _ = pictures.encode(x[i:i + 1], "jpeg")
                datum = make_datum(data.tobytes(), int(y[i]), encoded=True)
            else:  # Caffe's raw Datum: CHW bytes
                datum = make_datum(x[i].transpose(2, 0, 1).tobytes(), int(y[i]), 3, 32, 32)
            txn.put(b"%08d_n01440764/img_%d.JPEG" % (i, i), datum)
    return x, y


@pytest.mark.parametrize("encoded", [True, False])
def test_index_caffe_lmdb(tmp_path, encoded):
    env = tmp_path / "train_lmdb"
    x, y = make_caffe_lmdb(env, encoded=encoded)
    p = run_main(DG + ["index", env])
    assert p.returncode == 0 and "format lmdb" in p.stdout, p.stderr
    ds = open_dataset(env)
    assert ds.manifest["lmdb"]["value"] == "datum" and ds.manifest["lmdb"]["keys"] == "keys.npy"
    assert ds.encoding == ("jpeg" if encoded else "raw")
    assert ds.shape == (32, 32, 3) and np.array_equal(ds.index.label, y)
    labels, recs = records_of(ds)
    with lmdb.open(str(env), readonly=True, lock=False) as e, e.begin() as txn:
        for i, (k, v) in enumerate(txn.cursor()):
            o, n, lab = parse_datum(v)
            assert recs[i] == v[o:o + n] and lab == y[i]
    assert native_records(ds) == recs
    ds.verify_checksums()
    fails(run_main(DG + ["index", env]), "already holds an hpcio manifest")
    assert run_main(DG + ["index", env, "--force"]).returncode == 0
    assert sorted(os.listdir(env)) == ["data.mdb", "hpcio.json", "index.npz", "keys.npy",
                                       "lock.mdb"]


def test_raw_datums_decode_channel_major(tmp_path):
    """Caffe stores a raw Datum plane after plane (CHW): the index says so and the pipeline
    gives back the original pixels, not CHW bytes read as HWC."""
    env = tmp_path / "raw_lmdb"
    x, _ = make_caffe_lmdb(env, n=4, encoded=False)
    ds = index_path(str(env))
    assert ds.manifest["layout"] == "chw" and ds.shape == (32, 32, 3)
    reader = make_reader("memory", ds)
    plan = make_plan(ds.records, 1, 0, 4, shuffle="none")
    batch = next(iter(reader.epoch(plan)))
    assert np.array_equal(decode_records(batch, ds.manifest), x[:4])
    reader.close()


def test_index_plain_lmdb_values(tmp_path):
    env = tmp_path / "kv"
    with lmdb.open(str(env), map_size=16 << 20) as e, e.begin(write=True) as txn:
        for i in range(7):
            txn.put(b"%08d" % i, bytes([i]) * (100 + i))
    ds = index_path(str(env))
    assert ds.manifest["lmdb"]["value"] == "record" and ds.manifest["lmdb"]["key"] == "%08d"
    assert (ds.index.label == -1).all() and "not Caffe Datums" in ds.manifest["note"]
    _, recs = records_of(ds)
    assert recs == [bytes([i]) * (100 + i) for i in range(7)]
    assert native_records(ds) == recs


@pytest.mark.parametrize("chunks", [None, (4, 28, 28, 1)])
def test_index_hdf5(tmp_path, chunks):
    x, y = draw("mnist", 10)
    f5 = tmp_path / "data" / "train.h5"
    f5.parent.mkdir()
    with h5py.File(f5, "w") as f:
        f.create_dataset("images", data=x, chunks=chunks)
        f.create_dataset("labels", data=y.astype(np.float32))  # Caffe stores float labels
    ds = index_path(str(f5))
    assert ds.root == str(f5.parent) and ds.manifest["hdf5"]["layout"] == \
        ("chunked" if chunks else "contiguous")
    labels, recs = records_of(ds)
    assert np.array_equal(labels, y) and recs == [x[i].tobytes() for i in range(10)]
    assert native_records(ds) == recs


@pytest.mark.parametrize("preset,chunks,scale", [("mnist", None, None),
                                                 ("cifar10", (4, 3, 32, 32), 1 / 255)])
def test_index_caffe_float32_hdf5(tmp_path, preset, chunks, scale):
    """A file as Caffe's convert scripts write it for the HDF5 data layer (h5py directly:
    ``data`` N x C x H x W float32 pixels x scale, ``label`` float32) is indexed as
    float32 channel-major records of C*H*W*4 bytes, with the file's ``scale`` attribute
    (Caffe's 1/256 where it has none), and decodes to the pixels it was made from."""
    x, y = draw(preset, 10)
    h, w, c = x.shape[1:]
    data = (x.transpose(0, 3, 1, 2) * np.float32(scale or 0.00390625)).astype(np.float32)
    f5 = tmp_path / "caffe" / "train.h5"
    f5.parent.mkdir()
    with h5py.File(f5, "w") as f:
        f.create_dataset("data", data=data, chunks=chunks)
        f.create_dataset("label", data=y.astype(np.float32))
        if scale:
            f["data"].attrs["scale"] = scale
    ds = index_path(str(f5))
    m = ds.manifest
    assert (m["dtype"], m["layout"], m["shape"], m["encoding"]) == ("float32", "chw",
                                                                     [h, w, c], "raw")
    assert m["scale"] == (scale or 0.00390625)
    assert m["hdf5"]["images"] == "data" and m["hdf5"]["labels"] == "label"
    assert set(ds.index.length.tolist()) == {c * h * w * 4}
    labels, recs = records_of(ds)
    assert np.array_equal(labels, y) and recs == [data[i].tobytes() for i in range(10)]
    assert native_records(ds) == recs
    with make_reader("memory", ds) as r:
        batch = next(iter(r.epoch(make_plan(10, 1, 0, 4, shuffle="none"))))
    got = decode_records(batch, m)  # (N, H, W, C) float32, as stored
    assert got.dtype == np.float32 and np.array_equal(got, data[:4].transpose(0, 2, 3, 1))


def test_index_image_folder(tmp_path):
    x, paths = make_folder(tmp_path / "imgs", n=9, enc="jpeg")
    p = run_mpi(2, DG + ["index", tmp_path / "imgs"])
    assert p.returncode == 0, p.stderr
    ds = open_dataset(tmp_path / "imgs")
    assert ds.encoding == "jpeg" and ds.classes == 3
    _, recs = records_of(ds)
    assert sorted(recs) == sorted(p.read_bytes() for p in paths)
    assert native_records(ds) == recs
    ds.verify_checksums()


def test_corrupt_and_truncated_inputs_to_index(tmp_path):
    env = tmp_path / "env"
    make_caffe_lmdb(env, n=40)
    data = env / "data.mdb"
    size = data.stat().st_size
    os.truncate(data, size // 2)
    fails(run_main(DG + ["index", env]), "data.mdb", "truncated")
    data.write_bytes(b"\xde\xad" * 8192)
    fails(run_main(DG + ["index", env]), "not a readable LMDB")
    f5 = tmp_path / "h" / "t.h5"
    f5.parent.mkdir()
    x, y = draw("mnist", 20)
    with h5py.File(f5, "w") as f:
        f.create_dataset("images", data=x)
        f.create_dataset("labels", data=y)
    os.truncate(f5, f5.stat().st_size - 4000)
    fails(run_main(DG + ["index", f5]), "t.h5", "not a readable HDF5")
    f5.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    fails(run_main(DG + ["index", f5]), "t.h5", "not a readable HDF5")
    with h5py.File(f5, "w") as f:
        f.create_dataset("images", data=x, compression="gzip", chunks=(2, 28, 28, 1))
    fails(run_main(DG + ["index", f5]), "compressed")
    fails(run_main(DG + ["index", tmp_path / "nothing-here"]), "no such file")
    with h5py.File(f5, "w") as f:  # Caffe's N x C x H x W, but big-endian
        f.create_dataset("data", data=np.zeros((20, 1, 28, 28), ">f4"))
        f.create_dataset("label", data=y.astype(np.float32))
    fails(run_main(DG + ["index", f5]), "t.h5", "big-endian float32", "little-endian")
    assert sorted(os.listdir(f5.parent)) == ["t.h5"]  # no manifest, no index
