"""hpcio under a real Slurm (``srun --mpi=pmi2``): the way users launch it on clusters.

Runs when ``srun`` reaches a controller with an idle node (``scripts/slurm-local.sh start``
brings up a one-node Slurm; .ci/run does so when it is root), and is skipped otherwise.
"""

import json
import os
import sys

import pytest

from common.datasets import make_dataset
from common.mpi import once_more, slurm_up
from common.launch import launch

why = slurm_up()
# a daemon of its own (slurmctld): its CI lane is .ci/lane-slurm
pytestmark = [pytest.mark.lane, pytest.mark.skipif(
    why is not None, reason=f"no Slurm here: {why} (scripts/slurm-local.sh start: a one-node "
                            "Slurm, needs root)")]


def _srun(n, args, timeout=180, env=None):
    cmd = ["srun", "--mpi=pmi2", "-n", str(n), "-O", "--kill-on-bad-exit=1",
           sys.executable] + [str(a) for a in args]
    return once_more(lambda: (launch(cmd, timeout=timeout,
                                              env=dict(os.environ, **(env or {}))), ""))[0]


def test_train_under_srun_is_one_mpi_world(tmp_path):
    ds = make_dataset(str(tmp_path), "lmdb", "png", preset="mnist", records=256, shards=2)
    out = tmp_path / "run"
    p = _srun(2, ["-m", "hpcio.train", "--data", ds.root, "--reader", "coordinated",
                  "--model", "lenet", "--batch", "16", "--steps", "4", "--out", out])
    assert p.returncode == 0, p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranks"] == 2
    env = json.loads((out / "env.json").read_text())
    assert env["slurm_job_id"] and env["slurm"]["SLURM_NTASKS"] == "2"
    assert {"rank-0.json", "rank-0.npz", "rank-1.json", "rank-1.npz",
            "summary.json"} <= set(os.listdir(out))


def test_error_on_one_rank_ends_the_srun_job(tmp_path):
    ds = make_dataset(str(tmp_path), "packed", "raw", preset="mnist", records=256, shards=2)
    p = _srun(2, ["-m", "hpcio.train", "--data", ds.root, "--model", "emulate",
                  "--compute-time", "0.01", "--batch", "8", "--out", tmp_path / "run"],
              timeout=60, env={"HPCIO_FAULT": "1:2"})
    assert p.returncode != 0
    assert "rank 1" in p.stderr


JOBS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jobs")


def _sbatch(tmp_path, script, args, n=2, env=None, timeout=600):
    """Submit ``jobs/<script>`` and wait for it (sbatch --wait); returns (process, log)."""
    log = tmp_path / f"{script}.out"
    cmd = ["sbatch", "--wait", "-n", str(n), "--time=8", "--chdir", str(tmp_path),
           "--output", str(log), os.path.join(JOBS, script)] + [str(a) for a in args]
    e = dict(os.environ, HPCIO_VENV=sys.prefix, **(env or {}))

    def run():
        p = launch(cmd, timeout=timeout, env=e)
        return p, log.read_text() if log.exists() else ""
    return once_more(run)


@pytest.mark.slow
def test_job_templates_make_data_train_and_sweep(tmp_path):
    data = tmp_path / "data"
    p, log = _sbatch(tmp_path, "datagen.sbatch", [data, "--records", 96, "--format",
                                                   "packed", "--shards", 2])
    assert p.returncode == 0, log + p.stderr
    assert (data / "hpcio.json").exists()
    run = tmp_path / "run"
    p, log = _sbatch(tmp_path, "train.sbatch", ["--data", data, "--model", "emulate",
                                                "--batch", 8, "--out", run])
    assert p.returncode == 0, log + p.stderr
    with open(run / "summary.json") as f:
        assert json.load(f)["ranks"] == 2
    sweep = tmp_path / "sweep"
    p, log = _sbatch(tmp_path, "scaling.sbatch", ["--data", data, "--", "--model", "emulate",
                                                  "--batch", 8, "--compute-time", 0.001],
                     env={"HPCIO_SWEEP_OUT": str(sweep)})
    assert p.returncode == 0, log + p.stderr
    with open(sweep / "sweep.json") as f:
        runs = json.load(f)["runs"]
    assert sorted((r["point"]["reader"], r["point"]["ranks"]) for r in runs) == [
        ("coordinated", 1), ("coordinated", 2), ("naive", 1), ("naive", 2)]
    assert all(r["status"] == "done" for r in runs)
    for r in runs:
        with open(os.path.join(r["run_dir"], "env.json")) as f:
            assert json.load(f)["slurm_job_id"]
