"""The measured-costs file (hpcio.simulate.measured) and calibration pinning what it
measured (hpcio.simulate.calibrate, ``--costs``); the bench's own counters
(hpcio.simulate.bench) read from /proc."""

import os
from dataclasses import replace

import pytest
import yaml

from hpcio.errors import HpcioError
from hpcio.simulate import bench
from hpcio.simulate.calibrate import BYTE_CPU, LATENCY_X, QUANTA, _axes, _split
from hpcio.simulate.engine import INSTALL_HINT, available
from hpcio.simulate.measured import (check_keys, figure, load_costs, pinned, write_costs)
from hpcio.simulate.platform import load_platform
from hpcio.simulate.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTBED = os.path.join(ROOT, "platforms", "testbed.yaml")
MIB = 2 ** 20
needs_simgrid = pytest.mark.skipif(not available()[0], reason=INSTALL_HINT)


def _costs():
    return {"definitions": {"cpu_ms_per_mib": "what it is"},
            "readers": {"naive": {"cpu_us_per_sample": figure([40.0, 42.0, 45.0]),
                                  "cpu_ms_per_mib": figure([1.5, 0.5, 1.0])}},
            "storage": {"latency_us": figure([900.0, 1100.0, 1000.0])},
            "node": {"run_queue_quantum_ms": figure([2.5, 3.0, None])}}


def test_figure_is_median_and_spread_of_the_repeats():
    f = figure([3.0, 1.0, 2.0, float("nan"), None])
    assert (f["median"], f["min"], f["max"]) == (2.0, 1.0, 3.0)
    assert figure([1.0, 4.0])["median"] == 2.5
    assert figure([None, float("nan")]) is None


def test_costs_file_round_trip(tmp_path):
    path = tmp_path / "costs.yaml"
    write_costs(path, _costs())
    got = load_costs(path)
    assert got["readers"]["naive"]["cpu_ms_per_mib"] == {"median": 1.0, "min": 0.5,
                                                          "max": 1.5,
                                                          "repeats": [1.5, 0.5, 1.0]}
    assert got["storage"]["latency_us"]["median"] == 1000.0
    readers, storage = pinned(got)
    assert readers["naive"]["cpu_s_per_byte"] == pytest.approx(
        [v * 1e-3 / MIB for v in (0.5, 1.0, 1.5)])
    assert storage["latency_s"] == pytest.approx([9e-4, 1e-3, 1.1e-3])
    assert storage["cpu_quantum_s"] == pytest.approx([2.5e-3, 2.75e-3, 3e-3])
    readers, storage = pinned(got, {"cpu_ms_per_mib"})     # --pin: only what is named
    assert set(readers["naive"]) == {"cpu_s_per_byte"} and storage == {}


@pytest.mark.parametrize("edit, key", [
    (lambda d: d["readers"]["naive"]["cpu_ms_per_mib"].update(min="abc"),
     "readers.naive.cpu_ms_per_mib.min: not a number"),
    (lambda d: d["readers"]["naive"]["cpu_ms_per_mib"].update(min=9.0),
     "readers.naive.cpu_ms_per_mib: min <= median <= max"),
    (lambda d: d["storage"]["latency_us"].pop("median"), "storage.latency_us.median"),
    (lambda d: d["readers"].update(naive=[1, 2]), "readers.naive: not a mapping"),
    (lambda d: d.pop("hpcio_costs"), "hpcio_costs: not a measured-costs file"),
    (lambda d: d.update(readers={}, storage={}, node={}), "no measured figure"),
    (lambda d: d["node"]["run_queue_quantum_ms"].update(max=-1), "node.run_queue_quantum_ms.max"),
    (lambda d: d["storage"]["latency_us"].update(repeats=["x"]), "storage.latency_us.repeats"),
])
def test_bad_costs_file_is_one_line_naming_the_key(tmp_path, edit, key):
    path = tmp_path / "costs.yaml"
    write_costs(path, _costs())
    d = yaml.safe_load(path.read_text())
    edit(d)
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(HpcioError) as e:
        load_costs(path)
    assert key in str(e.value) and "\n" not in str(e.value)


def test_unreadable_costs_and_unknown_pin_are_one_line(tmp_path):
    with pytest.raises(HpcioError, match="cannot read the measured costs"):
        load_costs(tmp_path / "missing.yaml")
    with pytest.raises(HpcioError, match="--pin cpu_per_mib: not a measured figure"):
        check_keys("cpu_per_mib")


