"""The reader benchmark under mpiexec: every reader and limit measured, cold really cold
and warm really warm, ratios against the sequential read of the same run, JSON written."""

import json
import os

import pytest

from hpcio.explain.benchtable import summarize
from hpcio.bench import parse_reader
from hpcio.errors import HpcioError

from common.datasets import make_dataset
from common.inproc import run_main
from common.mpi import run_mpi
from common.launch import launch


def test_parse_reader():
    label, name, opts = parse_reader("coordinated:collective=false:prefetch=3:"
                                     "hint.cb_config_list=*:*:hint.cb_nodes=2")
    assert name == "coordinated"
    assert opts == {"collective": False, "prefetch": 3,
                    "hints": {"cb_config_list": "*:*", "cb_nodes": "2"}}
    with pytest.raises(HpcioError, match="unknown reader"):
        parse_reader("fast")


def test_summarize_ratio_and_spread():
    runs = [dict(dataset="d", cache="cold", shuffle="none", what=w, repeat=r, mb_s=v,
                 rec_s_rank=1.0)
            for r, (s, c) in enumerate([(100, 90), (200, 190), (100, 95)])
            for w, v in (("seq", s), ("seq-ranks", 2 * s), ("coordinated", c))]
    rows = {r["what"]: r for r in summarize(runs)}
    med, lo, hi = rows["coordinated"]["x_seq"]
    assert (med, lo, hi) == (0.95, 0.9, 0.95)
    assert rows["coordinated"]["x_seq_ranks"] == (0.475, 0.45, 0.475)
    assert rows["seq"]["x_seq"][0] == 1.0 and rows["seq"]["x_seq_ranks"][0] == 0.5


def test_bench_runs_every_reader_and_limit(tmp_path_factory, tmp_path):
    ds = make_dataset(tmp_path_factory.getbasetemp() / "bench-data", "lmdb", "raw",
                      records=400, shards=2, seed=4)
    out = tmp_path / "bench.json"
    p = run_mpi(2, ["-m", "hpcio.bench", "--data", ds.root, "--readers",
                    "naive,coordinated,memory,coordinated:mechanism=nonblocking",
                    "--cache", "cold,warm", "--shuffle", "none,global", "--batch", "16",
                    "--repeat", "2", "--warmup-steps", "2", "--wait-quiet", "0",
                    "--out", out], timeout=180)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    runs = doc["runs"]
    whats = {r["what"] for r in runs}
    assert {"seq", "seq-ranks", "random", "naive", "coordinated", "memory",
            "coordinated:mechanism=nonblocking"} <= whats
    # seq is one stream (rank 0 reads every byte), seq-ranks splits the bytes
    for r in runs:
        if r["what"] in ("seq", "seq-ranks") and "mb_s" in r:
            assert r["bytes"] == doc["meta"]["datasets"][ds.root.rsplit("/", 1)[-1]][
                "file_bytes"]
    assert doc["meta"]["limits"]["seq"].startswith("One stream")
    assert doc["meta"]["ratios"]["x_seq_ranks"].endswith("seq-ranks (same repeat)")
    # the order of a group's runs is rotated between repeats
    order = [r["what"] for r in runs if r["cache"] == "cold" and r["shuffle"] == "none"]
    half = len(order) // 2
    assert order[:half] != order[half:] and sorted(order[:half]) == sorted(order[half:])
    for r in runs:
        if "mb_s" not in r:
            continue
        assert r["resident"] < 0.05 if r["cache"] == "cold" else r["resident"] == 1.0
        if r["what"] in ("naive", "coordinated", "memory"):
            per_epoch = (400 // (2 * 16)) * 2 * 16
            assert r["records"] == per_epoch and r["bytes"] == per_epoch * 784
            assert r["mb_s"] > 0 and r["x_seq"] > 0
    assert "read_ahead_kb" in doc["meta"]["datasets"][ds.root.rsplit("/", 1)[-1]]
    assert "x seq" in p.stdout and "x ranks" in p.stdout and "coordinated" in p.stdout
    assert all(r["quiet"] is None for r in runs)  # --wait-quiet 0: not waited for
    assert len([r for r in doc["summary"] if r["what"] == "random"]) == 2  # global only


def test_bench_gpu_without_a_gpu_is_one_line():
    import sys

    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: benchmarks/bench_gpu.py would run")
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks", "bench_gpu.py")
    p = launch([sys.executable, script], timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "hpcio: error: no CUDA device visible: bench_gpu needs an NVIDIA GPU"]


def test_bench_writes_into_runs_and_never_over_a_result(tmp_path):
    ds = make_dataset(tmp_path / "d", "packed", "raw", records=128)
    args = ["-m", "hpcio.bench", "--data", ds.root, "--readers", "memory", "--cache",
            "warm", "--shuffle", "none", "--repeat", "1", "--limits", "seq"]
    p = run_main(args + ["--wait-quiet", "0.5"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    made = os.listdir(tmp_path / "runs")
    assert len(made) == 1 and made[0].startswith("bench-") and made[0].endswith(".json")
    out = tmp_path / "runs" / made[0]
    runs = json.loads(out.read_text())["runs"]  # each run waited for a quiet second, or 0.5 s
    assert runs and all(set(r["quiet"]) == {"cpu", "disk_mib_s", "quiet", "waited_s"}
                        for r in runs)
    before = out.read_text()
    p = run_main(args + ["--out", out], cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip() == f"hpcio.bench: error: --out {out} exists (--force replaces it)"
    assert out.read_text() == before
    p = run_main(args + ["--out", out, "--force"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["runs"]


def test_every_column_of_the_table_is_defined_under_it():
    from hpcio.explain.benchtable import COLUMNS, table
    text = table([])
    head, legend = text.splitlines()[0], text.split("\n\n", 1)[1]
    named = ["rec/s/rank", "MB/s", "x seq", "x ranks", "[min..max]", "dev/rec", "stall s",
             "res", "load"]
    assert all(c in head for c in named) and set(named) == set(COLUMNS)
    assert all(f"{c}  {COLUMNS[c]}" in legend for c in named)
