"""npz as DLIO writes it: samples in member ``x`` of uncompressed zip archives. hpcio's
files and files made with numpy elsewhere are indexed at each sample's bytes; the naive
reader (np.load) and the coordinated reader (offsets) deliver the same bytes."""

import os
import zipfile

import numpy as np
import pytest

from hpcio.data import pictures
from hpcio.data.dataset import open_dataset
from hpcio.data.presets import PRESETS
from hpcio.datagen.importers import index_path
from hpcio.errors import HpcioError
from hpcio.formats import FORMATS, detect
from hpcio.plan import make_plan
from hpcio.readers import make_reader

from common.datasets import make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi

DATAGEN = ["-m", "hpcio.datagen"]


def read_all(ds, reader, ranks=1, rank=0):
    """{record id: bytes} and {record id: label} of one epoch through ``reader``."""
    plan = make_plan(ds.records, ranks, rank, 5, epoch=0, seed=1, shuffle="global",
                     drop_last=False)
    recs, labs = {}, {}
    with make_reader(reader, ds) as r:
        for b in r.epoch(plan):
            data = np.asarray(b.data)
            for k, i in enumerate(np.asarray(b.ids).tolist()):
                recs[i] = data[b.offsets[k]:b.offsets[k + 1]].tobytes()
                labs[i] = int(b.labels[k])
    return recs, labs


def loaded(ds, i):
    """Record ``i`` through numpy alone: np.load of its file, sample j of ``x``."""
    files = ds.index.file
    j = int(files[i])
    k = i - int(np.flatnonzero(files == j)[0])
    with np.load(ds.path(j)) as z:
        x = z["x"]
        if "offsets" in z:
            o = z["offsets"]
            return x[o[k]:o[k + 1]].tobytes()
        return (x[..., k] if ds.manifest["npz"]["axis"] else x[k]).tobytes(order="A")


