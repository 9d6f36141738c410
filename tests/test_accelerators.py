"""MLPerf Storage's accelerators-supported search (``hpcio.sweep --find-max-accelerators``):
the judgement of a point's runs and the search as functions, then real searches."""

import json
import os

import pytest

from common.datasets import make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_py
from hpcio.explain.accelerators import bracket, judge, rules, search


def runs(*pairs, status="done"):
    return [{"status": status, "figures": {"au_percent": a, "samples_per_s": r}}
            for a, r in pairs]


def test_a_point_passes_when_every_run_keeps_the_threshold():
    ok = judge(runs((95, 100), (92, 102), (91, 101)), 90)
    # MLPerf Storage publishes the mean of the measured runs
    assert ok["samples_per_s_mean"] == 101 and ok["au_percent_mean"] == pytest.approx(92.67,
                                                                                      abs=0.01)
    assert "samples/s 101.0 (the mean, MLPerf's figure), spread 2.0%" in ok["verdict"]
    assert ok["passed"] and ok["agree"] and ok["au_percent_median"] == 92
    low = judge(runs((95, 100), (89.9, 100)), 90)
    assert not low["passed"] and "fails" in low["verdict"]


def test_runs_that_disagree_by_more_than_5_percent_break_the_rules():
    j = judge(runs((95, 100), (95, 106)), 90)
    assert j["passed"] and not j["agree"] and j["spread_percent"] == pytest.approx(5.825, 0.01)
    ok, why = rules(1, 5, [dict(ranks=4, **j)])
    assert not ok and why == ["the runs at 4 ranks disagree: samples/s spread 5.8% > 5%"]
    assert rules(1, 5) == (True, [])
    assert rules(0, 2)[1] == ["no warm-up run before the measured ones",
                              "2 measured run(s) per point, the rules ask 5"]


def test_a_run_that_did_not_finish_fails_its_point():
    j = judge(runs((95, 100)) + runs((0, 0), status="failed"), 90)
    assert not j["passed"] and "1 of 2 runs did not finish" in j["verdict"]


@pytest.mark.parametrize("limit,expect,probes", [(0, 0, [1]), (3, 2, [1, 4, 2]),
                                                  (64, 16, [1, 4, 8, 16])])
def test_search_bisects_the_counts(limit, expect, probes):
    seen = []

    def probe(n):
        seen.append(n)
        return n <= limit
    assert search([16, 1, 2, 4, 8], probe) == expect
    assert seen == probes


def test_bracket_takes_known_counts_and_bisects_between_them():
    """The simulation's use: every asked count known, then the counts between the last
    that passes and the first that fails, none of the known probed again."""
    seen = []

    def probe(n):
        seen.append(n)
        return n <= 5
    known = {1: True, 4: True, 8: False, 16: False}
    assert bracket(known, probe, known=known, between=True) == (5, 6)
    assert seen == [6, 5]
    assert bracket(known, probe, known=known) == (4, 8)   # a sweep: the candidates only
    assert bracket([2, 1], lambda n: False) == (None, 1)
    assert bracket({1: 1, 2: 1}, probe, known={1: True, 2: True}, between=True) == (2, None)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("acc"), "packed", "raw", records=64)


TRAIN = ["--", "--model", "emulate", "--compute-time", "0.002", "--batch", "4",
         "--progress", "off"]


@pytest.mark.mpi
def test_search_on_this_machine_records_every_probe_and_the_answer(data, tmp_path):
    out = tmp_path / "s"
    p = run_py(["-m", "hpcio.sweep", "--data", data.root, "--reader", "naive", "--ranks",
                "1,2", "--find-max-accelerators", "--repeat", 2, "--warmup", 0,
                "--out", out, *TRAIN, "--au-threshold", "2"], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((out / "sweep.json").read_text())
    s = doc["search"]
    assert s["max_accelerators"] == 2 and [x["ranks"] for x in s["probes"]] == [1, 2]
    assert all(x["passed"] and len(x["au_percent"]) == 2 for x in s["probes"])
    assert len(doc["runs"]) == 4 and all(r["status"] == "done" for r in doc["runs"])
    assert s["rules"]["followed"] is False and "no warm-up run" in s["rules"]["reasons"][0]
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("hpcio.sweep: 2 accelerator(s) supported with reader naive")
    assert "rules not followed" in last


@pytest.mark.mpi
def test_when_the_smallest_count_fails_the_answer_is_0_and_exit_0(data, tmp_path):
    out = tmp_path / "s"
    p = run_py(["-m", "hpcio.sweep", "--data", data.root, "--reader", "naive", "--ranks",
                "1,2,4", "--find-max-accelerators", "--repeat", 1, "--out", out, *TRAIN,
                "--au-threshold", "100"], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["search"]["max_accelerators"] == 0 and len(doc["search"]["probes"]) == 1
    assert [r.get("warmup", False) for r in doc["runs"]] == [True, False]
    assert "0 accelerators supported" in p.stdout and "already fails" in p.stdout


@pytest.mark.hostile
def test_a_search_without_a_threshold_says_how_to_give_one(data, tmp_path):
    p = run_main(["-m", "hpcio.sweep", "--data", data.root, "--reader", "naive",
                  "--find-max-accelerators", "--out", tmp_path / "s", *TRAIN])
    assert "--au-threshold" in one_line(p, "hpcio.sweep")
    assert not (tmp_path / "s").exists()


@pytest.mark.mpi
def test_past_the_largest_count_the_simulation_answers_marked_simulated(data, tmp_path):
    out = tmp_path / "s"
    testbed = os.path.join(os.path.dirname(os.path.dirname(__file__)), "platforms",
                           "testbed.yaml")
    p = run_py(["-m", "hpcio.sweep", "--data", data.root, "--reader", "coordinated",
                "--ranks", "1,2", "--find-max-accelerators", "--repeat", 1, "--warmup", 0,
                "--simulate-beyond", testbed, "--out", out, *TRAIN, "--au-threshold",
                "2"], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    sim = json.loads((out / "sweep.json").read_text())["search"]["simulated"]
    assert sim["note"] == "simulated, not measured" and "error" not in sim, sim
    assert sim["simulated_ranks"] == [4, 8, 16]               # 16 x batch 4 = the 64 records
    assert sim["ranks"] is None or 2 < sim["ranks"] <= 16
    with open(out / "simulated" / "prediction.json") as f:
        pred = json.load(f)
    assert sorted({q["ranks"] for q in pred["points"]}) == [4, 8, 16]
    assert "hpcio.sweep: simulated on" in p.stdout and "not measured" in p.stdout


def test_a_workload_is_emulated_compute_so_its_search_may_oversubscribe(data, tmp_path):
    p = run_main(["-m", "hpcio.sweep", "--data", data.root, "--reader", "naive", "--ranks",
                  "1,64", "--dry-run", "--out", tmp_path / "s", "--", "--workload",
                  "resnet50_h100"])
    assert p.returncode == 0 and p.stdout.count("-n 64") == 1, p.stdout + p.stderr
    p = run_main(["-m", "hpcio.sweep", "--data", data.root, "--reader", "naive", "--ranks",
                  "64", "--dry-run", "--out", tmp_path / "s", "--", "--workload",
                  "resnet50_h100", "--model", "lenet"])
    assert "only emulated compute" in one_line(p, "hpcio.sweep")
