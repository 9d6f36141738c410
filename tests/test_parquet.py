"""Parquet through pyarrow: hpcio's files and files pyarrow writes the way others write
them (PLAIN or dictionary-encoded, uncompressed or snappy, pages v1 and v2, several pages
a chunk, MLPerf Storage's multi-column dlrm and flux layouts) are indexed; the naive,
coordinated and memory readers deliver every record byte for byte, where the records lie
at offsets; records that lie compressed are read through pyarrow and the coordinated
reader refuses them in one line."""

import os

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from hpcio.data.dataset import compressed_records, open_dataset  # noqa: E402
from hpcio.datagen.importers import index_path  # noqa: E402
from hpcio.errors import HpcioError  # noqa: E402
from hpcio.formats import detect, open_native  # noqa: E402

from common.datasets import make_dataset, records_of  # noqa: E402
from common.failure import one_line  # noqa: E402
from common.inproc import run_main  # noqa: E402
from test_npz import read_all  # noqa: E402

DATAGEN = ["-m", "hpcio.datagen"]
READERS = ["naive", "coordinated", "memory"]


def samples(n, seed=0, lo=1, hi=3000):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(rng.integers(lo, hi)), np.uint8).tobytes()
            for _ in range(n)], rng.integers(0, 5, n).tolist()


def all_readers(ds, want, labels=None):
    for r in READERS:
        recs, labs = read_all(ds, r)
        assert recs == dict(enumerate(want)), r
        if labels is not None:
            assert labs == dict(enumerate(labels)), r


# ---- hpcio's files --------------------------------------------------------------------------

def test_hpcio_files_plain_at_offsets_and_read_by_pyarrow(tmp_path):
    ds = make_dataset(tmp_path, "parquet", "raw", records=37, shards=2, seed=3,
                      row_group="8")
    assert not compressed_records(ds.manifest) and len(ds.index.files) == 2
    labels, want = records_of(ds)  # the bytes at the index's offsets
    all_readers(ds, want, labels.tolist())
    got, lab = [], []
    for p in ds.paths:  # what DLIO's reader reads: the file through pyarrow
        f = pq.ParquetFile(p)
        assert {f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)
                } <= {8, 19 - 16, 18 - 16}
        t = f.read()
        got += t.column("data").to_pylist()
        lab += t.column("label").to_pylist()
    assert got == want and lab == labels.tolist()
    ds.verify_checksums()
    ds.verify_records(open_native)


def test_hpcio_snappy_is_read_through_pyarrow_only(tmp_path):
    ds = make_dataset(tmp_path, "parquet", "png", records=21, shards=1, seed=2,
                      compression="snappy")
    assert compressed_records(ds.manifest) == 21
    want = pq.read_table(ds.path(0)).column("data").to_pylist()
    for r in ("naive", "memory"):
        assert read_all(ds, r)[0] == dict(enumerate(want))
    with pytest.raises(HpcioError, match=r"21 of its 21 records lie compressed in their "
                                         r"files \(parquet compression=snappy\)"):
        read_all(ds, "coordinated")
    ds.verify_records(open_native)


# ---- files pyarrow writes as others do ------------------------------------------------------

PLAIN = dict(compression="none", use_dictionary=False)


@pytest.mark.parametrize("how", [
    dict(PLAIN, data_page_size=4096, write_batch_size=2),  # pages a chunk, nullable
    dict(PLAIN, data_page_version="2.0", write_statistics=False),
    dict(compression="snappy"),  # pyarrow's and pandas' defaults: dictionary and snappy
])
def test_index_pyarrow_files(tmp_path, how):
    want, labels = samples(40, seed=len(how))
    table = pa.table({"id": pa.array(range(40), pa.int32()),
                      "image": pa.array(want, pa.binary()),
                      "label": pa.array(labels, pa.int64())})
    os.makedirs(tmp_path / "d")
    for k, (a, b) in enumerate([(0, 25), (25, 40)]):
        pq.write_table(table.slice(a, b - a), tmp_path / "d" / f"part-{k}.parquet",
                       row_group_size=10, **how)
    assert detect(str(tmp_path / "d")).name == "parquet"
    ds = open_dataset(index_path(str(tmp_path / "d")).root)
    assert ds.records == 40 and ds.manifest["parquet"]["columns"] == ["image"]
    plain = how.get("compression") == "none"
    assert compressed_records(ds.manifest) == (0 if plain else 40)
    if plain:
        all_readers(ds, want, labels)
    else:
        for r in ("naive", "memory"):
            assert read_all(ds, r) == (dict(enumerate(want)), dict(enumerate(labels)))
        p = run_main(["-m", "hpcio.bench", "--data", ds.root, "--readers", "coordinated",
                      "--repeat", "1", "--batch", "4", "--out", str(tmp_path / "b.json")])
        assert "lie compressed in their files" in one_line(p)
    ds.verify_records(open_native)


