"""hpcio.train --checkpoint-workload: a llama3 layout's per-rank checkpoints in a training
run, sync and async (2 ranks, one launch: restored byte-exact by hpcio.checkpoint, the
async stall recorded apart from its write), and the option refusals (in-process)."""

import json
import os

import numpy as np
import pytest

from common.datasets import make_dataset
from common.mpi import run_mpi
from hpcio.errors import HpcioError
from hpcio.measure.steps import COMPONENTS
from hpcio.train.options import parse_args

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "mpi", "check_train_checkpoint.py")
WL = ["--checkpoint-workload", "llama3_8b"]


@pytest.mark.parametrize("args, says", [
    (["--checkpoint-mode", "async"], "only with --checkpoint-workload"),
    (["--checkpoint-writer", "dcp", "--checkpoint-every", "2"],
     "only with --checkpoint-workload"),
    (WL, "needs --checkpoint-every"),
    (WL + ["--checkpoint-every", "2", "--checkpoint-writer", "hdf5"],
     "--checkpoint-writer hdf5: unknown"),
    (WL + ["--checkpoint-every", "2", "--checkpoint-mode", "later"],
     "--checkpoint-mode later: unknown"),
    (WL + ["--checkpoint-every", "2", "--checkpoint-scale", "2"], "must be in (0, 1]"),
    (["--checkpoint-workload", "gpt9", "--checkpoint-every", "2"], "gpt9: unknown"),
    (WL + ["--checkpoint-every", "2", "--device", "cuda"], "device-to-host copy"),
])
def test_checkpoint_options_refused_in_one_line(args, says):
    with pytest.raises(HpcioError) as e:
        parse_args(["--data", "x"] + args)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_checkpoint_options_defaults():
    a = parse_args(["--data", "x", "--checkpoint-every", "3"] + WL)
    assert (a.checkpoint_writer, a.checkpoint_mode, a.checkpoint_scale) == \
        ("coordinated", "sync", 0.001)


def _json(p):
    with open(p) as f:
        return json.load(f)


def test_sync_and_async_checkpoints_restore_and_stall(tmp_path):
    """One launch of 2 ranks, two runs: every checkpoint restored byte-exact; the step's
    ckpt is the checkpoint's stall; async's stall is its copy and wait, its write apart."""
    ds = make_dataset(tmp_path, "packed", "raw", records=64)
    p = run_mpi(2, [CHECK, ds.root, tmp_path], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("OK")] == \
        ["OK sync 3", "OK async 3"], p.stdout
    for mode in ("sync", "async"):
        out = tmp_path / mode
        s = _json(out / "summary.json")["checkpoints"]
        assert s["mode"] == mode and s["count"] == 3 and s["writer"] == "coordinated"
        recs = []
        for r in range(2):
            z = np.load(out / f"rank-{r}.npz")
            parts = sum(z[c] for c in COMPONENTS)
            assert (np.abs(parts - z["wall"]) <= 0.02 * z["wall"]).all()
            ck = _json(out / f"rank-{r}.json")["checkpoints"]
            assert [c["global_step"] for c in ck] == [2, 4, 6]
            for c in ck:  # the step's ckpt holds the stall, and only a little more
                assert c["stall_s"] <= z["ckpt"][c["global_step"] - 1] <= c["stall_s"] + 0.05
                assert c["write_s"] > 0 and c["commit_s"] >= 0
                if mode == "sync":
                    assert c["stall_s"] >= c["write_s"] + c["commit_s"]
                else:  # copy + wait, the write beside training
                    assert c["copy_s"] > 0
                    assert c["copy_s"] + c["wait_s"] <= c["stall_s"] <= \
                        c["copy_s"] + c["wait_s"] + 0.05
            assert (np.delete(z["ckpt"], [1, 3, 5]) == 0).all()
            recs.append(ck)
        for i, row in enumerate(s["per_checkpoint"]):
            assert row["write_s"] == max(rk[i]["write_s"] for rk in recs)
            assert row["stall_s"] == max(rk[i]["stall_s"] for rk in recs)
            assert row["write_GiB_per_s"] == pytest.approx(row["size_GiB"] / row["write_s"])
