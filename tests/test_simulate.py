"""hpcio.simulate: platform files refused in one line, SimGrid's bandwidth sharing as the
simulation sees it, and calibrate + predict end to end on the recorded testbed runs."""

import json
import os
import sys

import pytest

from hpcio.errors import HpcioError
from hpcio.plan import make_plan
from hpcio.simulate.engine import INSTALL_HINT, Case, available
from common.failure import one_line
from common.launch import launch
from common.prediction import TESTBED_RANKS
from hpcio.simulate.platform import load_platform
from hpcio.simulate.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(ROOT, "tests", "fixtures", "hpcio-runs")
TESTBED = os.path.join(ROOT, "platforms", "testbed.yaml")
FIXTURES = [os.path.join(RUNS, f"pfs-inet-lmdb-{r}-n{n}")
            for r in ("naive", "coordinated") for n in (1, 2, 4)]
needs_simgrid = pytest.mark.skipif(not available()[0], reason=INSTALL_HINT)


def _simulate(*args):
    return launch([sys.executable, "-m", "hpcio.simulate", *args], cwd=ROOT,
                          timeout=300)


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
    assert want in one_line(r, raw=True)


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


@pytest.mark.mpi  # hpcio.simulate forks its engines
def test_predict_on_testbed_runs(testbed_prediction):
    out, r = testbed_prediction
    assert "held out: calibrated on P in [1, 2], predicting P=4" in r.stdout
    pred = json.loads((out / "prediction.json").read_text())
    val = json.loads((out / "validation.json").read_text())
    got = {(p["reader"], p["ranks"]) for p in pred["points"]}
    assert got == {(rd, n) for rd in ("naive", "coordinated") for n in TESTBED_RANKS}
    for p in pred["points"]:
        assert p["stall_s_per_step"] >= 0 and 0 < p["au_percent"] <= 100
        assert p["extrapolated"] == (p["ranks"] > 4)
    assert len(val["simulated_back"]) == 6
    # MLPerf Storage's headline, per reader: the most ranks whose AU stays >= 90%
    sup = pred["accelerators_supported"]
    assert set(sup) == {"naive", "coordinated"}
    for reader, v in sup.items():
        au = {p["ranks"]: p["au_percent"] for p in pred["points"] if p["reader"] == reader}
        if v["ranks"] is None:
            assert au[1] < 90
        else:
            assert all(a >= 90 for n, a in au.items() if n <= v["ranks"])
            assert v["at_least"] == all(a >= 90 for a in au.values())
    assert all(isinstance(p["dominant"], str) and p["dominant"] for p in pred["points"])
    assert {p["ranks"] for p in val["held_out"]["points"]} == {4}
    # the simulated-back naive stall stays within a factor 2 of the measured one
    for row in val["simulated_back"]:
        if row["reader"] == "naive":
            assert 0.5 < row["simulated_stall_s"] / row["measured_stall_s"] < 2.0


@pytest.mark.mpi  # hpcio.simulate forks its engines
def test_predict_at_the_runs_rank_counts_is_what_the_validation_simulated_back(
        testbed_prediction):
    """At 1, 2 and 4 ranks, where the runs were made, each reader's point is its run as
    the validation simulated it back: the same stall and AU, not a template's; past them
    (8) the template's."""
    out, r = testbed_prediction
    pred = json.loads((out / "prediction.json").read_text())
    back = json.loads((out / "validation.json").read_text())["simulated_back"]
    points = {(p["reader"], p["ranks"]): p for p in pred["points"]}
    assert len(back) == 6
    for row in back:
        p = points[row["reader"], row["ranks"]]
        assert p["stall_s_per_step"] == row["simulated_stall_s"], (row, p)
        assert p["au_percent"] == row["simulated_au_percent"], (row, p)
        assert p["simulated_back"] and not p["extrapolated"]
    assert {k for k, p in points.items() if not p["simulated_back"]} == \
        {("naive", 8), ("coordinated", 8)}
    # the printed table says the same as the validation above it
    for row in back:
        line = next(ln for ln in r.stdout.splitlines()
                    if ln.split()[:2] == [row["reader"], str(row["ranks"])])
        assert f"{row['simulated_stall_s']:.4f}" in line and \
            f"{row['simulated_au_percent']:.1f}" in line and "simulated back above" in line


def _workload(**kw):
    base = dict(name="w", reader="naive", ranks=4, batch=8, steps=6, records=512,
                record_bytes=100e3, shuffle="none", seed=0, compute_s=0.01, rest_s=0.0,
                sync=False, prefetch=2, steady_steps=1, faults_per_sample=1.0,
                dataset="synthetic")
    base.update(kw)
    return Workload(**base)


