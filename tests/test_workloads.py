"""DLIO workload configs (``--workload``): the shipped ones read as DLIO's files say, a
config's dataset made by ``datagen`` and run by ``train`` with the AU threshold as the pass
line, what hpcio does not model said in one line, bad configs refused in one line."""

import json
import os
import zlib

import numpy as np
import pytest
import yaml

from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi
from hpcio.errors import HpcioError
from hpcio.workloads import ACCELERATORS, MLPERF_AU, WORKLOADS, load

# from dlio_benchmark's configs/workload/*.yaml and mlcommons/storage v3.0's (the files
# shipped in hpcio/workloads/dlio)
DLIO = {"unet3d_h100": ("npz", 168, 1, 146600628, 7, 0.323, 90.0),
        "resnet50_a100": ("tfrecord", 1024, 1251, 114660, 400, 0.435, 90.0),
        "cosmoflow_h100": ("tfrecord", 524288, 1, 2828486, 1, 0.0035, 70.0)}
V3 = {"unet3d_b200": ("npz", 7200, 1, 146600628, 7, 0.162, 90.0, 68341808, 5),
      "retinanet_b200": ("jpeg", 1170301, 1, 322957, 24, 0.04755, 85.0, 0, 8),
      "retinanet_mi355": ("jpeg", 1170301, 1, 322957, 32, 0.0634, 85.0, 0, 8),
      "retinanet_h100": ("jpeg", 1743042, 1, 153600, 16, 0.180, 85.0, 51200, 5),
      "retinanet_a100": ("jpeg", 1743042, 1, 153600, 16, 0.210, 85.0, 51200, 5),
      "dlrm_b200": ("parquet", 1024, 4718592, 761, 16384, 0.000375, 70.0, 0, 1),
      "dlrm_mi355": ("parquet", 1024, 4718592, 761, 16384, 0.0005625, 70.0, 0, 1),
      "flux_b200": ("parquet", 4296, 288, 2164832, 48, 1.35, 90.0, 0, 1),
      "flux_mi355": ("parquet", 4296, 288, 2164832, 72, 2.025, 90.0, 0, 1)}


@pytest.mark.parametrize("name", sorted(DLIO))
def test_shipped_workloads_read_as_dlio_wrote_them(name):
    w = load(name)
    fmt, files, per_file, size, batch, compute, au = DLIO[name]
    assert (w.format, w.files, w.samples_per_file, w.record_bytes, w.batch,
            w.compute_time, w.au_threshold) == (fmt, files, per_file, size, batch, compute, au)
    assert w.records == files * per_file and w.epochs == 5
    side = int(w.shape().split("x")[0])
    assert side * side <= size < (side + 1) ** 2


@pytest.mark.parametrize("name", sorted(V3))
def test_v3_workloads_read_as_mlcommons_storage_wrote_them(name):
    w = load(name)
    assert (w.format, w.files, w.samples_per_file, w.record_bytes, w.batch, w.compute_time,
            w.au_threshold, w.record_stdev, w.epochs) == V3[name]
    with open(WORKLOADS[name]) as f:
        head = f.readline() + f.readline()
    assert "mlcommons/storage" in head and f"workload/{name}.yaml at " in head


def test_parquet_workloads_columns_row_groups_and_file_shuffle():
    """DLRM's 200 columns of four types come to its 761-byte row, 40 of them read; Flux's
    five float32 lists to its 2,164,832; DLIO's file shuffle alone (no sample shuffle)
    reads a file's samples in order: hpcio's chunk shuffle of whole files."""
    d, f = load("dlrm_b200"), load("flux_b200")
    assert (len(d.columns), d.row_bytes, len(d.record_columns), d.row_group) == \
        (200, 761, 40, 6144)
    assert (f.row_bytes, f.record_columns[0], f.row_group) == (2164832, "t5_encodings", None)
    o = d.train_options()
    assert (o["shuffle"], o["block"], o["window"]) == ("chunk", 4718592, 1)
    assert load("unet3d_b200").train_options()["shuffle"] == "global"
    assert not [k for k in d.unmodelled if k.startswith("dataset.")]


