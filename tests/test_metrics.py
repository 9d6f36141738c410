"""Step accounting, counters, sampler, summary figures, emulated compute, results files."""

import json
import os
import re
import signal
import time

import numpy as np
import pytest

from hpcio.train.computetime import DISTRIBUTIONS, ComputeTime
from hpcio.train.emulate import EmulatedModel, as_module
from hpcio.errors import HpcioError
from hpcio.fsutil import aligned_empty
from hpcio.explain.summary import figures_line, format_table, summarize
from hpcio.measure.probes import counters, delta, proc_io, read_ahead_kb
from hpcio.measure.rundir import RunDir
from hpcio.measure.sampler import Sampler
from hpcio.measure.steps import COMPONENTS, STEP_FIELDS, StepLog, rank_summary, split_stall
from hpcio.train.stop import StopFlag, StopVote


def test_split_stall_overlaps():
    # batch fetched [1, 3], prepared [3, 4]; the trainer waited [2, 5]
    assert split_stall(2, 5, 1, 3, 4) == (1, 1, 1)
    # it was ready before the wait began: all of the (short) wait is hand-over
    assert split_stall(10, 10.5, 1, 3, 4) == (0, 0, 0.5)
    # waited through the whole fetch and prep
    f, p, o = split_stall(0, 10, 1, 3, 4)
    assert (f, p, o) == (2, 1, 7) and f + p + o == 10


def test_steplog_components_add_up_and_grows():
    log = StepLog(2, origin=100.0)
    t = 100.0
    for s in range(5):  # more than its capacity: it grows (off the usual path)
        st = [t + s + k * 0.1 for k in range(8)]
        log.add(0, s, *st, st[0] - 0.5, st[0] + 0.05, st[0] + 0.08, records=4, nbytes=40)
    a = log.arrays()
    assert set(a) == set(STEP_FIELDS) and len(a["wall"]) == 5
    np.testing.assert_allclose(sum(a[c] for c in COMPONENTS), a["wall"])
    np.testing.assert_allclose(a["wall"], 0.7)
    # compute ends at t3; the barrier at t4, the allreduce at t5
    np.testing.assert_allclose(a["straggler_wait"], 0.1)
    np.testing.assert_allclose(a["exchange"], 0.1)
    np.testing.assert_allclose(a["fetch"], 0.05)
    np.testing.assert_allclose(a["prep"], 0.03)
    np.testing.assert_allclose(a["t0"], np.arange(5))
    assert a["records"].dtype == np.int64 and a["nbytes"].sum() == 200


def _arrays(walls, computes, steps, epochs, records=8, nbytes=800):
    n = len(walls)
    a = {f: np.zeros(n) for f in STEP_FIELDS}
    a["wall"], a["compute"] = np.asarray(walls, float), np.asarray(computes, float)
    a["stall_other"] = a["wall"] - a["compute"]
    a["step"], a["epoch"] = np.asarray(steps), np.asarray(epochs)
    a["records"], a["nbytes"] = np.full(n, records), np.full(n, nbytes)
    return a


def test_au_both_ways_and_first_step_wait():
    # first steps are slow (pipeline start-up); the rest run at 80% compute
    a = _arrays([5, 1, 1, 5, 1, 1], [0.5, .8, .8, 0.5, .8, .8], [0, 1, 2, 0, 1, 2],
                [0, 0, 0, 1, 1, 1])
    r = rank_summary(a)
    assert r["au_excludes_first_step"] and r["steps_measured"] == 4
    assert r["au"] == pytest.approx(0.8)  # MLPerf Storage's rule
    assert r["au_all_steps"] == pytest.approx(4.2 / 14)  # every step
    assert r["epoch_time"] == pytest.approx(14)
    assert [e["au"] for e in r["epochs"]] == pytest.approx([0.8, 0.8])
    assert [e["au_all_steps"] for e in r["epochs"]] == pytest.approx([2.1 / 7] * 2)
    assert [e["first_step_wait"] for e in r["epochs"]] == pytest.approx([4.5, 4.5])
    # epochs of one step: nothing would be left, so every step counts (and it says so)
    one = rank_summary(_arrays([2, 2], [1, 1], [0, 0], [0, 1]))
    assert not one["au_excludes_first_step"] and one["au"] == pytest.approx(0.5)
    assert one["au_all_steps"] == pytest.approx(0.5)