@pytest.mark.parametrize("shuffle", ["none", "global"])
def test_plans_are_the_runs_plans(shuffle):
    """The simulation replays exactly the plans ranks run (hpcio.plan.make_plan), epochs
    following each other."""
    from hpcio.plan import make_plan
    import numpy as np
    w = _workload(ranks=3, batch=4, steps=10, records=50, shuffle=shuffle, seed=7)
    got = w.plans()
    assert got.shape == (3, 10, 4)
    for r in range(3):
        want = np.concatenate([make_plan(50, 3, r, 4, epoch=e, seed=7, shuffle=shuffle)
                               .ids.reshape(-1, 4) for e in range(3)])[:10]
        assert (got[r] == want).all()


def _brought_in(w, access, window=64 << 10):
    """Bytes rank 0 faults in over the run, no cache shared (one rank per node)."""
    from hpcio.readers import PATTERNS
    fn = PATTERNS[("naive", access)][1]
    p = load_platform(TESTBED)
    state, total = {}, 0.0
    for ids in w.plans()[0]:
        _, nbytes = fn(w, p, {"window": window}, ids, None, state)
        total += nbytes.sum()
    return total


def test_cursor_brings_in_more_as_ranks_grow():
    """Caffe's cursor steps over the other ranks' records and touches each: the bytes one
    rank brings in grow with P, while get's stay those of its own records."""
    got = {p: _brought_in(_workload(ranks=p), "get") for p in (1, 4)}
    cur = {p: _brought_in(_workload(ranks=p), "cursor") for p in (1, 4)}
    assert got[1] == pytest.approx(got[4], rel=0.05)       # its own 48 records either way
    assert cur[1] == pytest.approx(got[1], rel=0.05)       # nothing stepped over alone
    # and each of the 3 others' 8 records stepped over in steps 1..5 costs one window
    assert cur[4] - got[4] == 5 * 3 * 8 * (64 << 10)


def test_ring_allreduce_time():
    """2(P-1)/P of the bytes per rank over its share of the NIC, 2(P-1) hops of latency;
    nothing for one rank."""
    from dataclasses import replace
    p = replace(load_platform(TESTBED), nic_bps=1e9, nic_latency_s=1e-5, ranks_per_node=1)
    assert p.exchange_s(1, 100e6) == 0.0
    assert p.exchange_s(4, 100e6) == pytest.approx(1.5 * 100e6 / 1e9 + 6e-5)
    from hpcio.simulate.calibrate import fit_exchange
    w = _workload(ranks=4, exchange_bytes=int(100e6), exchange_s=p.exchange_s(4, 100e6) * 2)
    fitted = fit_exchange([w], p)
    assert fitted.exchange_s(4, 100e6) == pytest.approx(w.exchange_s)


@pytest.mark.skipif(not os.path.isdir(FIXTURES[0]), reason=f"no recorded runs in {RUNS}")
def test_more_ranks_than_the_platform_holds_is_one_line(tmp_path):
    r = _simulate("predict", "--platform", TESTBED, "--from", *FIXTURES[:1], "--ranks", "1,64",
                  "-o", str(tmp_path / "out"))
    line = one_line(r, raw=True)
    assert "more than testbed's 1 nodes x 8 ranks hold" in line and "--scale-out" in line
    assert not (tmp_path / "out").exists()


@needs_simgrid
@pytest.mark.parametrize("quantum", [0.0, 2e-3])
@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_byte_cpu_shares_the_node_cores(ranks, quantum):
    """A reader's bytes cost CPU on the node's 2 cores: up to 2 ranks each have a core,
    past that they share them, so a step's 16 records of 1 MB at 1 ms per MB take
    16 ms x max(1, P / 2) (the transfer itself free here), whether the cores are shared
    fluidly or as a run queue of 2 ms quanta (which only reorders the work; its ranks'
    wake-ups add 0.1 ms each)."""
    from dataclasses import replace
    from hpcio.simulate.calibrate import run_cases
    p = replace(load_platform(TESTBED), servers=1, latency_s=0.0, cache_bytes=0.0,
                nic_bps=1e15, nic_latency_s=0.0, server_bps=1e15, cores=2,
                cpu_quantum_s=quantum)
    w = Workload(name="cpu", reader="naive", ranks=ranks, batch=16, steps=5,
                 records=16 * ranks * 5, record_bytes=1e6, shuffle="none", seed=0,
                 compute_s=0.0, rest_s=0.0, sync=True, prefetch=2, steady_steps=1,
                 faults_per_sample=1.0, dataset="synthetic")
    (f,) = run_cases([Case(p, w, {"cpu_s": 0.0, "window": 1_000_000,
                                  "cpu_s_per_byte": 1e-9})])
    assert f["stall_max_s"] == pytest.approx(16e-3 * max(1, ranks / 2),
                                             rel=0.03 if quantum else 1e-3)


