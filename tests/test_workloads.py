"""DLIO workload configs (``--workload``): the shipped ones read as DLIO's files say, a
config's dataset made by ``datagen`` and run by ``train`` with the AU threshold as the pass
line, what hpcio does not model said in one line, bad configs refused in one line."""

import json
import os

import pytest
import yaml

from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi
from hpcio.errors import HpcioError
from hpcio.workloads import MLPERF_AU, WORKLOADS, load

# from dlio_benchmark's configs/workload/*.yaml (the files shipped in hpcio/workloads/dlio)
DLIO = {"unet3d_h100": ("npz", 168, 1, 146600628, 7, 0.323, 90.0),
        "resnet50_a100": ("tfrecord", 1024, 1251, 114660, 400, 0.435, 90.0),
        "cosmoflow_h100": ("tfrecord", 524288, 1, 2828486, 1, 0.0035, 70.0)}


@pytest.mark.parametrize("name", sorted(DLIO))
def test_shipped_workloads_read_as_dlio_wrote_them(name):
    w = load(name)
    fmt, files, per_file, size, batch, compute, au = DLIO[name]
    assert (w.format, w.files, w.samples_per_file, w.record_bytes, w.batch,
            w.compute_time, w.au_threshold) == (fmt, files, per_file, size, batch, compute, au)
    assert w.records == files * per_file and w.epochs == 5
    side = int(w.shape().split("x")[0])
    assert side * side <= size < (side + 1) ** 2


def test_every_mlperf_training_workload_is_shipped_with_its_threshold():
    for model, au in MLPERF_AU.items():
        for acc in ("a100", "h100", "v100"):
            assert load(f"{model}_{acc}").au_threshold == au     # v100 files name none


def test_what_hpcio_does_not_model_is_listed():
    w = load("unet3d_h100")
    assert "checkpoint.epochs_between_checkpoints" in w.unmodelled
    assert "dataset.record_length_bytes_stdev" in w.unmodelled
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
    ("dataset:\n  format: parquet\n", "hpcio runs DLIO's npz, tfrecord"),
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
    assert not os.path.exists(tmp_path / "d") and len(WORKLOADS) == 9


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