@pytest.mark.parametrize("enc,per", [("raw", 1), ("raw", 4), ("png", 3), ("jpeg", 1)])
def test_round_trip_both_readers(tmp_path, enc, per):
    ds = make_dataset(tmp_path, "npz", enc, records=23, shards=2, seed=4,
                      samples_per_file=per)
    ds = open_dataset(ds.root)
    m = ds.manifest
    assert m["npz"]["samples_per_file"] == per and m["encoding"] == enc
    assert len(ds.index.files) == sum(-(-n // per) for n in (11, 12))  # per shard
    p = PRESETS["mnist"]
    px, lab = pictures.render(p.style, 4, np.arange(23), p.shape, p.classes)
    naive, nl = read_all(ds, "naive")
    coord, cl = read_all(ds, "coordinated")
    assert naive == coord and nl == cl == dict(enumerate(lab.tolist()))
    for i in range(23):
        assert naive[i] == loaded(ds, i)
        if enc != "jpeg":
            assert np.array_equal(pictures.decode(naive[i], enc, p.shape), px[i])
    ds.verify_checksums()
    ds.verify_records()
    with zipfile.ZipFile(ds.path(0)) as z:  # DLIO's layout: stored x and y
        assert {i.filename: i.compress_type for i in z.infolist()}.items() >= \
            {"x.npy": zipfile.ZIP_STORED, "y.npy": zipfile.ZIP_STORED}.items()


def test_bad_samples_per_file(tmp_path):
    with pytest.raises(HpcioError, match="samples_per_file=0: must be a positive"):
        make_dataset(tmp_path, "npz", "raw", records=4, samples_per_file=0)
    with pytest.raises(HpcioError, match="no option bogus"):
        make_dataset(tmp_path, "npz", "raw", records=4, bogus=1)


def _dlio(folder, n, shape=(20, 12), per=1, last=True, seed=0):
    """Files as DLIO's npz generator makes them: (d1, d2, per) uint8, labels 0."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    xs = []
    for f in range(n):
        x = rng.integers(0, 255, shape + (per,), dtype=np.uint8)
        if not last:
            x = np.ascontiguousarray(np.moveaxis(x, -1, 0))
        np.savez(os.path.join(folder, f"img_{f + 1}_of_{n}.npz"), x=x, y=[0] * per)
        xs.append(x)
    return xs


def test_index_dlio_files(tmp_path):
    xs = _dlio(tmp_path / "train", 7)
    assert detect(str(tmp_path / "train")).name == "npz"
    ds = index_path(str(tmp_path / "train"))
    ds = open_dataset(ds.root)
    assert ds.format == "npz" and ds.records == 7 and ds.encoding == "raw"
    assert tuple(ds.shape) == (20, 12, 1) and ds.manifest["npz"]["axis"] == -1
    naive, _ = read_all(ds, "naive")
    coord, labs = read_all(ds, "coordinated")
    assert naive == coord and set(labs.values()) == {0}
    for i, x in enumerate(xs):
        assert naive[i] == x[..., 0].tobytes()
    ds.verify_checksums()
    # indexing again: hpcio's own index.npz in the folder is not taken for data
    ds2 = index_path(str(tmp_path / "train"), force=True)
    assert ds2.records == 7


def test_index_several_samples_first_axis_and_fortran(tmp_path):
    rng = np.random.default_rng(2)
    a = rng.integers(0, 255, (5, 6, 4, 3), dtype=np.uint8)
    b = np.asfortranarray(rng.integers(0, 255, (6, 4, 3, 5), dtype=np.uint8))
    np.savez(tmp_path / "a.npz", x=a, y=np.arange(5))
    ds = index_path(str(tmp_path / "a.npz"), out=str(tmp_path / "ia"))
    assert tuple(ds.shape) == (6, 4, 3) and ds.index.label.tolist() == list(range(5))
    naive, _ = read_all(open_dataset(ds.root), "naive")
    coord, _ = read_all(open_dataset(ds.root), "coordinated")
    assert naive == coord == {k: a[k].tobytes() for k in range(5)}
    open_dataset(ds.root).verify_checksums()
    os.makedirs(tmp_path / "f")
    np.savez(tmp_path / "f" / "b.npz", x=b, y=np.arange(5))  # last axis, Fortran order
    ds = open_dataset(index_path(str(tmp_path / "f")).root)
    assert ds.manifest["npz"]["axis"] == -1
    naive, _ = read_all(ds, "naive")
    coord, _ = read_all(ds, "coordinated")
    assert naive == coord == {k: b[..., k].tobytes(order="F") for k in range(5)}


def test_index_encoded_blob_files(tmp_path):
    src = make_dataset(tmp_path, "npz", "png", records=9, shards=1, samples_per_file=4)
    ds = index_path(os.path.join(src.root, "shard-00000"), out=str(tmp_path / "i"))
    assert ds.encoding == "png" and tuple(ds.shape) == (28, 28, 1)
    assert np.array_equal(ds.index.offset, src.index.offset)
    assert np.array_equal(ds.index.crc, src.index.crc)


@pytest.mark.hostile
def test_compressed_member_refused(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    np.savez(d / "a.npz", x=np.zeros((2, 4, 4), np.uint8), y=[0, 1])
    np.savez_compressed(d / "b.npz", x=np.zeros((2, 4, 4), np.uint8), y=[0, 1])
    with pytest.raises(HpcioError, match=r"b\.npz: member x\.npy is compressed \(deflate"):
        index_path(str(d))
    p = run_main(DATAGEN + ["index", d])
    line = one_line(p)
    assert "b.npz: member x.npy is compressed" in line and "np.savez_compressed" in line


@pytest.mark.hostile
def test_last_axis_with_several_samples_read_through_numpy(tmp_path):
    """DLIO's own multi-sample npz: each sample's bytes are strided in the file, so only
    NumPy reads them: the naive and memory readers deliver them exactly (every CRC checked),
    the coordinated reader refuses in one line."""
    xs = _dlio(tmp_path / "t", 2, per=3)
    ds = index_path(str(tmp_path / "t"))
    assert ds.records == 6 and ds.manifest["shards"][0]["compressed_records"] == 6
    ds = open_dataset(ds.root)
    want = [np.ascontiguousarray(x[..., k]).tobytes() for x in xs for k in range(3)]
    plan = make_plan(6, 1, 0, 2, shuffle="none")
    for reader in ("naive", "memory"):
        with make_reader(reader, ds) as r:
            got = [bytes(b.data[b.offsets[k]:b.offsets[k + 1]]) for b in r.epoch(plan)
                   for k in range(len(b))]
        assert got == want, reader
    with pytest.raises(HpcioError, match=r"6 of its 6 records lie compressed in their files "
                                         r"\(npz compression=none, strided samples\)"):
        make_reader("coordinated", ds)


@pytest.mark.hostile
def test_member_not_an_array_and_not_a_zip(tmp_path):
    d = tmp_path / "z"
    d.mkdir()
    with zipfile.ZipFile(d / "a.npz", "w") as z:
        z.writestr("x.npy", b"not an array at all")
        z.writestr("y.npy", b"nor this")
    with pytest.raises(HpcioError, match=r"a\.npz: member x\.npy is not a \.npy array"):
        index_path(str(d))
    (d / "a.npz").write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(HpcioError, match=r"a\.npz: not an \.npz \(zip\) archive"):
        index_path(str(d))
    with zipfile.ZipFile(d / "a.npz", "w") as z:
        np.save(z.open("x.npy", "w"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(HpcioError, match=r"member x\.npy holds Python objects"):
        index_path(str(d))


@pytest.mark.hostile
def test_file_changed_after_indexing_is_caught(tmp_path):
    ds = make_dataset(tmp_path, "npz", "raw", records=8, shards=1, samples_per_file=4)
    p = ds.path(1)
    with np.load(p) as z:
        x, y = z["x"].copy(), z["y"]
    x[2] ^= 1
    np.savez(p, x=x, y=y)  # same size, other bytes
    ds = open_dataset(ds.root)
    for reader in ("naive", "coordinated"):
        with pytest.raises(HpcioError, match="CRC32C"):
            read_all(ds, reader)


@pytest.mark.mpi
def test_parallel_generate_is_the_serial_one(tmp_path):
    args = ["--format", "npz", "--records", "30", "--shards", "3",
            "--encoding", "raw", "--format-option", "samples_per_file=4", "--no-progress",
            "--seed", "2"]
    run_mpi(2, DATAGEN + ["generate", tmp_path / "p"] + args, check=True)
    p = run_main(DATAGEN + ["generate", tmp_path / "s"] + args)
    assert p.returncode == 0, p.stdout + p.stderr
    a, b = open_dataset(str(tmp_path / "p")), open_dataset(str(tmp_path / "s"))
    assert np.array_equal(a.index.crc, b.index.crc)
    assert np.array_equal(a.index.offset, b.index.offset)
    assert list(a.index.files) == list(b.index.files)


@pytest.mark.mpi
@pytest.mark.parametrize("reader", ["naive", "coordinated"])
def test_train_emulate(tmp_path, reader):
    ds = make_dataset(tmp_path, "npz", "raw", records=48, shards=2, samples_per_file=4)
    out = tmp_path / "run"
    p = run_mpi(2, ["-m", "hpcio.train", "--data", ds.root, "--model", "emulate",
                    "--reader", reader, "--batch", 4, "--steps", 3, "--epochs", 2,
                    "--compute-time", "0.002", "--out", out], timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "summary.json").exists() and "AU %" in p.stdout


def test_format_registered():
    assert FORMATS["npz"].index is not None and "samples_per_file" in \
        FORMATS["npz"].info.options