def test_run_queue_and_reader_costs_in_their_files(tmp_path):
    """``compute.cpu_quantum_us`` is read and written back as read; a calibration's
    ``readers.R.cpu_ms_per_mib`` is taken by ``predict --reader-costs``."""
    from hpcio.simulate.platform import parse_platform, platform_dict
    from hpcio.simulate.calibration import load_readers
    import yaml
    d = yaml.safe_load(GOOD)
    d["compute"]["cpu_quantum_us"] = 1500
    p = parse_platform(d)
    assert p.cpu_quantum_s == pytest.approx(1.5e-3)
    assert parse_platform(platform_dict(p)).cpu_quantum_s == pytest.approx(1.5e-3)
    assert load_platform(TESTBED).cpu_quantum_s == 0.0
    d["compute"]["barrier_round_us"] = 400
    assert parse_platform(platform_dict(parse_platform(d))).round_s == pytest.approx(4e-4)
    del d["compute"]["barrier_round_us"]
    assert parse_platform(d).round_s == parse_platform(d).nic_latency_s  # one message hop
    cal = tmp_path / "fit.yaml"
    cal.write_text("readers: {naive: {cpu_us_per_sample: 250, cpu_ms_per_mib: 4, "
                   "window_kib: 256}}\n")
    (got, _) = load_readers(str(cal))
    assert got["naive"]["best"]["cpu_s_per_byte"] == pytest.approx(4e-3 / 2 ** 20)
    assert got["naive"]["near"] == [got["naive"]["best"]]
    cal.write_text("readers: {naive: {cpu_us_per_sample: 250, cpu_ms_per_mib: 4, "
                   "window_kib: 256, near: [{cpu_us_per_sample: 500, cpu_ms_per_mib: 0}]}}\n")
    (got, _) = load_readers(str(cal))
    assert [c["cpu_s"] for c in got["naive"]["near"]] == pytest.approx([2.5e-4, 5e-4])


@needs_simgrid
def test_grouped_ranks_share_bandwidth_as_ranks_do(monkeypatch):
    """Past MAX_ACTORS an actor stands for a group of ranks: every flow grows by the same
    factor, so a step takes what it takes with every rank simulated (both aggregated: a
    step's requests as one)."""
    from dataclasses import replace
    from hpcio.simulate import engine
    from hpcio.simulate.calibrate import run_cases
    p = replace(load_platform(TESTBED), servers=2, latency_s=1e-4, cache_bytes=0.0,
                ranks_per_node=4, nodes=4, nic_bps=1e12, server_bps=200e6)
    w = _workload(ranks=16, batch=8, steps=4, records=16 * 8 * 4, shuffle="global", sync=True)
    case = Case(p, w, {"cpu_s": 1e-4, "window": 128 << 10})
    monkeypatch.setattr(engine, "AGGREGATE_ABOVE", 0)
    (one,) = run_cases([case])
    monkeypatch.setattr(engine, "MAX_ACTORS", 4)
    assert engine.layout(p, 16) == (4, 1)
    (grouped,) = run_cases([case])
    assert grouped["group"] == 4 and one["group"] == 1 and one["aggregated"]
    assert grouped["samples_s"] == pytest.approx(one["samples_s"], rel=0.05)
    assert grouped["stall_max_s"] == pytest.approx(one["stall_max_s"], rel=0.05)


@pytest.mark.skipif(not os.path.isdir(FIXTURES[0]), reason=f"no recorded runs in {RUNS}")
@pytest.mark.parametrize("args, want", [
    (["--also", "naive-cursor"], "a cursor walks keys in order: add :none"),
    (["--also", "memory"], "no run of reader memory to take it from"),
    (["--reader-costs", "/nonexistent/fit.yaml"], "cannot read the calibration"),
    (["--tolerance", "-1"], "tolerance -1.0 ms keeps no fit, not even the best"),
])
def test_bad_prediction_options_one_line(tmp_path, args, want):
    r = _simulate("predict", "--platform", TESTBED, "--from", FIXTURES[0], "--ranks", "1",
                  *args, "-o", str(tmp_path / "out"))
    assert want in one_line(r, raw=True)


@needs_simgrid
@pytest.mark.skipif(not all(os.path.isdir(d) for d in FIXTURES),
                    reason=f"the recorded testbed runs are not in {RUNS}")