def test_parquet_workload_data_read_as_its_columns(tmp_path):
    """DLRM's data as DLIO's parquet generator lays it out (its columns and dtypes, row
    groups of 6,144), indexed at the folder's root: a record is its row's 40 read columns,
    160 bytes, the naive reader's bytes those pyarrow reads; the coordinated reader says in
    one line why it cannot."""
    from hpcio.data.dataset import open_dataset
    from hpcio.datagen import dlio
    from hpcio.formats import open_native
    from hpcio.readers import coordinated
    w = load("dlrm_b200")
    ds = dlio.generate(tmp_path / "d", w, records=7000)
    files = sorted(os.listdir(tmp_path / "d" / "train"))
    assert files == ["img_0_of_1.parquet"] and ds.records == 7000
    import pyarrow.parquet as pq
    pf = pq.ParquetFile(tmp_path / "d" / "train" / files[0])
    assert pf.metadata.num_row_groups == 2 and pf.metadata.num_columns == 200
    t = pf.read_row_group(1, columns=w.record_columns)
    want = b"".join(np.asarray(t.column(c)[4].as_py(), t.schema.field(c).type.to_pandas_dtype()
                               ).tobytes() for c in w.record_columns)
    native = open_native(open_dataset(str(tmp_path / "d")))
    assert len(want) == 160 and bytes(native.get(6144 + 4)) == want
    with pytest.raises(HpcioError, match="values of 40 columns"):
        coordinated.CoordinatedReader(ds, None)


def test_the_accelerator_chooses_the_models_file(tmp_path):
    from hpcio.train.options import parse_args
    assert sorted(ACCELERATORS) == ["a100", "b200", "h100", "mi355", "v100"]
    assert load("retinanet", "mi355").name == "retinanet_mi355"
    assert load("unet3d_b200", "b200").name == "unet3d_b200"
    a = parse_args(["--workload", "retinanet", "--accelerator", "b200", "--data", "x"])
    assert (a.workload, a.batch, a.compute_time) == ("retinanet_b200", 24, 0.04755)
    with pytest.raises(HpcioError, match="has no file for mi355"):
        load("unet3d", "mi355")
    with pytest.raises(HpcioError, match="is for h100, not --accelerator b200"):
        load("unet3d_h100", "b200")
    p = run_main(["-m", "hpcio.datagen", "generate", tmp_path / "d", "--workload",
                  "unet3d", "--accelerator", "tpu"])
    assert "unknown accelerator 'tpu'" in one_line(p, "hpcio.datagen")
    assert not os.path.exists(tmp_path / "d")


def test_every_mlperf_training_workload_is_shipped_with_its_threshold():
    for name in WORKLOADS:
        model = name.rsplit("_", 1)[0]
        assert load(name).au_threshold == MLPERF_AU[model]     # v100 files name none


def test_what_hpcio_does_not_model_is_listed():
    w = load("unet3d_h100")
    assert "checkpoint.epochs_between_checkpoints" in w.unmodelled
    assert "dataset.record_length_bytes_resize" in w.unmodelled    # DLIO's reader's
    assert "train.computation_time" not in w.unmodelled
    line = w.unmodelled_line("hpcio.train")
    assert "\n" not in line and line.startswith("hpcio.train: workload unet3d_h100:")


def test_dataset_scaled_down_keeps_the_samples_per_file():
    w = load("resnet50_h100")
    o = w.datagen_options(records=2600)
    assert (o["format"], o["records"], o["shards"], o["encoding"]) == ("tfrecord", 2600, 3,
                                                                      "raw")


