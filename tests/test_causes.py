"""What the accelerator waits for: one rule per cause (hpcio.explain.verdict.CAUSES), and a
report that names, for a run where one cause dominates, that cause and no other: in the
table of causes, the findings, the AU finding's advice and the readers' comparison.

The runs: real ``hpcio.train`` runs made here, one per cause that needs a launch
(preprocessing: JPEG decoding on one thread under 2 ms of compute; the exchange: a 48 MB
allreduce over gloo every step; stragglers: two ranks drawing their compute times apart,
a barrier every step), and the recorded GlusterFS runs of tests/fixtures/hpcio-runs for
storage (the naive reader) and none (the coordinated reader, its accelerator busy). The
same check runs over every recorded run."""

import json
import os

import numpy as np
import pytest

from common.datasets import make_dataset
from common.fixtures import RUNS
from common.mpi import run_mpi
from hpcio.explain.findings import RULES, findings
from hpcio.explain.report import analyse, write
from hpcio.explain.runs import load
from hpcio.explain.tables import STEADY_PARTS
from hpcio.explain.verdict import (AU_PASS, CAUSE_PCT, CAUSES, NONE, cause, cause_text,
                                   causes, shares)

NAMES = [c.name for c in CAUSES]
TRAIN = ["-m", "hpcio.train", "--model", "emulate", "--progress", "off"]


def _fixtures():
    if not os.path.isdir(RUNS):
        pytest.skip(f"no fixture runs at {RUNS}")


# --- the rule table --------------------------------------------------------------------


def _figures(compute=100.0, **parts):
    """Step figures of a run whose steady step splits into ``parts`` (cause name: %), the
    rest compute; what the rules read besides."""
    f = {c.part: float(parts.get(c.name, 0.0)) for c in CAUSES}
    f["compute_pct_steady"] = compute - sum(f.values())
    stall = f["reads_pct_steady"] + f["prep_pct_steady"]
    f.update(fetch_pct_steady=f["reads_pct_steady"], stall_pct_steady=stall, stall_pct=stall,
             au_pct=f["compute_pct_steady"], stall_max_s=0.01, prep_s=0.01, exchange_s=0.01,
             straggler_s=0.01, other_s=0.01, first_wait_s=0.1, straggler_ratio=1.0)
    return f


def test_the_parts_are_the_whole_step():
    """The table's parts and compute are every component of the step, once each."""
    from hpcio.measure.steps import COMPONENTS
    cols = [c for cs in STEADY_PARTS.values() for c in cs]
    assert sorted(cols) == sorted(COMPONENTS)
    assert {c.part for c in CAUSES} | {"compute_pct_steady"} == set(STEADY_PARTS)


@pytest.mark.parametrize("name", NAMES)
def test_each_cause_from_its_threshold(name):
    at = _figures(**{name: CAUSE_PCT})
    assert cause(at) == name and [c.name for c, _ in causes(at)] == [name]
    assert cause_text(at).startswith(f"{name}: {CAUSE_PCT:.1f}% of the step")
    below = _figures(**{name: CAUSE_PCT - 0.01})
    assert cause(below) == NONE and causes(below) == []
    assert cause_text(below).startswith(f"{NONE}: the accelerator is busy")
    # two over the threshold: the larger is the run's cause, the other said beside it
    other = next(n for n in NAMES if n != name)
    both = _figures(**{name: 30.0, other: 20.0})
    assert cause(both) == name and f"also {other} 20.0%" in cause_text(both)


def test_findings_follow_the_cause_rule():
    """Over random splits of the step: a cause's finding fires exactly when the rule makes
    it a cause, and the AU finding's advice points at the run's cause (at its finding) or
    says that no part reaches the threshold."""
    rng = np.random.default_rng(7)

    class Run:
        path, name, config = "r", "r", {"reader": "naive"}
    for _ in range(300):
        split = rng.dirichlet(np.ones(len(NAMES) + 1) * 0.6) * 100
        f = _figures(**dict(zip(NAMES, split[1:])))
        got = findings([Run()], {"r": f})
        fired = {x.rule for x in got if x.rule in NAMES}
        assert fired == {c.name for c, _ in causes(f)}
        au = [x for x in got if x.rule == "AU"]
        assert bool(au) == (f["au_pct"] < AU_PASS)
        if au:
            named = {n for n in NAMES if f"the {n} finding" in au[0].advice}
            assert named == ({cause(f)} if cause(f) != NONE else set())
            assert (cause(f) == NONE) == ("no one part of the step" in au[0].advice)
    # every threshold of the table is written once: the rules' text is made from it
    text = {r.name: r.threshold for r in RULES}
    assert all(text[n] == f">= {CAUSE_PCT:g}% of the step, steady state" for n in NAMES)
    assert text["AU"] == f"< {AU_PASS:g}%"


# --- reports on real runs --------------------------------------------------------------


