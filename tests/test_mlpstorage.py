"""``hpcio.results export`` of ``--workload`` runs as MLPerf Storage's ``mlpstorage`` judges
them: the settings a run changed (CLOSED, OPEN, neither), the dataset-size rule and
``potential_caching`` per host, a warm-up and the mean of 5, and the ``--mlpstorage`` tree
mlpstorage's report generator reads. The runs are recorded fixture runs made ``--workload
resnet50_h100`` runs by their config, summary and provenance (its workload hash by
:func:`hpcio.measure.provenance.workload_hash`). The lane test (``.ci/lane-mlpstorage``) has
mlpstorage itself, installed from its source, classify the exported tree."""

import json
import os
import sys

import pytest
import yaml

from common.failure import one_line
from common.fixtures import RUNS, copy_run
from common.inproc import run_main
from common.launch import launch
from hpcio.measure.provenance import workload, workload_hash

EXPORT = ["-m", "hpcio.results", "export"]
SOURCE = "pfs-inet-lmdb-coordinated-n2"  # 2 ranks on one host, AU 98.9%
GIB = 2 ** 30
RECORDS = 1024 * 1251  # resnet50_h100: 1,024 files of 1,251 records
RECORD_BYTES = 114660
# the settings of `hpcio.train --workload resnet50_h100 --data /mnt/pfs/resnet50`
RESNET = {"workload": "resnet50_h100", "model": "emulate", "batch": 400, "epochs": 5,
          "compute_time": 0.224, "compute_dist": "fixed", "compute_std": 0.0,
          "steps": None, "shuffle": "none", "au_threshold": 90.0, "prefetch": 2,
          "checkpoint_every": 0, "preprocess": "off", "data": "/mnt/pfs/resnet50",
          "dataset_bytes": RECORDS * RECORD_BYTES}


