"""One ``hpcio.simulate predict`` on the recorded testbed runs, shared by the tests that
read a prediction (the calibration behind it is the suite's longest computation): made
once per run of the suite, also across pytest-xdist's workers (the first makes it under a
lock in their common temporary directory, the others read it)."""

import fcntl
import os
import subprocess

import pytest

from .fixtures import RUNS
from .inproc import run_main

__all__ = ["TESTBED", "TESTBED_RUNS", "TESTBED_RANKS", "testbed_prediction"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.path.join(ROOT, "platforms", "testbed.yaml")
TESTBED_RUNS = [os.path.join(RUNS, f"pfs-inet-lmdb-{r}-n{n}")
                for r in ("naive", "coordinated") for n in (1, 2, 4)]
TESTBED_RANKS = (1, 2, 4, 8)


@pytest.fixture(scope="session")
def testbed_prediction(tmp_path_factory):
    """(the prediction's directory, the command's CompletedProcess): predict at 1, 2, 4 and 8
    ranks from the six testbed runs (held out: 4)."""
    from hpcio.simulate.engine import available
    ok, why = available()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out, said = shared / "testbed-prediction", shared / "testbed-prediction.out"
    with open(shared / "testbed-prediction.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not said.exists():
            p = run_main(["-m", "hpcio.simulate", "predict", "--platform", TESTBED, "--from",
                          *TESTBED_RUNS, "--ranks", ",".join(map(str, TESTBED_RANKS)),
                          "-o", out], cwd=ROOT)
            assert p.returncode == 0, p.stdout + p.stderr
            said.write_text(p.stdout)
    return out, subprocess.CompletedProcess(["hpcio.simulate"], 0, said.read_text(), "")