def _workload(reader, ranks):
    return Workload(name=f"{reader}-{ranks}", reader=reader, ranks=ranks, batch=16, steps=4,
                    records=2048, record_bytes=1e5, shuffle="global", seed=0, compute_s=0.02,
                    rest_s=0.0, sync=True, prefetch=2, steady_steps=1,
                    faults_per_sample=1.0, dataset="d", cpu_s_per_sample=3e-4)


def test_calibration_pins_a_measured_axis(tmp_path):
    """A measured CPU per MiB replaces the blind grid by its min, median and max, a
    measured latency the platform's multiples; a reader measured nothing about keeps its
    grid; the measured CPU per sample raises the floor only; the fit says which is which."""
    path = tmp_path / "costs.yaml"
    write_costs(path, _costs())
    plat = load_platform(TESTBED)
    ws = [_workload("naive", 1), _workload("coordinated", 1)]
    lat, quanta, cpu, per_byte, measured, fitted = _axes(ws, plat, pinned(load_costs(path)))
    assert lat == pytest.approx([9e-4, 1e-3, 1.1e-3])
    assert quanta == pytest.approx([2.5e-3, 2.75e-3, 3e-3])
    assert per_byte["naive"] == pytest.approx([v * 1e-3 / MIB for v in (0.5, 1.0, 1.5)])
    assert per_byte["coordinated"] is None
    assert cpu["naive"]["floor"] == pytest.approx(3e-4)     # the runs' 300 us > 40 us
    assert not cpu["naive"]["pinned"] and min(cpu["naive"]["values"]) == pytest.approx(3e-4)
    split = _split({"naive": (5e-4, 1e-3 / MIB), "coordinated": (5e-4, 0.0)}, cpu,
                   per_byte)
    assert {b for _, b in split["naive"]} == set(per_byte["naive"])
    assert {b for _, b in split["coordinated"]} == set(BYTE_CPU)
    assert any("naive CPU 0.50-1.50 ms/MiB" in m for m in measured)
    assert "coordinated CPU per MiB" in fitted and "latency" not in fitted
    assert "run queue quantum" not in fitted
    lat, quanta, _, per_byte, measured, fitted = _axes(ws, plat, None)     # nothing measured
    assert lat == pytest.approx([plat.latency_s * x for x in LATENCY_X])
    assert quanta == list(QUANTA)
    assert per_byte == {"naive": None, "coordinated": None} and not measured


def test_runs_that_measured_the_rank_take_the_cpu_per_mib_outside_it(tmp_path):
    """Runs that measured their process CPU (the rank's own work for the bytes is in it)
    are given the CPU per MiB outside the rank, and their CPU per sample is pinned to the
    spread of that process CPU over the runs: the node's CPU is then all measured, every
    second-grid pair a measured one. Runs that did not are given the whole CPU per MiB."""
    costs = _costs()
    costs["readers"]["naive"]["outside_cpu_ms_per_mib"] = figure([0.25, 0.5])
    path = tmp_path / "costs.yaml"
    write_costs(path, costs)
    plat, pin = load_platform(TESTBED), pinned(load_costs(path))
    ws = [_workload("naive", 1), replace(_workload("naive", 2), cpu_s_per_sample=5e-4)]
    _, _, cpu, per_byte, measured, fitted = _axes(ws, plat, pin)
    assert per_byte["naive"] == pytest.approx([v * 1e-3 / MIB for v in (0.25, 0.375, 0.5)])
    assert any("outside the rank" in m for m in measured)
    assert cpu["naive"]["pinned"] and cpu["naive"]["values"] == pytest.approx([3e-4, 4e-4,
                                                                               5e-4])
    assert not any(f.startswith("naive CPU") for f in fitted)
    split = _split({"naive": (4e-4, per_byte["naive"][1])}, cpu, per_byte)
    assert split["naive"] == sorted((s, b) for s in cpu["naive"]["values"]
                                    for b in per_byte["naive"])
    unmeasured = replace(_workload("naive", 1), cpu_s_per_sample=float("nan"))
    _, _, _, per_byte, _, _ = _axes([unmeasured], plat, pin)
    assert per_byte["naive"] == pytest.approx([v * 1e-3 / MIB for v in (0.5, 1.0, 1.5)])