def dlio_config(path, **over):
    """A DLIO workload config in DLIO's own layout, small enough for a test."""
    cfg = {"model": {"name": "tiny", "type": "cnn"}, "framework": "pytorch",
           "workflow": {"generate_data": False, "train": True},
           "dataset": {"data_folder": "data/tiny", "format": "hdf5", "num_files_train": 4,
                       "num_samples_per_file": 16, "record_length_bytes": 1024,
                       "record_length_bytes_stdev": 10},
           "reader": {"data_loader": "pytorch", "batch_size": 4, "read_threads": 2,
                      "sample_shuffle": "seed"},
           "train": {"epochs": 2, "computation_time": 0.002},
           "metric": {"au": 0.05}}
    for k, v in over.items():
        cfg[k] = v
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.mpi
def test_a_dlio_config_makes_its_data_and_runs_with_its_pass_line(tmp_path):
    cfg = dlio_config(tmp_path / "tiny.yaml")
    ds, out = tmp_path / "ds", tmp_path / "run"
    g = run_mpi(2, ["-m", "hpcio.datagen", "generate", ds, "--workload", cfg], check=True)
    assert g.stderr.count("not modelled") == 1 and "reader.read_threads" in g.stderr
    with open(ds / "hpcio.json") as f:
        m = json.load(f)
    assert (m["format"], m["records"], len(m["shards"]), m["encoding"]) == ("hdf5", 64, 4,
                                                                            "raw")
    assert list(m["shape"]) == [32, 32, 1]                      # 32 * 32 = 1024 bytes
    p = run_mpi(2, ["-m", "hpcio.train", "--workload", cfg, "--data", ds, "--out", out,
                    "--reader", "naive", "--progress", "off"], check=True)
    assert p.stderr.count("hpcio.train: workload tiny: not modelled") == 1
    with open(out / "summary.json") as f:
        s = json.load(f)
    assert s["workload"] == cfg and s["au_threshold_percent"] == pytest.approx(5.0)
    assert s["au_pass"] == (s["metrics"]["au_percent"] >= 5.0)
    assert (s["batch"], s["epochs_run"], s["model"]) == (4, 2, "emulate")
    assert "AU threshold of " in p.stdout and ("PASS" in p.stdout) == s["au_pass"]
    with open(out / "config.yaml") as f:
        c = yaml.safe_load(f)
    assert c["compute_time"] == 0.002 and c["shuffle"] == "global"
    assert "reader.read_threads" in c["workload_unmodelled"]
    e = run_main(["-m", "hpcio.results", "export", out, "-o", tmp_path / "r.json"])
    assert e.returncode == 0, e.stdout + e.stderr
    row, = json.loads((tmp_path / "r.json").read_text())
    assert (row["workload"], row["au_threshold_percent"]) == (cfg, pytest.approx(5.0))
    assert row["train_au_meet_expectation"] == ("success" if s["au_pass"] else "fail"), e.stderr


def test_flags_override_the_workload_and_the_data_must_be_its_format(tmp_path):
    cfg = dlio_config(tmp_path / "tiny.yaml")
    ds = tmp_path / "ds"
    g = run_main(["-m", "hpcio.datagen", "generate", ds, "--workload", cfg, "--records", 32,
                  "--format", "packed"])
    assert g.returncode == 0, g.stdout + g.stderr
    with open(ds / "hpcio.json") as f:
        m = json.load(f)
    assert (m["format"], m["records"], len(m["shards"])) == ("packed", 32, 2)
    p = run_main(["-m", "hpcio.train", "--workload", cfg, "--data", ds, "--out",
                  tmp_path / "run", "--progress", "off"])
    line = one_line(p, "hpcio.train")
    assert "reads hdf5 data" in line and "is packed" in line and "--workload" in line


def test_flags_override_the_workload_in_train_options(tmp_path):
    from hpcio.train.options import parse_args
    cfg = dlio_config(tmp_path / "tiny.yaml")
    a = parse_args(["--workload", cfg, "--data", "x", "--batch", "9", "--au-threshold",
                    "50"])
    assert (a.batch, a.au_threshold, a.compute_time, a.epochs) == (9, 50.0, 0.002, 2)
    # DLIO's step: emulate's default end, the barrier alone; an allreduce may be added
    assert a.model == "emulate" and a.preprocess == "off" and a.exchange_bytes is None
    a = parse_args(["--workload", cfg, "--data", "x", "--exchange-model", "resnet50",
                    "--exchange-fabric", "25GB/s,2us"])
    assert a.exchange_model == "resnet50" and a.exchange_fabric["latency_s"] == 2e-6