def test_summarize_across_ranks():
    # two epochs of three steps; rank 1 is slower and waits longer for its first batches
    fast = rank_summary(_arrays([9, 1, 1, 3, 1, 1], [0, .9, .9, 0, .9, .9],
                                [0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1]))
    slow = rank_summary(_arrays([9, 2, 2, 5, 2, 2], [0, .9, .9, 0, .9, .9],
                                [0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1]))
    s = summarize([fast, slow])
    # MLPerf Storage's rule: each epoch's first step left out of AU only
    assert s["au_percent"] == pytest.approx(100 * (0.9 + 0.45) / 2)
    assert s["au_percent_min"] == pytest.approx(45) and s["au_percent_max"] == pytest.approx(90)
    # every step: 3.6 s of compute in 16 s (fast) and in 22 s (slow)
    assert s["au_percent_all_steps"] == pytest.approx(100 * (3.6 / 16 + 3.6 / 22) / 2)
    assert s["au_percent_all_steps_min"] == pytest.approx(100 * 3.6 / 22)
    assert s["au_percent_all_steps_per_rank"] == pytest.approx([100 * 3.6 / 16,
                                                                100 * 3.6 / 22])
    # throughput over whole epochs: each rank's rate over all its steps, summed
    assert s["samples_per_s"] == pytest.approx(48 / 16 + 48 / 22)
    assert s["mib_per_s"] == pytest.approx((4800 / 16 + 4800 / 22) / 2 ** 20)
    # the time split over every step too, each rank's share averaged over ranks (stall =
    # wall - compute here): it adds up to 100, and compute is the AU over every step
    assert s["stall_percent"] == pytest.approx(100 * (12.4 / 16 + 18.4 / 22) / 2)
    assert s["stall_percent"] + s["compute_percent"] == pytest.approx(100)
    assert s["compute_percent"] == pytest.approx(s["au_percent_all_steps"])
    # first-step wait: each epoch's first-step stall, mean and max over ranks
    assert [e["first_step_wait_s_mean"] for e in s["per_epoch"]] == pytest.approx([9, 4])
    assert [e["first_step_wait_s_max"] for e in s["per_epoch"]] == pytest.approx([9, 5])
    assert s["first_step_wait_s_mean"] == pytest.approx(6.5)
    assert s["first_step_wait_s_max"] == pytest.approx(9)
    assert [e["au_percent"] for e in s["per_epoch"]] == pytest.approx([67.5, 67.5])
    assert (s["slowest_rank"], s["fastest_rank"]) == (1, 0)
    assert s["slowest_over_fastest"] == pytest.approx(22 / 16)
    assert s["records"] == 96
    # epoch time is one epoch's: the slowest rank's 13 s and 9 s, not their 22 s sum
    assert s["epoch_s_mean"] == pytest.approx(11) and s["epoch_time_s_slowest"] == 22
    text = format_table(s, "title")
    assert re.search(r"epoch time, slowest rank +11\.000 s \(mean over 2 epoch\(s\)\)", text)
    for label in ("= AU over every step", "AU % (MLPerf Storage rule)", "first-step wait",
                  "first step of each epoch excluded", "samples/s (every step)", "rank 1"):
        assert label in text, label
    assert "9.000 s max" in text


def test_straggler_wait_is_its_own_column_and_older_runs_had_none():
    # rank 1 waits 0.3 s for its batch; rank 0, done early, waits for it in the exchange
    late = _arrays([1.4], [1.0], [1], [0])
    late["stall_other"][:] = 0.3
    late["exchange"][:] = 0.1
    early = _arrays([1.4], [1.0], [1], [0])
    early["stall_other"][:] = 0.0
    early["straggler_wait"][:] = 0.3
    early["exchange"][:] = 0.1
    s = summarize([rank_summary(early), rank_summary(late)])
    assert s["stall_percent"] == pytest.approx(100 * 0.3 / 2.8)
    assert s["straggler_wait_percent"] == pytest.approx(100 * 0.3 / 2.8)
    assert s["exchange_percent"] == pytest.approx(100 * 0.2 / 2.8)
    assert s["au_percent_all_steps"] == pytest.approx(100 / 1.4)  # AU = compute / wall
    text = format_table(s)
    assert re.search(r"\n    straggler wait +10\.7  at the per-step barrier", text)
    assert re.search(r"\n    exchange +7\.1\n", text)
    shown = [float(x) for x in re.findall(r"\n    (?:compute|stall|straggler wait|exchange|"
                                          r"h2d|ckpt|other) +(\d+\.\d)", text)]
    assert sum(shown) == pytest.approx(100, abs=0.25)  # the split adds up on the console
    assert figures_line(s) == ("AU 71.4% (MLPerf rule); every step: compute 71.4%, stall "
                               "10.7%, straggler wait 10.7%, exchange 7.1%")
    # a rank file from before the exchange: both components were 0
    old = {k: v for k, v in _arrays([1.0], [0.5], [1], [0]).items()
           if k not in ("straggler_wait", "exchange")}
    r = rank_summary(old)
    assert r["all"]["straggler_wait"] == r["all"]["exchange"] == 0.0
    assert summarize([r])["straggler_wait_percent"] == 0.0


