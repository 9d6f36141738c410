"""benchmarks/bench_dlio.py without DLIO: its options, and its table on a tiny real run of
hpcio's two readers over data hpcio makes. DLIO's venv (TensorFlow) is never made here."""

import json
import os
import sys

import pytest
from common.launch import launch

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "benchmarks", "bench_dlio.py")


def test_help_names_the_venv():
    p = launch([sys.executable, SCRIPT, "--help"], timeout=60)
    assert p.returncode == 0 and ".venv-dlio" in p.stdout and "--contenders" in p.stdout


def test_hpcio_readers_on_a_tiny_unet(tmp_path):
    venv = tmp_path / "venv-dlio"
    out = tmp_path / "b.json"
    p = launch(
        [sys.executable, SCRIPT, "--venv", str(venv), "--dir", str(tmp_path / "d"),
         "--generator", "hpcio", "--contenders", "naive", "coordinated",
         "--workloads", "unet3d", "--files", "8", "--record-bytes", "16384", "--batch", "1",
         "--repeats", "2", "--wait-quiet", "0", "--max-load", "1000", "--json", str(out)],
        timeout=600)
    assert p.returncode == 0, p.stderr
    assert not venv.exists()
    doc = json.loads(out.read_text())
    runs = doc["runs"]
    assert [r["who"] for r in runs] == ["naive", "coordinated", "coordinated", "naive"]
    assert all(r["samples_s"] > 0 and 0 < r["au"] <= 100 for r in runs)
    assert all(r["resident_before"] < 0.5 for r in runs)
    assert doc["record_bytes"]["unet3d"] == 128 * 128
    assert len(doc["limits_bytes_s"]["unet3d"]) == 2
    assert "| unet3d | hpcio naive |" in p.stdout and "| unet3d | hpcio coordinated |" in p.stdout
    assert "DLIO" not in "".join(doc["table"]) and not doc["ratios"]