@pytest.fixture(scope="module")
def cause_runs(tmp_path_factory):
    """{cause: run directory}: three short runs made here, two recorded ones."""
    _fixtures()
    root = tmp_path_factory.mktemp("causes")
    mnist = make_dataset(root, "packed", "raw", records=256)
    inet = make_dataset(root, "packed", "jpeg", preset="imagenet", records=64)

    def train(ranks, name, data, *args):
        out = root / name
        p = run_mpi(ranks, TRAIN + ["--data", data.root, "--out", out, *args], timeout=300)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        return str(out)
    return {
        "preprocessing": train(1, "prep", inet, "--reader", "coordinated", "--preprocess",
                               "on", "--threads", "1", "--compute-time", "0.002",
                               "--batch", "8"),
        "exchange": train(2, "exchange", mnist, "--reader", "memory", "--compute-time",
                          "0.005", "--exchange-bytes", "48000000", "--exchange-via", "gloo",
                          "--batch", "8", "--steps", "12"),
        "straggler": train(2, "straggler", mnist, "--reader", "memory", "--compute-time",
                           "0.02", "--compute-dist", "uniform", "--compute-std", "0.011",
                           "--exchange-bytes", "0", "--exchange-via", "gloo", "--batch", "8",
                           "--steps", "12"),
        "storage": os.path.join(RUNS, "pfs-inet-lmdb-naive-n2"),
        NONE: os.path.join(RUNS, "pfs-inet-lmdb-coordinated-n2"),
    }


def _report(dirs, out):
    runs, problems, notes = load(dirs)
    a = analyse(runs, problems, notes, allow_mixed=True)
    write(a, str(out), ("md", "json"))
    with open(os.path.join(str(out), "summary.json")) as f:
        doc = json.load(f)
    with open(os.path.join(str(out), "report.md")) as f:
        return a, doc, f.read()


def _names_only(a, doc, md, want):
    """Each run of ``want`` ({run name: cause}) is said to wait for that cause and no
    other, wherever the report says what a run waits for."""
    rows = {}
    lines = md.splitlines()
    head = lines.index(next(ln for ln in lines if ln.startswith("| run | reader | P | AU")))
    labels = [c.strip() for c in lines[head].strip("|").split("|")]
    for ln in lines[head + 2:]:
        if not ln.startswith("|"):
            break
        cells = dict(zip(labels, (c.strip() for c in ln.strip("|").split("|"))))
        rows[cells["run"]] = cells
    assert set(rows) == set(want)
    for run in a.runs:
        name, expect = run.name, want[run.name]
        f = a.figures[run.path]
        others = [n for n in NAMES if n != expect]
        # the premise: one part of the step at or above the threshold, or none
        got = shares(f)
        if expect != NONE:
            assert got[expect] >= CAUSE_PCT, (name, got)
        assert all(got[n] < CAUSE_PCT for n in others), (name, got)
        # the table of causes, in summary.json and the report
        assert doc["causes"][name]["cause"] == expect, (name, doc["causes"][name])
        assert rows[name]["waits for"] == expect
        assert doc["causes"][name]["why"].startswith(f"{expect}: ")
        assert not any(f"also {n}" in doc["causes"][name]["why"] for n in others)
        # the findings: the cause's own, no other cause's; the AU advice points at it
        mine = [x for x in doc["findings"] if x["run"] == name]
        assert {x["rule"] for x in mine if x["rule"] in NAMES} == \
            (set() if expect == NONE else {expect}), (name, mine)
        for x in mine:
            if x["rule"] == "AU":  # none: AU under the pass mark from several small waits
                assert (f"see the {expect} finding" if expect != NONE else
                        "no one part of the step") in x["advice"], x
            assert not any(f"the {n} finding" in x["advice"] for n in others), x
        # the comparisons say the same of each reader they compare
        for _, cs in a.comparisons:
            for c in cs:
                if name in c["text"].split("): ")[0]:
                    assert f"{run.reader}: {expect}: " in c["text"], c["text"]


@pytest.mark.mpi
def test_report_names_the_dominant_cause_and_no_other(cause_runs, tmp_path):
    a, doc, md = _report(list(cause_runs.values()), tmp_path / "report")
    want = {os.path.basename(d): name for name, d in cause_runs.items()}
    _names_only(a, doc, md, want)
    # the one comparison (naive against coordinated, recorded): storage against none
    [(title, [c])] = a.comparisons
    assert title == "Why naive stalls more than coordinated"
    assert "naive: storage: " in c["text"] and "coordinated: none: " in c["text"]


def test_report_on_the_recorded_runs_names_their_causes(tmp_path):
    """Every recorded run: on GlusterFS the naive reader waits for storage; everywhere else
    no part of the step reaches the threshold (none), even where the naive reader's AU is
    under the pass mark (HDF5 on local disk: several small waits)."""
    _fixtures()
    dirs = sorted(os.path.join(RUNS, d) for d in os.listdir(RUNS)
                  if os.path.isdir(os.path.join(RUNS, d)))
    a, doc, md = _report(dirs, tmp_path / "report")
    want = {os.path.basename(d): "storage" if d.endswith(("pfs-inet-lmdb-naive-n1",
                                                          "pfs-inet-lmdb-naive-n2",
                                                          "pfs-inet-lmdb-naive-n4"))
            else NONE for d in dirs}
    _names_only(a, doc, md, want)