def test_cpu_counters_move_with_work():
    """The bench's counters: this process's CPU (/proc/PID/stat) and the node's
    (/proc/stat) grow while it computes; a process gone counts 0."""
    p0, n0 = bench.proc_cpu(os.getpid()), bench.node_cpu()
    x = 0
    while bench.proc_cpu(os.getpid()) - p0 < 0.05:
        x += sum(range(1000))
    assert bench.node_cpu() - n0 >= 0.04
    assert bench.proc_cpu(2 ** 22 + 7) == 0.0


@needs_simgrid
def test_calibrate_keeps_every_near_fit_on_the_measured_axes(tmp_path):
    """Calibrated on a recorded testbed run with measured latency, quantum and CPU per MiB
    outside the rank: every near-equal fit (the best first) takes them from the measured
    spread, the CPU per sample from the run's own process CPU, and the output says which
    costs were measured and which fitted."""
    from hpcio.simulate.calibrate import calibrate
    from hpcio.simulate.workload import workload_from_run
    costs = _costs()
    costs["readers"]["naive"]["outside_cpu_ms_per_mib"] = figure([3.2, 3.4, 4.0])
    path = tmp_path / "costs.yaml"
    write_costs(path, costs)
    w = workload_from_run(os.path.join(ROOT, "tests", "fixtures", "hpcio-runs",
                                       "pfs-inet-lmdb-naive-n1"))
    fit = calibrate([w], load_platform(TESTBED), 1e-3, None, pinned(load_costs(path)))
    near = fit.near["naive"]
    assert near and near[0]["params"] == {k: fit.params["naive"][k] for k in near[0]["params"]}
    def one_of(x, values):
        return any(x == pytest.approx(v) for v in values)
    for n in near:
        assert one_of(n["platform"].latency_s, [9e-4, 1e-3, 1.1e-3])
        assert one_of(n["platform"].cpu_quantum_s, [2.5e-3, 2.75e-3, 3e-3])
        assert one_of(n["params"]["cpu_s_per_byte"] * 1e3 * MIB, [3.2, 3.4, 4.0])
        assert n["params"]["cpu_s"] == pytest.approx(w.cpu_s_per_sample)
    assert any("naive CPU 3.20-4.00 ms/MiB outside the rank" in m
               for m in fit.sources["measured"])
    assert "latency" not in fit.sources["fitted"]
    assert "server bandwidth" in fit.sources["fitted"]


def test_pin_without_costs_and_a_bad_costs_file_are_one_line(tmp_path):
    from hpcio.simulate.__main__ import main
    run = os.path.join(ROOT, "tests", "fixtures", "hpcio-runs", "pfs-inet-lmdb-naive-n1")
    with pytest.raises(HpcioError, match="--pin: give the measured costs with --costs"):
        main(["calibrate", run, "--platform", TESTBED, "--pin", "latency_us"])
    bad = tmp_path / "costs.yaml"
    bad.write_text("hpcio_costs: 1\nstorage: {latency_us: {median: 1, min: 2, max: 3}}\n")
    with pytest.raises(HpcioError, match="storage.latency_us: min <= median <= max"):
        main(["calibrate", run, "--platform", TESTBED, "--costs", str(bad)])


def test_several_bench_runs_are_their_envelope(tmp_path):
    """Bench runs at different times (the node's other work changes): each figure's spread
    the envelope of theirs, its median the median of theirs."""
    from hpcio.simulate.measured import merge_costs
    a, b = _costs(), _costs()
    b["readers"]["naive"]["cpu_ms_per_mib"] = figure([2.0, 3.0, 2.5])
    del b["storage"]
    for name, c in (("a", a), ("b", b)):
        write_costs(tmp_path / name, c)
    got = merge_costs([load_costs(tmp_path / "a"), load_costs(tmp_path / "b")])
    assert got["readers"]["naive"]["cpu_ms_per_mib"] == {
        "median": 1.75, "min": 0.5, "max": 3.0, "repeats": [1.5, 0.5, 1.0, 2.0, 3.0, 2.5]}
    assert got["storage"]["latency_us"]["median"] == 1000.0      # from the one that has it
    # six repeats pooled: the axis is their quartiles, not min, median and max alone
    readers, _ = pinned(got)
    assert readers["naive"]["cpu_s_per_byte"] == pytest.approx(
        [v * 1e-3 / MIB for v in (0.5, 1.125, 1.75, 2.375, 3.0)])
