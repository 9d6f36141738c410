"""One ``hpcio.simulate predict`` on the recorded testbed runs, shared by the tests that
read a prediction (the calibration behind it is the suite's longest computation)."""

import os

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
    out = tmp_path_factory.mktemp("testbed-prediction") / "pred"
    p = run_main(["-m", "hpcio.simulate", "predict", "--platform", TESTBED, "--from",
                  *TESTBED_RUNS, "--ranks", ",".join(map(str, TESTBED_RANKS)), "-o", out],
                 cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    return out, p
