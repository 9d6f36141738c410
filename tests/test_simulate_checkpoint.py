"""hpcio.simulate checkpoint: a checkpoint's bytes and files per writer as the layout has
them, the limits that set its GiB/s (storage, the metadata service, the writer's own CPU),
1,024 processes in seconds, the testbed calibration re-checked on its recorded runs, the
published rows' files, and bad input in one line."""

import math
import os
import time

import pytest
import yaml

from hpcio.checkpoint.layout import GIB
from hpcio.errors import HpcioError
from hpcio.simulate.__main__ import main
from hpcio.simulate.checkpoint import (CkptCosts, WriterCost, load_ckpt_platform, make_case,
                                       plan, simulate_cases)
from hpcio.simulate.ckpt_calibrate import (client_costs, load_runs, medians, residuals,
                                           summary_errors)
from hpcio.simulate.ckpt_published import DATA, load_rows, load_system
from hpcio.simulate.engine import INSTALL_HINT, available
from hpcio.simulate.platform import parse_platform

needs_simgrid = pytest.mark.skipif(not available()[0], reason=INSTALL_HINT)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(ROOT, "tests", "fixtures", "ckpt-runs")
TESTBED = os.path.join(ROOT, "platforms", "testbed-checkpoint.yaml")


def _platform(servers=1, bw=1000, nic=100000, rpn=8, cores=8):
    return parse_platform({
        "compute": {"nodes": 1, "ranks_per_node": rpn, "cores": cores, "nic_mbs": nic,
                    "nic_latency_us": 0},
        "storage": {"servers": servers, "bandwidth_mbs": bw, "latency_us": 0},
        "client_cache_mib": "off"}, "test")


def _costs(write_mbs=500, create_us=0, fsync_ms=0, ops=math.inf, ns=0.0):
    return CkptCosts(write_mbs * 1e6, create_us * 1e-6, 0.0, fsync_ms * 1e-3, ops,
                     {w: WriterCost(ns, ns) for w in ("dcp", "torch_save", "coordinated")})


def test_every_writer_moves_the_layouts_bytes_in_its_files():
    p, c = _platform(), _costs()
    for writer, ops0, ops1 in (("dcp", 2, 1), ("torch_save", 2, 2), ("coordinated", 1, 1)):
        case = make_case(p, c, "llama3_8b", 4, writer, "write", scale=0.01)
        actors, group, _ = plan(case)
        assert group == 1 and len(actors) == 4
        assert sum(a[4].sum() for a in actors) == pytest.approx(case.layout.total_bytes)
        assert (actors[0][2], actors[1][2]) == (ops0, ops1)   # metadata ops per rank


@needs_simgrid
def test_the_storage_the_metadata_service_and_the_writer_each_set_the_time():
    p = _platform(bw=800)
    cases = [make_case(p, _costs(write_mbs=400), "llama3_8b", 4, "dcp", ph, 0.01)
             for ph in ("write", "read")]
    # file per process, 1,024 ranks' creates at 200 per second: the storm
    cases.append(make_case(_platform(bw=1e6, rpn=64, cores=64),
                           _costs(write_mbs=1e6, ops=200), "llama3_8b", 256, "torch_save",
                           "write", 0.001))
    cases.append(make_case(_platform(bw=1e6, rpn=64, cores=64),
                           _costs(write_mbs=1e6, ops=200), "llama3_8b", 256, "coordinated",
                           "write", 0.001))
    cases.append(make_case(p, _costs(write_mbs=1e5, ns=4.0), "llama3_8b", 4, "dcp", "write",
                           0.01))
    w, r, storm, shared, cpu = simulate_cases(cases)
    gib = cases[0].layout.total_bytes / GIB
    assert w["limit"] == "storage" and w["GiB_per_s"] == pytest.approx(400e6 / GIB, rel=0.01)
    assert r["limit"] == "storage" and r["GiB_per_s"] == pytest.approx(800e6 / GIB, rel=0.01)
    assert w["wall_s"] == pytest.approx(gib / w["GiB_per_s"])
    assert storm["limit"] == "metadata" and storm["wall_s"] > 1.9 * shared["wall_s"]
    assert cpu["limit"] == "client CPU"   # one core per rank at 4 ns/B: 0.25 GB/s each


