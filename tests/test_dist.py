"""Ranks, devices and gradient exchange from MPI, under real mpiexec -n 2 and -n 3."""

import importlib.util
import json
import os

import pytest

from common.datasets import make_dataset
from common.failure import one_line
from common.mpi import run_mpi
from hpcio.train.dist import DISTS, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "mpi", "train_dist.py")
LR = 0.1  # the script's SGD
HOROVOD = importlib.util.find_spec("horovod") is not None


def _ranks(p):
    assert p.returncode == 0, f"{p.returncode}\n{p.stdout}\n{p.stderr}"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 1, p.stdout
    return json.loads(lines[0])


def _check_step(ranks, grad):
    """After one SGD step from the same weights, rank r holds the gradient ``grad(r)`` and
    the weights a single process gets from it: weight0 - LR * grad(r)."""
    assert len({json.dumps(r["weight0"]) for r in ranks}) == 1
    for r in ranks:
        g = grad(r["rank"])
        assert r["grad"] == [[pytest.approx(g)] * 3]
        assert r["weight"] == [pytest.approx([w - LR * g for w in r["weight0"][0]])]


@pytest.mark.parametrize("n", [2, 3])
def test_torch_ddp_from_mpi(n):
    ranks = _ranks(run_mpi(n, [SCRIPT, "torch"], timeout=120))
    assert [r["rank"] for r in ranks] == list(range(n))
    assert all(r["size"] == n and r["nodes"] == 1 and r["node"] == 0 for r in ranks)
    assert sorted(r["local_rank"] for r in ranks) == list(range(n))
    assert all(r["local_size"] == n and r["device"] == "cpu" for r in ranks)
    # d(sum(w . x))/dw with x = (rank+1) in 2 rows: 2(rank+1); DDP averages over ranks
    want = sum(2.0 * (r + 1) for r in range(n)) / n
    _check_step(ranks, lambda r: want)
    # the stop vote: one rank asked at step 5, every rank stopped at the same step
    stops = {r["stopped"] for r in ranks}
    # flag raised at step 5, sent with the vote posted at step 7, agreed at step 11
    assert len(stops) == 1 and stops.pop() == 11
    # the votes still in flight carry the flag too: settling agrees on stopping
    assert all(r["settle"] is True for r in ranks)


def test_no_dist_keeps_local_gradients():
    ranks = _ranks(run_mpi(2, [SCRIPT, "none"], timeout=120))
    _check_step(ranks, lambda r: 2.0 * (r + 1))


@pytest.mark.lane
@pytest.mark.skipif(not HOROVOD, reason="horovod not installed: make horovod "
                    "(.ci/lane-horovod builds it into .venv-horovod)")
def test_horovod_averages_gradients_in_the_step():
    ranks = _ranks(run_mpi(2, [SCRIPT, "horovod"], timeout=180))
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["size"] == 2 for r in ranks)
    _check_step(ranks, lambda r: (2.0 + 4.0) / 2)
    # the stop vote runs beside Horovod's own MPI traffic
    assert {r["stopped"] for r in ranks} == {11} and all(r["settle"] for r in ranks)


def _refused(tmp_path, args, env=None):
    """``hpcio.train`` at -n 2 refuses before making anything: exit 2, and stderr is the
    one line, with no MPI abort banner after it."""
    ds = make_dataset(tmp_path, "packed", "raw", records=16)
    out = tmp_path / "run"
    p = run_mpi(2, ["-m", "hpcio.train", "--data", ds.root, "--model", "lenet",
                    "--batch", "4", "--out", out] + args, timeout=90, env=env)
    line = one_line(p, "hpcio.train: error: --", rc=2, raw=True)
    assert not out.exists()
    return line


@pytest.mark.skipif(HOROVOD, reason="horovod is installed here")
def test_horovod_missing_is_one_line(tmp_path):
    line = _refused(tmp_path, ["--dist", "horovod"])
    assert "horovod.torch does not import (No module named 'horovod')" in line
    assert "`make horovod`" in line


@pytest.mark.lane
@pytest.mark.skipif(not os.environ.get("HPCIO_HOROVOD_NOMPI"),
                    reason="HPCIO_HOROVOD_NOMPI (a Horovod built without MPI) not set: "
                    ".ci/lane-horovod sets it")
def test_horovod_without_mpi_is_one_line(tmp_path):
    where = os.environ["HPCIO_HOROVOD_NOMPI"]
    env = {"PYTHONPATH": where + os.pathsep + os.environ["PYTHONPATH"]}
    line = _refused(tmp_path, ["--dist", "horovod"], env=env)
    assert "this Horovod was built without MPI (horovod.torch.mpi_built() is False)" in line


def test_cuda_without_a_gpu_is_one_line(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    line = _refused(tmp_path, ["--device", "cuda"])
    assert line == "hpcio.train: error: --device cuda: no CUDA device visible to 2 of 2 rank(s)"


def test_registry_and_free_port():
    assert set(DISTS) == {"torch", "horovod", "none"}
    p = free_port()
    assert 0 < p < 65536