@pytest.mark.hostile
@pytest.mark.parametrize("content,expect", [
    ("model: [unclosed", "is not YAML"),
    ("model:\n  name: x\nreader:\n  batch_size: 4\n", "no dataset section"),
    ("dataset:\n  format: csv\n", "hpcio runs DLIO's npz, tfrecord"),
    ("dataset:\n  format: parquet\n  parquet:\n    columns:\n      - name: a\n"
     "        dtype: float99\n", "is not a column"),
    ("dataset:\n  format: hdf5\nreader:\n  batch_size: many\n", "reader.batch_size"),
    ("dataset:\n  format: hdf5\nmetric:\n  au: 90\n", "metric.au is a fraction"),
])
def test_bad_configs_are_one_line(tmp_path, content, expect):
    f = tmp_path / "w.yaml"
    f.write_text(content)
    with pytest.raises(HpcioError, match=expect):
        load(str(f))
    p = run_main(["-m", "hpcio.train", "--workload", f, "--data", tmp_path])
    assert expect in one_line(p, "hpcio.train")


@pytest.mark.hostile
def test_a_workload_name_not_shipped_names_those_that_are(tmp_path):
    p = run_main(["-m", "hpcio.datagen", "generate", tmp_path / "d", "--workload", "unet4d"])
    line = one_line(p, "hpcio.datagen")
    assert "unet4d" in line and "unet3d_h100" in line
    assert not os.path.exists(tmp_path / "d") and len(WORKLOADS) == 18


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["unet3d_h100", "resnet50_h100", "cosmoflow_h100"])
def test_mlperf_training_workloads_run_with_both_readers_and_are_judged(name, tmp_path):
    """Each MLPerf Storage training workload, scaled down (32 records of 16x16), made by
    datagen in its format and run by both readers: the summary judges it against its
    threshold."""
    w = load(name)
    ds = tmp_path / "ds"
    run_mpi(2, ["-m", "hpcio.datagen", "generate", ds, "--workload", name, "--records", 32,
                "--shape", "16x16x1"], check=True)
    with open(ds / "hpcio.json") as f:
        m = json.load(f)
    assert (m["format"], m["records"]) == (w.format, 32)
    for reader in ("naive", "coordinated"):
        out = tmp_path / reader
        p = run_mpi(2, ["-m", "hpcio.train", "--workload", name, "--data", ds, "--out", out,
                        "--reader", reader, "--epochs", 1, "--batch", 2, "--compute-time",
                        "0.001", "--progress", "off"], check=True)
        s = json.loads((out / "summary.json").read_text())
        assert s["workload"] == name and s["au_threshold_percent"] == w.au_threshold
        assert s["au_pass"] == (s["metrics"]["au_percent"] >= w.au_threshold)
        assert f"AU threshold of {name}: {w.au_threshold:.0f}%: " in p.stdout


# ---- data as DLIO makes it ---------------------------------------------------------------

def _records(ds):
    """Every record's bytes, as the index places them in the files (records of several
    parquet columns: as pyarrow reads them)."""
    from hpcio.data.dataset import compressed_records
    from hpcio.formats import open_native
    if compressed_records(ds.manifest):
        native = open_native(ds)
        return [bytes(native.get(i)) for i in range(len(ds.index))]
    out = []
    for i in range(len(ds.index)):
        with open(ds.path(ds.index.file[i]), "rb") as f:
            f.seek(int(ds.index.offset[i]))
            out.append(f.read(int(ds.index.length[i])))
    return out


def test_every_workloads_data_is_random_bytes_that_do_not_compress(tmp_path):
    """Two records of every shipped workload (npz and JPEG ones as DLIO's generator makes
    them, at most 256 KiB a record here; the others in hpcio's layout): fast zlib gains
    under 5%, as on DLIO's random data."""
    from dataclasses import replace

    from hpcio.data.dataset import open_dataset
    from hpcio.datagen import dlio
    ratios = {}
    for name in WORKLOADS:
        w, out = load(name), tmp_path / name
        if w.format in dlio.FORMATS:
            scale = min(1.0, (256 << 10) / w.record_bytes)
            dlio.generate(out, replace(w, record_bytes=int(w.record_bytes * scale),
                                       record_stdev=w.record_stdev * scale), records=2)
        else:
            g = run_main(["-m", "hpcio.datagen", "generate", out, "--workload", name,
                          "--records", 2, "--no-progress"])
            assert g.returncode == 0, g.stderr
        raw = b"".join(_records(open_dataset(str(out))))
        ratios[name] = len(raw) / len(zlib.compress(raw, 1))
    print("zlib level 1 ratios:", {k: round(v, 4) for k, v in ratios.items()})
    assert max(ratios.values()) < 1.05, ratios