@needs_simgrid
def test_1024_processes_simulate_in_seconds_grouped():
    p, c, _ = load_ckpt_platform(os.path.join(DATA, "azure-amlfs125-4096tib-128h.yaml"))
    t = time.perf_counter()
    out = simulate_cases([make_case(p, c, "llama3_1t", 1024, "torch_save", "write")])[0]
    assert time.perf_counter() - t < 30      # seconds on 2 busy cores
    assert out["group"] > 1 and out["limit"] == "storage"
    assert out["GiB_per_s"] <= 512e9 / GIB * 1.001


@needs_simgrid
@pytest.mark.skipif(not os.path.isdir(RUNS), reason=f"no recorded runs in {RUNS}")
def test_the_testbed_calibration_holds_on_its_recorded_runs():
    platform, costs, d = load_ckpt_platform(TESTBED)
    measured = client_costs(load_runs([os.path.join(RUNS, "tmpfs")]))
    for w, v in measured.items():   # the writers' costs are the client runs' figures
        assert costs.writers[w].write_ns_per_byte == pytest.approx(v.write_ns_per_byte,
                                                                   abs=1e-3)
    runs = medians(load_runs([os.path.join(RUNS, "pfs")]))
    on = d["checkpoint_calibration"]["calibrate_on"]
    held = [r for r in runs if r.ranks not in on]
    assert held, "the fixtures hold no process count that was left out of the fit"
    rows = residuals(platform, costs, held)
    expect = d["checkpoint_calibration"]["held_out_error_percent"]
    assert sorted(expect) == sorted({r.ranks for r in held})
    for n, e in expect.items():
        w, r = summary_errors([x for x in rows if x["ranks"] == n])
        assert (w, r) == (pytest.approx(e["write"], abs=1), pytest.approx(e["read"], abs=1))


def test_published_systems_carry_their_sources(tmp_path):
    rows = load_rows()
    assert {r["org"] for r in rows} >= {"Everpure", "Azure", "UBIX", "XSKY"}
    for r in rows:
        load_system(r["platform"])
    with open(os.path.join(DATA, rows[0]["platform"])) as f:
        text = f.read()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("write_mbs: 25000         # A: as the read: the data node's "
                                "link", "write_mbs: 25000"))
    with pytest.raises(HpcioError, match="checkpoint.write_mbs has no source"):
        load_system(str(bad))


def test_bad_input_is_one_line(tmp_path):
    plat = tmp_path / "p.yaml"
    plat.write_text(yaml.safe_dump({
        "compute": {"nodes": 1, "ranks_per_node": 8, "nic_mbs": 1000, "nic_latency_us": 0},
        "storage": {"servers": 1, "bandwidth_mbs": 100, "latency_us": 0},
        "client_cache_mib": "off",
        "checkpoint": {"write_mbs": 100, "create_us": 0, "open_us": 0, "fsync_ms": 0}}))
    with pytest.raises(HpcioError, match="unknown --model 'llama3_2t'"):
        main(["checkpoint", "predict", "--platform", str(plat), "--model", "llama3_2t",
              "--ranks", "8"])
    with pytest.raises(HpcioError, match="needs a multiple of TP x PP = 8 x 1 = 8 ranks, "
                                         "not 12"):
        main(["checkpoint", "predict", "--platform", str(plat), "--model", "llama3_70b",
              "--ranks", "12"])
    nock = tmp_path / "nock.yaml"
    d = yaml.safe_load(plat.read_text())
    del d["checkpoint"]
    nock.write_text(yaml.safe_dump(d))
    with pytest.raises(HpcioError, match="missing section checkpoint"):
        main(["checkpoint", "predict", "--platform", str(nock), "--ranks", "8"])