def _run(tmp, name, mem=(16 * GIB,), rate=1000.0, **changes):
    """A finished ``--workload resnet50_h100`` run named ``name`` with ``changes`` to its
    config, hosts of ``mem`` bytes (one rank each, or both ranks on one), ``rate``
    samples/s (and rate/10 MiB/s)."""
    d = copy_run(RUNS, SOURCE, tmp / name)
    with open(os.path.join(d, "config.yaml")) as f:
        config = yaml.safe_load(f)
    config.update(RESNET)
    config["dataset"].update(records=RECORDS, shards=1024)
    for k, v in changes.items():
        config["dataset"].update(v) if k == "dataset" else config.__setitem__(k, v)
    with open(os.path.join(d, "config.yaml"), "w") as f:
        yaml.safe_dump(config, f)
    with open(os.path.join(d, "summary.json")) as f:
        summary = json.load(f)
    summary.update(batch=config["batch"], epochs_run=config["epochs"],
                   epochs_requested=config["epochs"],
                   steps_per_epoch=config["dataset"]["records"] // (config["batch"] * 2))
    summary["metrics"].update(samples_per_s=rate, mib_per_s=rate / 10)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f)
    hosts = [{"host": f"n{i}", "ranks": 2 // len(mem), "mem_total_bytes": m}
             for i, m in enumerate(mem)]
    with open(os.path.join(d, "provenance.json"), "w") as f:
        json.dump({"hpcio_version": "0.1.0", "git": None, "ranks": 2, "hosts": hosts,
                   "workload_hash": workload_hash(config), "workload": workload(config)}, f)
    return d


def _export(tmp, runs, *extra):
    out = tmp / "results.json"
    p = run_main(EXPORT + list(runs) + ["-o", out, *extra])
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


def test_settings_closed_open_and_invalid_name_the_setting(tmp_path):
    runs = [_run(tmp_path, "closed"),
            _run(tmp_path, "open", dataset={"records": 1024 * 1000}),
            _run(tmp_path, "batch", batch=16)]
    rows = _export(tmp_path, runs)
    assert [r["settings"] for r in rows] == [
        "closed-eligible settings",
        "open settings: records per file 1000 (the workload's 1251)",
        "invalid: batch 16 is not the workload's 400 (not a tunable)"]
    assert "settings:" not in rows[0]["rules"] and "settings:" not in rows[1]["rules"]
    assert "settings: batch 16 is not the workload's 400 (not a tunable)" in rows[2]["rules"]
    assert [r["category"] for r in rows] == ["invalid"] * 3  # 1 run each, not a warm-up + 5


def test_warm_up_and_the_mean_of_5_over_6_runs_of_one_workload(tmp_path):
    runs = [_run(tmp_path, f"r{i}", rate=100.0 * (i + 1)) for i in range(6)]
    rows = _export(tmp_path, runs)
    assert len({r["workload_hash"] for r in rows}) == 1
    assert [r["repeat"] for r in rows] == ["warm-up", "1", "2", "3", "4", "5"]
    assert {r["published_throughput_samples_per_second"] for r in rows} == {400.0}
    assert {r["published_io_MB_per_second"] for r in rows} == {40.0}
    assert {r["rules"] for r in rows} == {"pass"} and {r["category"] for r in rows} == \
        {"open"}
    few = _export(tmp_path, runs[:5])  # a warm-up + 4: nothing published
    assert {r["published_throughput_samples_per_second"] for r in few} == {None}


def test_min_samples_and_potential_caching_per_host(tmp_path):
    size = RECORDS * RECORD_BYTES  # 146.9 GB: 73.4 GB per host on two
    small, big = _run(tmp_path, "small"), _run(tmp_path, "big", mem=(16 * GIB, 80 * GIB))
    rows = _export(tmp_path, [small, big])
    # max(500 steps x batch 400 x 2 accelerators, 5 x memory / record length)
    assert rows[0]["min_samples"] == max(400_000, 5 * 16 * GIB * RECORDS // size) == 749_165
    assert rows[0]["potential_caching"] == [0]
    assert rows[1]["min_samples"] == 5 * 96 * GIB * RECORDS // size == 4_494_994
    assert rows[1]["potential_caching"] == [0, 1]
    assert "dataset_size: 1,024 files < 3,593 (5 x 103,079,215,104 B of host memory / " \
           "143,439,660 B per file)" in rows[1]["rules"]
    assert "dataset_size" not in rows[0]["rules"]


def test_the_mlpstorage_tree_holds_a_leaf_per_run_with_dlio_names_and_units(tmp_path):
    runs = [_run(tmp_path, "closed"), _run(tmp_path, "batch", batch=16)]
    tree = tmp_path / "mlps"
    rows = _export(tmp_path, runs, "--mlpstorage", tree, "--system", "sys1")
    leaves = sorted(os.path.dirname(os.path.join(p, f)) for p, _, fs in os.walk(tree)
                    for f in fs if f.endswith("_metadata.json"))
    assert len(leaves) == 2
    for leaf in leaves:
        rel = os.path.relpath(leaf, tree).split(os.sep)
        assert rel[:4] == ["sys1", "training", "resnet50", "run"] and len(rel) == 5
        assert sorted(os.listdir(os.path.join(leaf, "dlio_config"))) == ["config.yaml",
                                                                       "overrides.yaml"]
    by_run = {}
    for leaf in leaves:
        meta = [f for f in os.listdir(leaf) if f.endswith("_metadata.json")][0]
        with open(os.path.join(leaf, meta)) as f:
            by_run[json.load(f)["hpcio_run_dir"]] = leaf
    for row in rows:
        leaf = by_run[row["run_dir"]]
        with open(os.path.join(leaf, "summary.json")) as f:
            s = json.load(f)
        m = s["metric"]  # DLIO's "MB" is MiB, its "GB" GiB: hpcio's mib_per_s as is
        assert m["train_io_mean_MB_per_second"] == row["train_io_mean_MB_per_second"] == 100
        assert m["train_throughput_mean_samples_per_second"] == 1000
        assert m["train_au_meet_expectation"] == "success"
        assert s["host_memory_GB"] == [16.0] and s["num_accelerators"] == 2
        assert s["num_files_train"] == 1024 and s["num_samples_per_file"] == 1251
        with open(os.path.join(leaf, "dlio_config", "overrides.yaml")) as f:
            overrides = yaml.safe_load(f)
        with open(os.path.join(leaf, "dlio_config", "config.yaml")) as f:
            cfg = yaml.safe_load(f)["workload"]
        assert cfg["model"]["name"] == "resnet50" and cfg["workflow"]["train"] is True
        assert cfg["reader"]["batch_size"] == row["batch_size"]
        assert "++workload.reader.data_loader=hpcio_coordinated" in overrides
        assert "++workload.dataset.data_folder=/mnt/pfs/resnet50" in overrides
        assert ("++workload.reader.batch_size=16" in overrides) == (row["batch_size"] == 16)


@pytest.mark.parametrize("where, says", [
    (lambda tmp, run: tmp / "results.json", "exists and is not a directory"),
    (lambda tmp, run: os.path.join(run, "mlps"), "inside the run directory"),
])
def test_mlpstorage_onto_a_file_or_into_a_run_is_one_line(tmp_path, where, says):
    run = _run(tmp_path, "closed")
    out = tmp_path / "results.json"
    out.write_text("the user's\n")
    p = run_main(EXPORT + [run, "-o", tmp_path / "new.json", "--mlpstorage",
                           where(tmp_path, run)])
    line = one_line(p, "hpcio.results", rc=2)
    assert line.startswith("hpcio.results: error: --mlpstorage ") and says in line
    assert out.read_text() == "the user's\n" and not os.path.exists(tmp_path / "new.json")
    assert not os.path.exists(os.path.join(run, "mlps"))


# ---- lane: mlpstorage itself reads the tree -------------------------------------------

MLPSTORAGE_PYTHON = os.environ.get("HPCIO_MLPSTORAGE_PYTHON")
CLASSIFY = """
import json, sys
from mlpstorage.reporting import ReportGenerator
r = ReportGenerator(sys.argv[1])
json.dump({str(x.benchmark_run.run_id): x.category.value for x in r.results},
          open(sys.argv[2], "w"))
"""


@pytest.mark.lane
@pytest.mark.skipif(not MLPSTORAGE_PYTHON, reason="HPCIO_MLPSTORAGE_PYTHON (the python of "
                    "a venv with mlpstorage) is not set: .ci/lane-mlpstorage sets it")
def test_mlpstorage_classifies_each_run_as_hpcio_rules_did(tmp_path):
    """mlpstorage says INVALID where hpcio's settings or dataset_size rule fails, else
    OPEN (hpcio's reader is DLIO's data loader changed: an OPEN tunable at best)."""
    runs = [_run(tmp_path, "closed"),
            _run(tmp_path, "open", dataset={"records": 1024 * 1000}),
            _run(tmp_path, "batch", batch=16),
            _run(tmp_path, "epochs", epochs=2),
            _run(tmp_path, "compute", compute_time=0.1),
            _run(tmp_path, "big", mem=(16 * GIB, 80 * GIB))]
    tree = tmp_path / "mlps"
    rows = _export(tmp_path, runs, "--mlpstorage", tree)
    got = tmp_path / "verdicts.json"
    p = launch([MLPSTORAGE_PYTHON, "-c", CLASSIFY, tree, got], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    verdicts = {}
    for leaf, category in json.loads(got.read_text()).items():
        meta = [f for f in os.listdir(leaf) if f.endswith("_metadata.json")][0]
        with open(os.path.join(leaf, meta)) as f:
            verdicts[json.load(f)["hpcio_run_dir"]] = category
    want = {r["run_dir"]: "invalid" if "settings:" in r["rules"] or "dataset_size:" in
            r["rules"] else "open" for r in rows}
    assert verdicts == want, p.stdout
    assert sorted(want.values()) == ["invalid"] * 4 + ["open"] * 2
    print(f"mlpstorage agrees on {len(want)} runs: {sys.version.split()[0]}")