def test_dlio_names_folders_sizes_and_npz_layout(tmp_path):
    """DLIO's names (``add_padding(i, len(str(n)))``), its folders, sizes drawn per file
    from the config's stdev, and npz files of several samples read as DLIO's readers
    read them."""
    from hpcio.data.dataset import open_dataset
    from hpcio.datagen.dlio import dims, file_names
    assert file_names(1000, "npz")[7] == "train/img_0007_of_1000.npz"
    d = dims(146600628, 68341808, 2000)
    area = d[:, 0] * d[:, 1]
    assert d.min() >= 1 and abs(area.mean() / 146600628 - 1) < 0.03 and area.std() > 2e7
    assert (dims(322957, 0, 3) == 568).all()          # int(sqrt(322957)), no stdev
    cfg = dlio_config(tmp_path / "w.yaml", dataset={
        "format": "npz", "num_files_train": 3, "num_samples_per_file": 4,
        "record_length_bytes": 4096, "record_length_bytes_stdev": 1024})
    g = run_main(["-m", "hpcio.datagen", "generate", tmp_path / "d", "--workload", cfg])
    assert g.returncode == 0, g.stderr
    assert sorted(os.listdir(tmp_path / "d" / "train")) == [
        f"img_{i}_of_3.npz" for i in range(3)] and os.listdir(tmp_path / "d" / "valid") == []
    ds = open_dataset(str(tmp_path / "d"))
    recs, shapes = _records(ds), set()
    for j, rel in enumerate(ds.index.files):
        # dlio_benchmark reader/npz_reader.py at e1919d7: open() is
        # np.load(filename, allow_pickle=True)['x'], get_sample() is [..., sample_index]
        x = np.load(tmp_path / "d" / rel, allow_pickle=True)["x"]
        assert x.ndim == 3 and x.shape[2] == 4 and x.dtype == np.uint8
        shapes.add(x.shape)
        for k in range(4):
            sample = x[..., k]
            assert sample.shape == x.shape[:2]
            # hpcio's record k: one contiguous range of the file, the same bytes
            assert recs[4 * j + k] == sample.ravel(order="K").tobytes()
    assert len(shapes) == 3                           # sizes drawn per file


def test_a_dlio_data_folder_indexes_at_its_root(tmp_path):
    """DLIO's own layout, written as its generators write it (np.savez of (d1, d2, 1) and
    labels [0]; Pillow's JPEG of random grey pixels): ``datagen index DATA`` indexes
    DATA/train."""
    from PIL import Image
    rng = np.random.default_rng(1)
    for fmt, n in (("npz", 3), ("jpeg", 4)):
        top = tmp_path / fmt
        (top / "train").mkdir(parents=True)
        (top / "valid").mkdir()
        for i in range(n):
            px = rng.integers(0, 255, size=(40 + i, 30 + 2 * i), dtype=np.uint8)
            p = top / "train" / f"img_{i}_of_{n}.{fmt}"
            if fmt == "npz":
                np.savez(p, x=px[..., None], y=[0])
            else:
                Image.fromarray(px).save(p, format="JPEG", bits=8)
        x = run_main(["-m", "hpcio.datagen", "index", top])
        assert x.returncode == 0, x.stderr
        v = run_main(["-m", "hpcio.datagen", "info", top, "--verify"])
        assert f"records {n}," in v.stdout and "checksums: ok" in v.stdout, v.stderr


def test_dlio_data_is_replaced_with_force_and_refused_without(tmp_path):
    cfg = dlio_config(tmp_path / "w.yaml", dataset={
        "format": "jpeg", "num_files_train": 2, "record_length_bytes": 1024})
    d = tmp_path / "d"
    for extra in ([], ["--force"]):
        g = run_main(["-m", "hpcio.datagen", "generate", d, "--workload", cfg] + extra)
        assert g.returncode == 0, g.stderr
    p = run_main(["-m", "hpcio.datagen", "generate", d, "--workload", cfg])
    assert p.returncode != 0 and "already holds an hpcio dataset (pass --force" in \
        p.stderr.splitlines()[-1]
    assert sorted(os.listdir(d / "train")) == ["img_0_of_2.jpeg", "img_1_of_2.jpeg"]
