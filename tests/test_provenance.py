"""provenance.json of a run (hpcio version and commit, the workload's hash, hosts, MPI,
file system) and ``python -m hpcio.results export`` of runs as rows."""

import copy
import json
import os
import shutil
import sys

import pytest
import yaml

from common.datasets import make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi, run_py
from hpcio import __version__
from hpcio.explain.export import COLUMNS, RULES, from_csv
from hpcio.measure.provenance import (WORKLOAD_KEYS, git_state, provenance, workload,
                                     workload_hash)
from hpcio.measure.rundir import RunDir

TRAIN = ["-m", "hpcio.train"]
EXPORT = ["-m", "hpcio.results", "export"]
CONFIG = {
    "data": "/scratch/me/a", "out": "/scratch/me/runs/1", "run_dir": "/scratch/me/runs/1",
    "checkpoint_dir": "/scratch/me/runs/1/checkpoints", "cache": "cold", "nodes": 2,
    "torch_threads": 4, "dataset": {"format": "lmdb", "encoding": "jpeg", "records": 1000,
                                    "shape": [32, 32, 3], "shards": 1,
                                    "record_bytes": {"min": 900, "max": 1200}},
    "dataset_bytes": 1_050_000, "batch": 32, "shuffle": "global", "seed": 0, "epochs": 2,
    "steps_per_epoch": 15, "drop_last": True, "block": 64, "window": 1024,
    "model": "emulate", "compute_time": 0.05, "compute_dist": "fixed", "compute_std": 0.0,
    "exchange": {"bytes": 100, "via": "gloo", "what": "text"}, "checkpoint_every": 0,
    "preprocess": "off", "augment": True, "offline": False, "reader": "coordinated",
    "reader_options": {"verify": "records", "prefetch": 2}, "ranks": 2,
}


# ---- in-process --------------------------------------------------------------------------

def test_workload_hash_ignores_where_and_when_and_sees_every_setting():
    base = workload_hash(CONFIG)
    assert len(base) == 64 and int(base, 16) >= 0
    elsewhere = dict(CONFIG, data="/lustre/x", out="/o", run_dir="/o", checkpoint_dir="/c",
                     nodes=1, torch_threads=1, cache="warm", time="2026")
    assert workload_hash(elsewhere) == base
    assert workload_hash(dict(reversed(list(CONFIG.items())))) == base  # key order
    for group, keys in WORKLOAD_KEYS.items():
        for key in keys:
            changed = copy.deepcopy(CONFIG)
            head, _, tail = key.partition(".")
            if tail:
                changed[head][tail] = ["changed"]
            else:
                changed[head] = ["changed"]
            assert workload_hash(changed) != base, key
    assert workload(CONFIG)["plan"]["batch"] == 32


@pytest.mark.mpi  # provenance runs git
def test_git_state_of_this_checkout_and_of_none(tmp_path):
    here = git_state()
    if os.path.exists(os.path.join(os.path.dirname(os.path.dirname(__file__)), ".git")):
        assert len(here["commit"]) == 40 and isinstance(here["dirty"], bool)
    assert git_state(str(tmp_path)) is None  # no checkout around it


@pytest.mark.mpi
def test_git_state_without_git_installed():
    p = run_py(["-c", "from hpcio.measure.provenance import git_state; print(git_state())"],
               env={"PATH": "/nonexistent"})
    assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr


@pytest.mark.mpi  # provenance runs git
def test_provenance_of_a_slurm_job_on_two_nodes():
    env = {"slurm_job_id": "42", "python": "3.11.7",
           "slurm": {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2"},
           "mpi": {"library": "MPICH Version:      5.0.2\nMPICH Release date: x"},
           "data": {"fs_type": "lustre"}, "packages": {"torch": "2.13.0", "numpy": "2.4"}}
    gathered = [("n1", 8 << 30), ("n1", 8 << 30), ("n2", 16 << 30), ("n2", 16 << 30)]
    p = provenance(env, CONFIG, gathered)
    assert p["hosts"] == [{"host": "n1", "ranks": 2, "mem_total_bytes": 8 << 30},
                          {"host": "n2", "ranks": 2, "mem_total_bytes": 16 << 30}]
    assert p["slurm"] == {"job_id": "42", "nodes": "n[1-2]", "num_nodes": "2"}
    assert p["mpi_library"] == "MPICH Version: 5.0.2" and p["data_fs_type"] == "lustre"
    assert p["ranks"] == 4 and p["workload_hash"] == workload_hash(CONFIG)
    assert p["versions"] == {"python": "3.11.7", "torch": "2.13.0", "numpy": "2.4",
                             "mpi4py": None, "darshan": None}
    traced = dict(env, darshan={"library": "/x/libdarshan.so", "version": "3.4.6"})
    assert provenance(traced, CONFIG, gathered)["versions"]["darshan"] == "3.4.6"
    assert provenance(dict(env, slurm_job_id=None), CONFIG, gathered)["slurm"] is None


def test_columns_and_rules_are_defined():
    names = [c[0] for c in COLUMNS]
    assert len(names) == len(set(names)) and all(c[2] for c in COLUMNS)
    for name in ("train_au_mean_percentage", "train_throughput_mean_samples_per_second",
                 "train_io_mean_MB_per_second", "num_accelerators", "workload_hash",
                 "category", "rules"):
        assert name in names
    assert {r[0] for r in RULES} >= {"au", "dataset_size", "repeats"}


# ---- real runs ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three 2-rank runs: a and b alike in different directories, c with another batch."""
    tmp = tmp_path_factory.mktemp("prov")
    ds = make_dataset(tmp, "packed", "raw", records=128)
    out = {}
    for name, batch in (("a", 4), ("b", 4), ("c", 8)):
        out[name] = tmp / "runs" / name
        p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "emulate", "--compute-time",
                                "0.002", "--batch", batch, "--steps", 3, "--progress", "off",
                                "--out", out[name]])
        assert p.returncode == 0, p.stderr
    return out


def _provenance(run):
    with open(os.path.join(run, RunDir.PROVENANCE)) as f:
        return json.load(f)


@pytest.mark.mpi
def test_a_run_has_its_provenance(runs):
    prov = _provenance(runs["a"])
    assert RunDir(str(runs["a"])).provenance()[0] == prov  # read back through its schema
    assert prov["hpcio_version"] == __version__
    assert prov["git"] == git_state()
    assert prov["ranks"] == 2
    assert sum(h["ranks"] for h in prov["hosts"]) == 2
    assert all(h["host"] and h["mem_total_bytes"] > 0 for h in prov["hosts"])
    with open(runs["a"] / "env.json") as f:
        env = json.load(f)
    assert sorted({h["host"] for h in prov["hosts"]}) == sorted(set(env["hosts"]))
    assert prov["data_fs_type"] == env["data"]["fs_type"] != "unknown"
    assert prov["mpi_library"] and prov["mpi_library"].split()[0] in env["mpi"]["library"]
    assert prov["slurm"] is None or prov["slurm"]["job_id"] == os.environ["SLURM_JOB_ID"]
    assert prov["versions"]["python"] == sys.version.split()[0]
    with open(runs["a"] / "config.yaml") as f:
        config = yaml.safe_load(f)
    assert prov["workload_hash"] == workload_hash(config)
    assert prov["workload"]["plan"]["batch"] == 4
    assert prov["workload"]["dataset"]["dataset.shards"] == 2


@pytest.mark.mpi
def test_same_workload_hashes_alike_another_batch_apart(runs):
    a, b, c = (_provenance(runs[k])["workload_hash"] for k in "abc")
    assert a == b != c


@pytest.mark.mpi
def test_export_json_and_csv_round_trip(runs, tmp_path):
    rows = {}
    for ext in ("json", "csv"):
        out = tmp_path / f"results.{ext}"
        p = run_main(EXPORT + [runs["a"].parent, "-o", out])  # a directory of run directories
        assert p.returncode == 0 and "3 run(s) written" in p.stdout, p.stderr
        text = out.read_text()
        rows[ext] = json.loads(text) if ext == "json" else from_csv(text)
    assert rows["json"] == rows["csv"]
    assert [r["run_dir"] for r in rows["json"]] == [str(runs[k]) for k in "abc"]
    for k, row in zip("abc", rows["json"]):
        assert list(row) == [c[0] for c in COLUMNS]
        with open(runs[k] / "summary.json") as f:
            m = json.load(f)["metrics"]
        assert row["train_au_mean_percentage"] == m["au_percent"]
        assert row["train_throughput_mean_samples_per_second"] == m["samples_per_s"]
        assert row["train_io_mean_MB_per_second"] == m["mib_per_s"]
        assert row["stall_percent"] == m["stall_percent"]
        assert row["train_au_percentage"] == [e["au_percent"] for e in m["per_epoch"]]
        assert row["num_accelerators"] == 2 and row["batch_size"] == (8 if k == "c" else 4)
        assert row["workload_hash"] == _provenance(runs[k])["workload_hash"]
        assert row["hpcio_version"] == __version__ and row["cut_short"] is False
        # a tiny dataset, 3 steps, 1 run of each workload: MLPerf would not take it
        assert row["category"] == "invalid" and row["rules"].startswith("fail: ")
        for rule in ("dataset_size: ", "steps: 3 steps per epoch < 500", "repeats: "):
            assert rule in row["rules"]
        assert "complete" not in row["rules"]