def test_calibration_carried_to_a_described_platform(tmp_path):
    """calibrate -o keeps each reader's costs; predict --reader-costs uses them on a described
    platform without fitting its storage, and says the result is unvalidated (calibrated on
    each reader's 2-rank run: what is carried over is the same, in a third of the time)."""
    fit = tmp_path / "fit.yaml"
    two = [f for f in FIXTURES if f.endswith("-n2")]
    r = _simulate("calibrate", *two, "--platform", TESTBED, "-o", str(fit))
    assert r.returncode == 0, r.stderr
    lustre = os.path.join(ROOT, "platforms", "lustre-flash.yaml")
    r = _simulate("predict", "--platform", lustre, "--reader-costs", str(fit), "--from", *FIXTURES,
                  "--ranks", "4,64", "--records", "100000", "-o", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    assert "unvalidated" in r.stdout and "not fitted" in r.stdout
    pred = json.loads((tmp_path / "p" / "prediction.json").read_text())
    assert pred["platform"]["storage"]["servers"] == 274       # as described
    assert not any(p["validated"] for p in pred["points"])
    # the near-equal fits' reader costs travel with the calibration: each point's range
    # holds its best fit's figures
    for p in pred["points"]:
        assert p["stall_s_lo"] <= p["stall_s_per_step"] <= p["stall_s_hi"]
        assert p["au_percent_lo"] <= p["au_percent"] <= p["au_percent_hi"]
    assert "near-equal fits (stall/step RMS within 1 ms of the best's)" in r.stdout


def test_runs_of_mixed_workloads_are_one_line_naming_the_run():
    from dataclasses import replace
    from hpcio.simulate.predict import check_one_workload
    w = _workload()
    check_one_workload([w, replace(w, name="same", ranks=2)])
    with pytest.raises(HpcioError, match=r"^other: runs of mixed workloads: its batch is 32, "
                                         r"w's 8 \(give runs of one workload\)$"):
        check_one_workload([w, replace(w, name="other", batch=32)])


def test_cold_runs_empty_the_node_cache_each_epoch():
    """--cache cold evicts before every epoch: a second epoch faults in what the first did;
    a warm one finds it resident."""
    from hpcio.simulate.calibrate import _faults_per_sample
    p = load_platform(TESTBED)                  # one node, a 4 GiB cache
    w = _workload(ranks=4, batch=8, records=4 * 8 * 3, steps=6, shuffle="global")
    warm, cold = (_faults_per_sample(w.__class__(**{**w.__dict__, "cold": c}), p, 64 << 10)
                  for c in (False, True))
    assert cold == pytest.approx(2 * warm)


def test_repeats_are_one_point_at_their_median():
    """Repeats of a point replay one plan: simulated once, compared with the median of what
    they measured; one reader's two shuffles stay two curves (``coordinated (none)``)."""
    from hpcio.simulate.workload import median_of_repeats
    ws = [_workload(name=f"r{k}", compute_s=c, measured={"stall_max_s": s, "au_pct": a})
          for k, (c, s, a) in enumerate([(0.01, 0.030, 40.0), (0.03, 0.010, 60.0),
                                          (0.02, 0.020, 50.0)])]
    other = _workload(name="g", reader="coordinated", shuffle="global", faults_per_sample=0.0,
                      measured={"stall_max_s": 0.001, "au_pct": 99.0})
    none = _workload(name="n", reader="coordinated", faults_per_sample=0.0,
                     measured={"stall_max_s": 0.004, "au_pct": 95.0})
    out = median_of_repeats(ws + [other, none])
    assert [w.case for w in out] == ["naive (none)", "coordinated", "coordinated (none)"]
    m = out[0]
    assert m.name == "naive (none) n=4 (median of 3)"
    assert (m.compute_s, m.measured["stall_max_s"], m.measured["au_pct"]) == (0.02, 0.02, 50.0)
    assert out[1] is other and out[2] is none


def test_a_workload_replays_the_runs_chunk_block_and_window():
    """A run's --block and --window (config.yaml) are the replayed plan's."""
    w = Workload(name="w", reader="coordinated", ranks=2, batch=4, steps=5, records=64,
                 record_bytes=100.0, shuffle="chunk", seed=3, compute_s=0.0, rest_s=0.0,
                 sync=True, prefetch=2, steady_steps=1, faults_per_sample=0.0, dataset="d",
                 block=4, window=8)
    plans = w.plans()
    for r in range(2):
        want = make_plan(64, 2, r, 4, seed=3, shuffle="chunk", block=4, window=8).head(5)
        assert plans[r].ravel().tolist() == want.ids.tolist()
    default = make_plan(64, 2, 0, 4, seed=3, shuffle="chunk").head(5)
    assert plans[0].ravel().tolist() != default.ids.tolist()


@needs_simgrid
def test_cpu_per_byte_is_not_paid_on_a_cache_hit():
    """A reader's CPU per sample is paid for every sample; its CPU per byte only for what the
    storage sends: in a warm second epoch whose records are all in the node's cache the
    step costs nothing, so the run's mean stall halves (16 records of 1 MB at 1 ms each)."""
    from dataclasses import replace
    from hpcio.simulate.calibrate import run_cases
    p = replace(load_platform(TESTBED), servers=1, latency_s=0.0, cache_bytes=1e12,
                nic_bps=1e15, nic_latency_s=0.0, server_bps=1e15, cores=2)
    w = Workload(name="hit", reader="naive", ranks=1, batch=16, steps=10, records=16 * 5,
                 record_bytes=1e6, shuffle="global", seed=0, compute_s=0.0, rest_s=0.0,
                 sync=False, prefetch=2, steady_steps=1, faults_per_sample=1.0,
                 dataset="synthetic")
    per_sample, per_byte = run_cases([Case(p, w, {"cpu_s": 1e-3, "window": 1_000_000}),
                                      Case(p, w, {"cpu_s": 0.0, "window": 1_000_000,
                                                  "cpu_s_per_byte": 1e-9})])
    assert per_sample["stall_max_s"] == pytest.approx(16e-3, rel=1e-3)
    assert per_byte["stall_max_s"] == pytest.approx(8e-3, rel=0.05)


@needs_simgrid
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_barrier_wakes_each_rank_once_per_round(ranks):
    """Ranks meet as gloo's dissemination barrier has them: log2(P) rounds, each waking every
    rank, through the node's run queue. With nothing to read or compute on one core, a
    step is the wake-ups back to back: (1 after compute + log2 P rounds) x P x WAKE_S."""
    from dataclasses import replace
    from hpcio.simulate.calibrate import run_cases
    from hpcio.simulate.engine import WAKE_S
    p = replace(load_platform(TESTBED), servers=1, latency_s=0.0, cache_bytes=0.0,
                nic_bps=1e15, nic_latency_s=0.0, server_bps=1e15, cores=1,
                cpu_quantum_s=1e-3, barrier_round_s=0.0)
    w = Workload(name="meet", reader="naive", ranks=ranks, batch=1, steps=20,
                 records=ranks * 20, record_bytes=1.0, shuffle="none", seed=0,
                 compute_s=0.0, rest_s=0.0, sync=True, prefetch=2, steady_steps=1,
                 faults_per_sample=1.0, dataset="synthetic")
    (f,) = run_cases([Case(p, w, {"cpu_s": 0.0, "window": 4096})])
    rounds = {2: 1, 4: 2, 8: 3}[ranks]
    assert ranks / f["samples_s"] == pytest.approx((1 + rounds) * ranks * WAKE_S, rel=0.1)
    # and, the cores shared fluidly (no wake-up queues), a step is the barrier's rounds
    (g,) = run_cases([Case(replace(p, cpu_quantum_s=0.0, barrier_round_s=1e-3), w,
                           {"cpu_s": 0.0, "window": 4096})])
    assert ranks / g["samples_s"] == pytest.approx(rounds * 1e-3, rel=0.01)


def test_barrier_round_from_the_last_rank_to_arrive():
    """The last rank to reach a step's barrier waits only the barrier's own rounds: a run's
    median of that wait, over log2 P rounds, is the platform's barrier round."""
    from hpcio.simulate.calibrate import fit_barrier
    run = os.path.join(ROOT, "analysis", "scale-sim", "testbed-runs", "global", "runs",
                       "inet-2048.lmdb-naive-n4-r0")
    from hpcio.simulate.workload import workload_from_run
    import numpy as np
    w = workload_from_run(run)
    waits = np.array([np.load(os.path.join(run, f"rank-{r}.npz"))["straggler_wait"][1:]
                      for r in range(4)])
    assert w.sync and w.barrier_s == pytest.approx(np.median(waits.min(axis=0)))
    p = load_platform(TESTBED)
    ws = [_workload(ranks=n, sync=True, barrier_s=b) for n, b in ((2, 4e-4), (4, 1e-3),
                                                                 (8, 1.5e-3))]
    assert fit_barrier(ws, p).round_s == pytest.approx(5e-4)        # 0.4, 0.5, 0.5 ms
    assert fit_barrier([_workload(ranks=4, sync=False)], p) == p
