"""Ranks, devices and gradient exchange from MPI, under real mpiexec -n 2 and -n 3."""

import importlib.util
import json
import os

import pytest

from common.mpi import run_mpi
from hpcio.train.dist import DISTS, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "mpi", "train_dist.py")


def _ranks(p):
    assert p.returncode == 0, f"{p.returncode}\n{p.stdout}\n{p.stderr}"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 1, p.stdout
    return json.loads(lines[0])


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_torch_ddp_from_mpi(n):
    ranks = _ranks(run_mpi(n, [SCRIPT, "torch"], timeout=120))
    assert [r["rank"] for r in ranks] == list(range(n))
    assert all(r["size"] == n and r["nodes"] == 1 and r["node"] == 0 for r in ranks)
    assert sorted(r["local_rank"] for r in ranks) == list(range(n))
    assert all(r["local_size"] == n and r["device"] == "cpu" for r in ranks)
    # d(sum(w . x))/dw with x = (rank+1) in 2 rows: 2(rank+1); DDP averages over ranks
    want = sum(2.0 * (r + 1) for r in range(n)) / n
    for r in ranks:
        assert r["grad"] == [[pytest.approx(want)] * 3]
    # the stop vote: one rank asked at step 5, every rank stopped at the same step
    stops = {r["stopped"] for r in ranks}
    # flag raised at step 5, sent with the vote posted at step 7, agreed at step 11
    assert len(stops) == 1 and stops.pop() == 11
    # the votes still in flight carry the flag too: settling agrees on stopping
    assert all(r["settle"] is True for r in ranks)


@pytest.mark.mpi
def test_no_dist_keeps_local_gradients():
    ranks = _ranks(run_mpi(2, [SCRIPT, "none"], timeout=120))
    assert [r["grad"] for r in ranks] == [[[pytest.approx(2.0)] * 3],
                                          [[pytest.approx(4.0)] * 3]]


@pytest.mark.mpi
@pytest.mark.skipif(importlib.util.find_spec("horovod") is None,
                    reason="horovod not installed (see hpcio/dist.py for the recipe)")
def test_horovod_from_mpi():
    ranks = _ranks(run_mpi(2, [SCRIPT, "horovod"], timeout=180))
    # Horovod averages in the optimiser step, not in backward: local gradients here
    assert [r["grad"] for r in ranks] == [[[pytest.approx(2.0)] * 3],
                                          [[pytest.approx(4.0)] * 3]]


def test_registry_and_free_port():
    assert set(DISTS) == {"torch", "horovod", "none"}
    p = free_port()
    assert 0 < p < 65536
