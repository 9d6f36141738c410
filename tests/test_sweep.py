"""``python -m hpcio.sweep``: real hpcio.train jobs per point, interleaved repeats, a sweep
record that says what ran and what failed, and resuming."""

import json
import os

import pytest

from common.datasets import make_dataset
from common.mpi import run_py
from hpcio.sweep import Point, points

SWEEP = ["-m", "hpcio.sweep"]


def test_points_cover_every_combination():
    pts = points(["/d/a", "/d/b"], ["naive", "coordinated"], [1, 2], ["", "shared=true"])
    assert len(pts) == 16 and len(set(pts)) == 16
    assert Point("/d/a", "coordinated", 4, "shared=true").name == \
        "a-coordinated-shared_true-n4"


@pytest.mark.mpi
@pytest.mark.slow
def test_sweep_runs_records_and_resumes(tmp_path):
    ds = make_dataset(tmp_path, "packed", "raw", records=48)
    out = tmp_path / "sweep"
    args = SWEEP + ["--data", ds.root, "--ranks", "1,2,3,7", "--reader", "naive,coordinated",
                    "--out", out, "--", "--model", "emulate", "--batch", "8",
                    "--compute-time", "0.001"]
    p = run_py(args, timeout=300)
    assert p.returncode == 1, p.stderr  # the 7-rank points cannot run: recorded, not fatal
    lines = p.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("[")]) == 8
    assert lines[-1].startswith("hpcio.sweep: 6 of 8 runs done, 2 failed")
    with open(out / "sweep.json") as f:
        doc = json.load(f)
    runs = doc["runs"]
    assert [r["point"]["ranks"] for r in runs] == [1, 2, 3, 7] * 2
    for r in runs:
        if r["point"]["ranks"] == 7:
            assert r["status"] == "failed" and "larger than the 6 records per rank" in \
                r["error"]
            with open(r["stderr"]) as f:  # kept whole, in the sweep's own logs/
                assert r["error"] in f.read()
            assert os.path.dirname(r["stderr"]) == str(out / "logs")
        else:
            assert r["status"] == "done" and 0 < r["figures"]["au_percent"] <= 100
            with open(f"{r['run_dir']}/summary.json") as f:
                assert json.load(f)["ranks"] == r["point"]["ranks"]
            with open(f"{r['run_dir']}/config.yaml") as f:
                assert "cache: cold" in f.read()
    # the same command again: done runs are skipped, the failed ones tried again
    p = run_py(args, timeout=300)
    assert "resuming" in p.stdout and "6 of 8 runs done" in p.stdout
    assert len([ln for ln in p.stdout.splitlines() if ln.startswith("[")]) == 2
    with open(out / "sweep.json") as f:
        again = json.load(f)["runs"]
    assert [r["attempts"] for r in again] == [1, 1, 1, 2] * 2
    assert again[3]["run_dir"].endswith("-a2")


def test_bad_sweeps_are_one_line(tmp_path):
    p = run_py(SWEEP + ["--ranks", "1,x", "--data", tmp_path], timeout=60)
    assert p.returncode != 0 and p.stderr.strip().splitlines() == [
        "hpcio.sweep: error: --ranks '1,x': expected a comma-separated list of integers"]
    p = run_py(SWEEP + ["--ranks", "64", "--data", tmp_path, "--", "--model", "lenet"],
               timeout=60)
    assert "only emulated compute (--model emulate) may oversubscribe" in p.stderr


def test_default_out_is_under_runs(tmp_path):
    p = run_py(SWEEP + ["--data", tmp_path, "--reader", "naive", "--dry-run"], timeout=60,
               cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f" --out {tmp_path}/runs/sweep-" in p.stdout