def test_counters_and_delta():
    a = counters()
    with open(__file__, "rb") as f:
        f.read()
    x = aligned_empty(4 << 20)  # a fresh anonymous mapping: touching it faults
    x[:] = 1
    b = counters()
    d = delta(a, b)
    assert d["io"]["rchar"] >= os.path.getsize(__file__)
    assert d["rusage"]["minflt"] > 0 and d["rusage"]["utime"] >= 0
    assert d["rusage"]["maxrss_kib"] == b["rusage"]["maxrss_kib"]  # a level, not a count
    assert set(proc_io()) >= {"rchar", "read_bytes"}
    del x


def test_sampler_takes_real_samples(tmp_path):
    s = Sampler(interval=0.05, data_path=str(tmp_path))
    s.start()
    t = time.perf_counter()
    while time.perf_counter() - t < 0.3:  # keep a core busy
        pass
    s.stop()
    d = s.as_dict()
    assert len(d["t"]) >= 3 and d["interval_s"] == 0.05
    for k in ("cpu_user", "cpu_system", "cpu_iowait", "cpu_idle"):
        assert all(0 <= v <= 1 for v in d[k]), k
    assert max(d["cpu_user"]) > 0
    assert all(v > 0 for v in d["rss_bytes"])
    assert all(v is None for v in d["gpu_util"])  # no GPU here: fields present, empty
    assert d["disk_read_bytes_total"] >= 0 and isinstance(d["disks"], list)
    json.dumps(d)


@pytest.mark.parametrize("dist", list(DISTRIBUTIONS))
def test_compute_time_distributions(dist):
    std = 0.0 if dist == "fixed" else 0.002
    ct = ComputeTime(0.01, std, dist, seed=1, rank=0, block=1000)
    x = np.array([ct.draw() for _ in range(5000)])  # crosses block boundaries
    assert (x >= 0).all()
    assert x.mean() == pytest.approx(0.01, rel=0.02)
    assert x.std() == pytest.approx(std, rel=0.1, abs=1e-12)
    again = ComputeTime(0.01, std, dist, seed=1, rank=0, block=1000)
    assert [again.draw() for _ in range(10)] == list(x[:10])  # seeded
    if dist != "fixed":
        other = ComputeTime(0.01, std, dist, seed=1, rank=1)
        assert [other.draw() for _ in range(10)] != list(x[:10])  # ranks differ


def test_compute_time_rejects_bad_values():
    with pytest.raises(HpcioError):
        ComputeTime(-1)
    with pytest.raises(HpcioError):
        ComputeTime(0.1, dist="gamma")
    # a wide normal is clipped at 0, never negative
    ct = ComputeTime(0.001, 0.01, "normal")
    assert min(ct.draw() for _ in range(1000)) == 0.0


def test_emulated_model_sleeps_its_draw():
    m = EmulatedModel(ComputeTime(0.02))
    t = time.perf_counter()
    assert m.step() == 0.02
    assert 0.02 <= time.perf_counter() - t < 0.05
    assert sum(p.numel() for p in as_module(m).parameters()) == 1


def test_rundir_atomic_files_and_refuses_to_overwrite(tmp_path):
    run = RunDir.create(tmp_path / "r")
    run.json("a.json", {"x": np.int64(3), "y": np.arange(2)})
    run.yaml("c.yaml", {"k": [1, 2]})
    run.npz("d.npz", {"w": np.ones(3)})
    run.text("e.txt", "hi\n")
    with open(run.file("a.json")) as f:
        assert json.load(f) == {"x": 3, "y": [0, 1]}
    assert np.load(run.file("d.npz"))["w"].sum() == 3
    assert sorted(os.listdir(run.path)) == [".hpcio-run", "a.json", "c.yaml", "d.npz", "e.txt"]
    with pytest.raises(HpcioError, match="not empty"):
        RunDir.create(tmp_path / "r")
    assert read_ahead_kb(str(tmp_path)) is None or read_ahead_kb(str(tmp_path)) >= 0


def test_stopflag_and_single_rank_vote():
    flag = StopFlag()
    try:
        assert not flag
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert flag and flag.signum == signal.SIGTERM
    finally:
        flag.restore()
    vote = StopVote(None)
    assert vote.poll(False) is False and vote.settle(False) is False
    assert vote.poll(True) is True
    assert vote.settle(False) is True  # a raised flag stays raised
    vote.close()