@pytest.mark.mpi
def test_export_counts_repeats_and_the_threshold(runs, tmp_path):
    out = tmp_path / "r.json"
    p = run_main(EXPORT + [runs["a"], runs["b"], "-o", out, "--au-threshold", "2"])
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())
    assert all(r["train_au_meet_expectation"] == "success" for r in rows)
    assert all("au: " not in r["rules"] for r in rows)
    assert all("repeats: 2 run(s) of this workload" in r["rules"] for r in rows)
    # a warm-up and 5 more of one workload (copies of a real run) meet the repeats rule
    copies = [runs["a"]] + [tmp_path / f"copy{i}" for i in range(5)]
    for c in copies[1:]:
        shutil.copytree(runs["a"], c)
    p = run_main(EXPORT + copies + [runs["c"], "-o", out])
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())
    assert ["repeats: " in r["rules"] for r in rows] == [False] * 6 + [True]


@pytest.mark.mpi
def test_export_of_a_run_without_provenance_or_summary(runs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(runs["a"], old)
    os.unlink(old / RunDir.PROVENANCE)
    os.unlink(old / RunDir.SUMMARY)
    out = tmp_path / "r.csv"
    p = run_main(EXPORT + [old, "-o", out])
    assert p.returncode == 0, p.stderr
    (row,) = from_csv(out.read_text())
    assert row["workload_hash"] is None and row["train_au_mean_percentage"] is None
    assert row["cut_short"] is True and row["category"] == "invalid"
    assert "complete: no usable summary.json" in row["rules"]
    assert "dataset_size: the hosts' memory is unknown" in row["rules"]
    assert "repeats: no workload_hash" in row["rules"]


@pytest.mark.mpi
@pytest.mark.parametrize("args, says", [
    (lambda t, r: [t, "-o", t / "x.json"], "neither a run nor a sweep directory"),
    (lambda t, r: [t / "nowhere", "-o", t / "x.json"], "no such directory"),
    (lambda t, r: [r, "-o", t / "x.txt"], "unknown extension '.txt'; give .json or .csv"),
    (lambda t, r: [r, "-o", t / "x"], "unknown extension '(none)'"),
    (lambda t, r: [r, "-o", t / "no" / "x.json"], "No such file or directory"),
])
def test_export_bad_input_is_one_line(runs, tmp_path, args, says):
    p = run_main(EXPORT + args(tmp_path, runs["a"]))
    line = one_line(p, "hpcio.results", rc=2)
    assert says in line, line
    assert os.listdir(tmp_path) == []


@pytest.mark.mpi
@pytest.mark.hostile
def test_export_of_bad_fields_names_them_and_exports_no_untrue_figure(runs, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(runs["a"], bad)
    prov = _provenance(bad)
    prov["hosts"] = "everywhere"
    (bad / RunDir.PROVENANCE).write_text(json.dumps(prov))
    text = (bad / RunDir.SUMMARY).read_text()
    s = json.loads(text)
    s["metrics"]["au_percent"] = float("nan")
    (bad / RunDir.SUMMARY).write_text(json.dumps(s))  # NaN, as Python's json writes it
    out = tmp_path / "r.json"
    p = run_main(EXPORT + [bad, "-o", out])
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 2, p.stderr
    assert lines[0].startswith(f"hpcio.results: {bad / RunDir.SUMMARY}: metrics.au_percent: ")
    assert lines[1].startswith(f"hpcio.results: {bad / RunDir.PROVENANCE}: hosts: ")
    (row,) = json.loads(out.read_text())
    assert row["train_au_mean_percentage"] is None and row["host_memory_GB"] is None
    assert row["train_au_meet_expectation"] is None
    assert "au: no AU in the summary" in row["rules"]
    assert row["workload_hash"] == prov["workload_hash"]  # the rest is kept
