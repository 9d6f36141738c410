"""hpcio.simulate: platform files refused in one line, SimGrid's bandwidth sharing as the
simulation sees it, and calibrate + predict end to end on the recorded testbed runs."""

import json
import os
import subprocess
import sys

import pytest

from hpcio.simulate.engine import INSTALL_HINT, Case, available
from hpcio.simulate.platform import load_platform
from hpcio.simulate.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "hpcio-runs")
TESTBED = os.path.join(ROOT, "platforms", "testbed.yaml")
FIXTURES = [os.path.join(RUNS, f"pfs-inet-lmdb-{r}-n{n}")
            for r in ("naive", "coordinated") for n in (1, 2, 4)]
needs_simgrid = pytest.mark.skipif(not available()[0], reason=INSTALL_HINT)


def _simulate(*args):
    return subprocess.run([sys.executable, "-m", "hpcio.simulate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


GOOD = """
compute: {nodes: 1, ranks_per_node: 4, nic_mbs: 10000, nic_latency_us: 10}
storage: {servers: 2, bandwidth_mbs: 198, latency_us: 1270, placement: file}
client_cache_mib: 4096
"""
BAD = {
    "zero servers": (GOOD.replace("servers: 2", "servers: 0"), "servers must be > 0"),
    "negative bandwidth": (GOOD.replace("bandwidth_mbs: 198", "bandwidth_mbs: -5"),
                           "bandwidth_mbs must be > 0"),
    "missing key": (GOOD.replace("latency_us: 1270, ", ""), "missing key latency_us"),
    "missing section": ("client_cache_mib: 1\n", "missing section compute"),
    "not yaml": ("compute: [1,\n", "not YAML"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_platform_one_line(tmp_path, case):
    text, want = BAD[case]
    path = tmp_path / "p.yaml"
    path.write_text(text)
    r = _simulate("predict", "--platform", str(path), "--from", str(tmp_path), "--ranks", "1",
                  "-o", str(tmp_path / "out"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert want in lines[0] and "Traceback" not in r.stderr


def test_testbed_platform_loads():
    p = load_platform(TESTBED)
    assert (p.servers, round(p.latency_s * 1e6), round(p.server_bps / 1e6)) == (2, 1270, 198)


@needs_simgrid
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_one_server_shared_evenly(ranks):
    """P ranks reading at once from one server of bandwidth B get B/P each (SimGrid's
    max-min sharing): a step's 16 records of 1 MB take P x 16 MB / B."""
    from hpcio.simulate.calibrate import run_cases
    p = load_platform(TESTBED)
    from dataclasses import replace
    p = replace(p, servers=1, latency_s=0.0, cache_bytes=0.0, nic_bps=1e12, nic_latency_s=0.0,
                server_bps=100e6)
    w = Workload(name="share", reader="naive", ranks=ranks, batch=16, steps=5,
                 records=16 * ranks * 5, record_bytes=1e6, shuffle="none", seed=0,
                 compute_s=0.0, rest_s=0.0, sync=True, prefetch=2, steady_steps=1,
                 faults_per_sample=1.0, dataset="synthetic")
    (f,) = run_cases([Case(p, w, {"cpu_s": 0.0, "window": 1_000_000})])
    assert f["stall_max_s"] == pytest.approx(ranks * 16e6 / 100e6, rel=1e-6)


@needs_simgrid
@pytest.mark.skipif(not all(os.path.isdir(d) for d in FIXTURES),
                    reason=f"the recorded testbed runs are not in {RUNS}")
def test_predict_on_testbed_runs(tmp_path):
    out = tmp_path / "pred"
    r = _simulate("predict", "--platform", TESTBED, "--from", *FIXTURES, "--ranks", "1,4,8",
                  "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "held out: calibrated on P in [1, 2], predicting P=4" in r.stdout
    pred = json.loads((out / "prediction.json").read_text())
    val = json.loads((out / "validation.json").read_text())
    got = {(p["reader"], p["ranks"]) for p in pred["points"]}
    assert got == {(rd, n) for rd in ("naive", "coordinated") for n in (1, 4, 8)}
    for p in pred["points"]:
        assert p["stall_s_per_step"] >= 0 and 0 < p["au_percent"] <= 100
        assert p["extrapolated"] == (p["ranks"] > 4)
    assert len(val["simulated_back"]) == 6
    assert {p["ranks"] for p in val["held_out"]["points"]} == {4}
    # the simulated-back naive stall stays within a factor 2 of the measured one
    for row in val["simulated_back"]:
        if row["reader"] == "naive":
            assert 0.5 < row["simulated_stall_s"] / row["measured_stall_s"] < 2.0