def test_dlio_generator_files(tmp_path):
    """DLIO's generator without parquet_columns: one column ``data``, a list of the
    sample's byte values (int64), pyarrow's default codec, in DLIO's train/ folder."""
    rng = np.random.default_rng(4)
    os.makedirs(tmp_path / "train")
    recs = [rng.integers(0, 255, 64, dtype=np.uint8) for _ in range(2)]
    for k, rec in enumerate(recs):
        pq.write_table(pa.table({"data": [rec.tolist()] * 3}),
                       tmp_path / "train" / f"img_{k + 1}_of_2.parquet", row_group_size=2)
    ds = open_dataset(index_path(str(tmp_path)).root)
    assert ds.records == 6 and ds.manifest["parquet"]["columns"] == ["data"]
    assert (ds.index.label == -1).all() and compressed_records(ds.manifest) == 6
    want = [r.astype(np.int64).tobytes() for r in recs for _ in range(3)]
    assert read_all(ds, "naive")[0] == dict(enumerate(want))


def test_dlrm_and_flux_layouts_name_their_columns(tmp_path):
    """MLPerf Storage's layouts: flux's float32 lists, dlrm's columns of several types; a
    record is its row's values of the columns named, read through pyarrow."""
    rng = np.random.default_rng(1)
    t5 = rng.random((12, 6), dtype=np.float32)
    clip = rng.random((12, 3), dtype=np.float32)
    flux = pa.table({"t5": pa.array(list(t5), pa.list_(pa.float32())),
                     "clip": pa.array(list(clip), pa.list_(pa.float32())),
                     "ts": pa.array(rng.random(12, dtype=np.float32))})
    pq.write_table(flux, tmp_path / "flux.parquet", row_group_size=5)
    ds = open_dataset(index_path(str(tmp_path / "flux.parquet"), out=str(tmp_path / "f"),
                                 images="t5,clip").root)
    assert ds.manifest["parquet"]["columns"] == ["t5", "clip"]
    want = [t5[k].tobytes() + clip[k].tobytes() for k in range(12)]
    for r in ("naive", "memory"):
        assert read_all(ds, r)[0] == dict(enumerate(want))
    dlrm = pa.table({"feature_000": pa.array(rng.integers(0, 9, 12), pa.int64()),
                     "feature_001": pa.array(rng.random(12, dtype=np.float32)),
                     "feature_002": pa.array([b"x" * k for k in range(12)], pa.binary())})
    pq.write_table(dlrm, tmp_path / "dlrm.parquet")
    ds = open_dataset(index_path(str(tmp_path / "dlrm.parquet"), out=str(tmp_path / "r"),
                                 images="feature_001,feature_002").root)
    f1 = dlrm.column("feature_001").to_numpy()
    want = [f1[k].tobytes() + b"x" * k for k in range(12)]
    assert read_all(ds, "naive")[0] == dict(enumerate(want))
    ds.verify_records(open_native)


# ---- bad input --------------------------------------------------------------------------------

def test_changed_byte_caught_by_every_reader(tmp_path):
    ds = make_dataset(tmp_path, "parquet", "raw", records=12, shards=1, seed=5)
    i = 7
    with open(ds.path(0), "r+b") as f:  # same size, another byte in record 7's value
        f.seek(int(ds.index.offset[i]) + 100)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x21]))
    ds = open_dataset(ds.root)
    for r in READERS:
        with pytest.raises(HpcioError, match=rf"record {i} at byte "
                                             rf"{int(ds.index.offset[i])} .*CRC32C"):
            read_all(ds, r)


@pytest.mark.hostile
def test_bad_input_one_line(tmp_path):
    want, labels = samples(4)
    pq.write_table(pa.table({"image": want, "label": labels}), tmp_path / "ok.parquet")
    line = one_line(run_main(DATAGEN + ["index", tmp_path / "ok.parquet", "--out",
                                        tmp_path / "i", "--images", "pixels"]))
    assert "ok.parquet: no column pixels (its columns: image, label)" in line
    line = one_line(run_main(DATAGEN + ["index", tmp_path / "ok.parquet", "--out",
                                        tmp_path / "i", "--labels", "image"]))
    assert "ok.parquet: column image holds binary, not integer class labels" in line
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"\0" * 100)
    line = one_line(run_main(DATAGEN + ["index", tmp_path / "bad.parquet", "--out",
                                        tmp_path / "j"]))
    assert "bad.parquet: not a parquet file (" in line
    assert not os.path.exists(tmp_path / "i" / "hpcio.json")
    assert not os.path.exists(tmp_path / "j" / "hpcio.json")
    line = one_line(run_main(DATAGEN + ["generate", tmp_path / "g", "--format", "parquet",
                                        "--format-option", "row_group=0"]))
    assert "parquet row_group=0: must be a positive integer" in line
