"""The report says only what its numbers bear out: verdicts and headings from medians and
ranges over repeats, advice per reader, the console's definitions, and a storage limit
only when one was measured and given. Run directories: the real runs of
tests/fixtures/hpcio-runs, some made slower step by step, their summaries made again
by the trainer's own functions."""

import csv
import json
import os
import re
import shutil

import numpy as np
import pytest

from common.fixtures import RUNS
from common.failure import one_line
from common.inproc import run_main
from hpcio.explain.report import analyse, write
from hpcio.explain.runs import load
from hpcio.explain.summary import summarize
from hpcio.explain.verdict import DIFF_POINTS, Verdict, compare, heading
from hpcio.analyze import main
from hpcio.measure.steps import rank_summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- verdicts --------------------------------------------------------------------------


def test_one_run_each_names_the_reader_that_stalls_more_and_by_how_much():
    v = compare("naive", [20.8], "coordinated", [56.1])
    assert (v.more, v.less) == ("coordinated", "naive")
    assert v.text == ("coordinated stalls more than naive: 56.1% against 20.8%, 35.3 points "
                      "more, 2.7x; one run each: no spread to judge the difference by")


def test_overlapping_ranges_are_no_clear_difference():
    v = compare("naive", [20.0, 31.0, 25.0], "coordinated", [29.0, 35.0, 33.0])
    assert v.more is None and v.less is None
    assert v.text == ("no clear difference: naive 25.0% (median of 3, 20.0-31.0) against "
                      "coordinated 33.0% (median of 3, 29.0-35.0); the ranges overlap")
    assert compare("a", [5.0], "b", [5.0]).more is None


def test_ranges_apart_are_a_difference_between_medians():
    v = compare("naive", [40.0, 44.0, 41.0], "coordinated", [30.0, 35.0])
    assert (v.more, v.less) == ("naive", "coordinated")
    assert "41.0% (median of 3, 40.0-44.0) against 32.5% (median of 2, 30.0-35.0)" in v.text
    assert "one run each" not in v.text


def test_a_gap_under_a_point_is_no_difference():
    """0.14% against 0.06% of the step, one run each: no reader "stalls more", and no
    heading says so (a difference is DIFF_POINTS or more)."""
    v = compare("naive", [0.14], "coordinated", [0.06])
    assert v.more is None and v.less is None
    assert v.text == ("no clear difference: naive 0.1% against coordinated 0.1%, 0.08 points "
                      f"apart (a difference is {DIFF_POINTS:g} point or more)")
    assert heading([v], "naive", "coordinated") == \
        "naive and coordinated: no clear difference in stall"
    assert compare("naive", [0.1 + DIFF_POINTS], "coordinated", [0.1]).more == "naive"


def test_heading_claims_only_what_every_verdict_says():
    c, n, none = Verdict("coordinated", "naive", ""), Verdict("naive", "coordinated", ""), \
        Verdict(None, None, "")
    assert heading([c, c], "naive", "coordinated") == "Why coordinated stalls more than naive"
    assert heading([none], "naive", "coordinated") == \
        "naive and coordinated: no clear difference in stall"
    for mixed in ([c, n], [n, none]):
        assert heading(mixed, "naive", "coordinated") == \
            "Which reader stalls more: naive or coordinated"


# --- reports from run directories ------------------------------------------------------


def _fixtures():
    if not os.path.isdir(RUNS):
        pytest.skip(f"no fixture runs at {RUNS}")


def _run(name, dest, extra_s=0.0, as_name=None):
    """A writable, untraced copy of fixture run ``name`` whose every step waits ``extra_s``
    longer in the reader's call; rank-R.json's and summary.json's figures made again from
    the steps by the trainer's own functions."""
    d = os.path.join(str(dest), as_name or name)
    shutil.copytree(os.path.join(RUNS, name), d, ignore=shutil.ignore_patterns("darshan"))
    for p, _, files in os.walk(d):
        os.chmod(p, 0o755)
        for f in files:
            os.chmod(os.path.join(p, f), 0o644)
    per_rank = []
    for r in range(len([f for f in os.listdir(d) if f.endswith(".npz")])):
        with np.load(os.path.join(d, f"rank-{r}.npz")) as z:
            a = dict(z)
        a["fetch"] = a["fetch"] + extra_s
        a["wall"] = a["wall"] + extra_s
        a["t0"] = a["t0"] + extra_s * np.arange(len(a["t0"]))
        np.savez(os.path.join(d, f"rank-{r}.npz"), **a)
        with open(os.path.join(d, f"rank-{r}.json")) as f:
            info = json.load(f)
        info["summary"] = rank_summary(a)
        per_rank.append(info["summary"])
        with open(os.path.join(d, f"rank-{r}.json"), "w") as f:
            json.dump(info, f)
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    s["metrics"] = summarize(per_rank)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(s, f)
    return d


def _report(dirs, out, **kw):
    runs, problems, notes = load(dirs)
    a = analyse(runs, problems, notes, **kw)
    write(a, str(out))
    with open(os.path.join(str(out), "summary.json")) as f:
        doc = json.load(f)
    with open(os.path.join(str(out), "report.md")) as f:
        return a, doc, f.read()


def test_coordinated_stalling_more_is_said_so_everywhere(tmp_path):
    """The coordinated runs made 80 ms a step slower than naive's: every heading, verdict
    and recommendation matches the numbers, and the report's figures are the console's."""
    _fixtures()
    dirs = [_run("pfs-inet-lmdb-naive-n1", tmp_path), _run("pfs-inet-lmdb-naive-n2", tmp_path),
            _run("pfs-inet-lmdb-coordinated-n1", tmp_path, 0.08),
            _run("pfs-inet-lmdb-coordinated-n2", tmp_path, 0.08)]
    a, doc, md = _report(dirs, tmp_path / "out")
    rows = {(r["reader"], r["ranks"]): r for r in doc["tables"]["table-a"]}
    for n in (1, 2):
        for key in ("stall_pct", "stall_pct_steady"):
            assert rows["coordinated", n][key] > rows["naive", n][key]
    [(title, points)] = a.comparisons
    assert title == "Why coordinated stalls more than naive"
    assert f"## {title}" in md and "Why naive stalls" not in md
    for p in points:
        for view, key in (("every_step", "stall_pct"), ("steady", "stall_pct_steady")):
            v = p[view]
            assert (v["more"], v["less"]) == ("coordinated", "naive")
            more, less = rows["coordinated", p["ranks"]][key], rows["naive", p["ranks"]][key]
            assert f"{more:.1f}% against {less:.1f}%" in v["text"]
            assert f"{more - less:.1f} points more" in v["text"]
        assert "In steady state coordinated waited" in p["text"]
    # advice per reader: never "use the coordinated reader" to the coordinated reader
    for f in doc["findings"]:
        if "coordinated" in f["run"]:
            assert "(the coordinated reader)" not in f["advice"]
            assert "coordinated reader merges" not in f["advice"]
    stall = {f["run"]: f for f in doc["findings"] if f["rule"] == "storage"}
    assert "--reader-prefetch" in stall["pfs-inet-lmdb-coordinated-n2"]["advice"]
    assert "(the coordinated reader)" in stall["pfs-inet-lmdb-naive-n2"]["advice"]
    # one definition per figure: the report's is the run's summary.json (the console's)
    for d in dirs:
        with open(os.path.join(d, "summary.json")) as f:
            m = json.load(f)["metrics"]
        name = os.path.basename(d)
        reader, n = name.split("-")[-2], int(name[-1])
        r = rows[reader, n]
        assert r["stall_pct"] == pytest.approx(m["stall_percent"])
        assert r["samples_s"] == pytest.approx(m["samples_per_s"])
        assert r["mib_s"] == pytest.approx(m["mib_per_s"])
        assert r["au_pct"] == pytest.approx(m["au_percent"])
        assert r["au_all_pct"] == pytest.approx(m["au_percent_all_steps"])
        assert r["first_wait_s"] == pytest.approx(m["first_step_wait_s_max"])
    # two rank counts: no fit is drawn or promised
    caption = re.search(r"!\[([^]]*)\]\(stall-vs-ranks.png\)", md).group(1)
    assert "scaling fit for" not in caption
    assert "no fit for coordinated (stall measured at 2 rank count(s) (1, 2); the model " \
           "needs 3)" in caption
    # untraced runs: the empty Darshan table says so and how to trace them
    assert "(no rows)" not in md
    assert "None of these runs was traced with Darshan" in md
    assert "--darshan LIB" in md and "scripts/darshan-local.sh build" in md \
        and "HPCIO_DARSHAN=LIB" in md


def test_repeats_whose_ranges_overlap_are_no_clear_difference(tmp_path):
    """Two repeats a reader at 2 ranks: naive's as recorded and 30 ms a step slower, the
    coordinated reader's 22 and 32 ms slower. Medians and ranges decide, not the first
    run (on which naive alone would stall less)."""
    _fixtures()
    dirs = [_run("pfs-inet-lmdb-naive-n2", tmp_path, 0.0, "naive-n2-r0"),
            _run("pfs-inet-lmdb-naive-n2", tmp_path, 0.03, "naive-n2-r1"),
            _run("pfs-inet-lmdb-coordinated-n2", tmp_path, 0.022, "coordinated-n2-r0"),
            _run("pfs-inet-lmdb-coordinated-n2", tmp_path, 0.032, "coordinated-n2-r1")]
    a, doc, md = _report(dirs, tmp_path / "out")
    rows = {r["reader"]: r for r in doc["tables"]["table-a"]}
    for key in ("stall_pct", "stall_pct_steady"):  # the premise: the ranges overlap
        n, c = rows["naive"], rows["coordinated"]
        assert n["repeats"] == c["repeats"] == 2
        assert n[f"{key}_min"] <= c[f"{key}_max"] and c[f"{key}_min"] <= n[f"{key}_max"]
        assert n[key] == pytest.approx((n[f"{key}_min"] + n[f"{key}_max"]) / 2)
    first = {r.reader: a.figures[r.path]["stall_pct"] for r in reversed(a.runs)}
    assert compare("naive", [first["naive"]], "coordinated",
                   [first["coordinated"]]).more == "coordinated"
    [(title, [p])] = a.comparisons
    assert title == "naive and coordinated: no clear difference in stall"
    assert p["every_step"]["more"] is None and p["steady"]["more"] is None
    assert "no clear difference: naive" in p["text"] and "(median of 2, " in p["text"]
    # the tables show each median with its range
    n = rows["naive"]
    assert f"{n['stall_pct']:.1f} ({n['stall_pct_min']:.1f}-{n['stall_pct_max']:.1f})" in md


def test_storage_limit_is_drawn_only_when_given(tmp_path):
    """Without --storage-mibs no limit is drawn or called measured; with it, its value is
    the line and the model's aggregate limit."""
    _fixtures()
    dirs = [_run(f"pfs-inet-lmdb-{r}-n{n}", tmp_path / "in") for r in ("naive", "coordinated")
            for n in (1, 2, 4)]
    main(dirs + ["-o", str(tmp_path / "plain"), "--report-formats", "md,json", "--no-drishti"])
    with open(tmp_path / "plain" / "report.md") as f:
        md = f.read()
    caption = re.search(r"!\[([^]]*)\]\(bandwidth.png\)", md).group(1)
    assert "no storage limit drawn: none was given (--storage-mibs" in caption
    assert "storage limit" not in md.replace("no storage limit drawn", "")
    assert "lower bounds, not the storage's measured limits" in md
    with open(tmp_path / "plain" / "summary.json") as f:
        assert json.load(f)["storage_mibs"] is None
    # with three rank counts the fit is drawn, and the caption says so
    fit = re.search(r"!\[([^]]*)\]\(stall-vs-ranks.png\)", md).group(1)
    assert "the scaling fit for coordinated, naive" in fit and "not a simulation" in fit \
        and "no fit" not in fit

    main(dirs + ["-o", str(tmp_path / "given"), "--report-formats", "md,json", "--no-drishti",
                 "--storage-mibs", "1862"])
    with open(tmp_path / "given" / "report.md") as f:
        md = f.read()
    caption = re.search(r"!\[([^]]*)\]\(bandwidth.png\)", md).group(1)
    assert "the storage's limit as given, 1,862 MiB/s (--storage-mibs)" in caption
    with open(tmp_path / "given" / "summary.json") as f:
        doc = json.load(f)
    assert doc["storage_mibs"] == 1862
    assert all(m["bagg"] == 1862 * 2 ** 20 for m in doc["models"].values())


def test_one_statistic_for_measured_values_and_captions_from_the_numbers(tmp_path):
    """Three repeats at 4 ranks, 0, 2 and 30 ms a step slower (their mean is not their
    median): the scaling fit's check quotes the measured value Table A shows, the median;
    the heatmap's caption names the run with the largest steady-state stall, with it."""
    _fixtures()
    dirs = [_run(f"pfs-inet-lmdb-naive-n{n}", tmp_path / "in") for n in (1, 2)] + \
        [_run("pfs-inet-lmdb-naive-n4", tmp_path / "in", x, f"naive-n4-r{k}")
         for k, x in enumerate((0.0, 0.002, 0.03))]
    a, doc, md = _report(dirs, tmp_path / "out")
    [row4] = [r for r in doc["tables"]["table-a"] if r["ranks"] == 4]
    stalls = [a.figures[r.path]["stall_max_s"] for r in a.runs if r.ranks == 4]
    assert row4["stall_max_s"] == pytest.approx(np.median(stalls))
    assert abs(np.mean(stalls) - np.median(stalls)) > 0.005   # the premise
    loo = doc["models"]["naive"]["loo"]
    assert loo["P"] == 4 and loo["measured_s"] == pytest.approx(row4["stall_max_s"])
    assert f"against {1000 * row4['stall_max_s']:.2f} ms measured" in md
    assert doc["measured"] == "the median over the point's repeats" and doc["forecast"] == "fit"
    assert "## Scaling fit (hpcio.explain.model)" in md and "not a simulation" in md
    # the heatmap: the run the caption says stalls most is the one that does
    most = max(a.runs, key=lambda r: a.figures[r.path]["stall_pct_steady"])
    caption = re.search(r"!\[([^]]*)\]\(heatmap.png\)", md).group(1)
    assert caption.startswith(f"Rank x step own wait for the batch (every step) of "
                              f"{most.name}, the run with the largest steady-state stall: "
                              f"{a.figures[most.path]['stall_pct_steady']:.1f}% of the step")


# --- a prediction of hpcio.simulate beside the runs ------------------------------------


def _md_table(md, header):
    """The rows of the markdown table whose header line starts with ``header``."""
    lines = md.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    rows = []
    for ln in lines[at + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


@pytest.mark.mpi  # hpcio.simulate forks its engines
def test_prediction_beside_the_runs(tmp_path, testbed_prediction):
    """hpcio.simulate predict on the recorded runs, then --prediction: the section names
    each reader's held-out errors (or "unvalidated"), the table's numbers are
    prediction.json's, the figure and the CSV are written, and the headline and dominant
    mechanism appear when the prediction has them."""
    _fixtures()
    names = [f"pfs-inet-lmdb-{r}-n{n}" for r in ("naive", "coordinated") for n in (1, 2, 4)]
    pred, _ = testbed_prediction
    with open(pred / "prediction.json") as f:
        doc = json.load(f)
    with open(pred / "validation.json") as f:
        held = json.load(f)["held_out"]
    assert held is not None and held["held_out_ranks"] == 4
    dirs = [_run(n, tmp_path / "in") for n in names]
    out = tmp_path / "out"
    assert main(dirs + ["-o", str(out), "--report-formats", "md,html,json", "--no-drishti",
                        "--storage-mibs", "1862", "--prediction", str(pred)]) == 0
    md = (out / "report.md").read_text()
    assert "## Simulated scaling (hpcio.simulate)" in md
    section = md[md.index("## Simulated scaling"):md.index("## Findings")]
    # one forecast: the simulation's, no scaling fit beside it (nor drawn)
    assert "Scaling fit" not in md and "leave-one-out" not in md and "t_stall(P)" not in md
    with open(out / "summary.json") as f:
        summary = json.load(f)
    assert summary["models"] == {} and summary["forecast"] == "simulation"
    fit = re.search(r"!\[([^]]*)\]\(stall-vs-ranks.png\)", md).group(1)
    assert "no fit drawn: the simulation is this report's forecast" in fit
    assert "At the rank counts the runs were made at, a point is that run simulated back" \
        in section
    # the measured values it quotes are Table A's (the median over repeats)
    a4 = {r["reader"]: r for r in summary["tables"]["table-a"] if r["ranks"] == 4}
    for r in held["points"]:
        assert r["measured_stall_s"] == pytest.approx(a4[r["reader"]]["stall_max_s"])
    for r in held["points"]:
        assert (f"**{r['reader']}**: simulated at P = 1, 2, 4, 8 (extrapolated past P = 4); "
                f"held out P=4 (calibrated on P = 1, 2): stall error "
                f"{100 * r['stall_err_rel']:+.0f}% ({1000 * r['simulated_stall_s']:.2f} "
                f"against {1000 * r['measured_stall_s']:.2f} ms per step measured), AU "
                f"{r['au_err_points']:+.1f} points.") in section
    assert "1,862 MiB/s, --storage-mibs" in section and "unvalidated" not in section
    assert "![Measured (points" in section and "(prediction.png)" in section
    assert (out / "prediction.png").stat().st_size > 1000
    html = (out / "report.html").read_text()
    assert "<h2>Simulated scaling (hpcio.simulate)</h2>" in html and \
        html.count("data:image/png;base64,") == len(list(out.glob("*.png")))
    # the table (markdown), the CSV and summary.json carry prediction.json's numbers
    points = sorted(doc["points"], key=lambda x: (x["reader"], x["ranks"]))
    rows = _md_table(md, "| reader | P | stall ms/step (max rank)")
    assert len(rows) == len(points) == 8
    for row, pt in zip(rows, points):
        # beside each figure the range of the near-equal fits; the client's CPU per
        # sample (the runs' steps end in no barrier: no barrier column)
        assert row == [pt["reader"], str(pt["ranks"]), f"{1000 * pt['stall_s_per_step']:.2f}",
                       f"{1000 * pt['stall_s_lo']:.2f}-{1000 * pt['stall_s_hi']:.2f}",
                       f"{pt['au_percent']:.1f}",
                       f"{pt['au_percent_lo']:.1f}-{pt['au_percent_hi']:.1f}",
                       f"{pt['samples_per_s']:,.1f}",
                       f"{pt['storage_mib_per_s']:,.1f}", str(pt["extrapolated"]),
                       str(pt["validated"]), f"{1000 * pt['cpu_s_per_sample']:.3f}",
                       str(pt["simulated_back"])] + \
            ([pt["dominant"]] if "dominant" in pt else [])
        assert pt["extrapolated"] == (pt["ranks"] > 4) and pt["validated"]
        assert pt["simulated_back"] == (pt["ranks"] <= 4)
    with open(out / "table-prediction.csv") as f:
        table = list(csv.DictReader(f))
    for row, pt in zip(table, points):
        assert (row["reader"], int(row["ranks"])) == (pt["reader"], pt["ranks"])
        for k in ("stall_s_per_step", "au_percent", "samples_per_s", "storage_mib_per_s"):
            assert float(row[k]) == pt[k]
        assert row["extrapolated"] == str(pt["extrapolated"])
    with open(out / "summary.json") as f:
        assert json.load(f)["prediction"]["points"] == points

    # nothing held out, a headline and the dominant mechanism: said so, shown
    doc["accelerators_supported"] = {"naive": {"ranks": 8, "threshold_au_percent": 90},
                                     "coordinated": {"ranks": None,
                                                     "threshold_au_percent": 90}}
    for pt in doc["points"]:
        pt["dominant"] = "storage bandwidth" if pt["ranks"] > 4 else "request latency"
    alt = tmp_path / "alt"
    alt.mkdir()
    (alt / "prediction.json").write_text(json.dumps(doc))
    (alt / "validation.json").write_text(json.dumps({"simulated_back": [], "held_out": None}))
    assert main(dirs + ["-o", str(tmp_path / "out2"), "--report-formats", "md", "--no-drishti",
                        "--prediction", str(alt)]) == 0
    md = (tmp_path / "out2" / "report.md").read_text()
    section = md[md.index("## Simulated scaling"):md.index("## Findings")]
    assert ("**Accelerators supported** (simulated: the most ranks whose AU stays at or "
            "above 90%): coordinated none of those simulated; naive 8.") in section
    for reader in ("naive", "coordinated"):
        assert (f"**{reader}**: simulated at P = 1, 2, 4, 8 (extrapolated past P = 4); "
                f"unvalidated (nothing held out: one rank count to calibrate on). Dominant "
                f"at P=8: **storage bandwidth**.") in section
    rows = _md_table(md, "| reader | P | stall ms/step (max rank)")
    assert [r[-1] for r in rows] == ["request latency"] * 3 + ["storage bandwidth"] + \
        ["request latency"] * 3 + ["storage bandwidth"]
    assert "no storage limit drawn" in section


BAD_PREDICTIONS = {  # name: (files written into the directory, what the line says)
    "malformed prediction.json": ({"prediction.json": '{"points": [', "validation.json":
                                   '{"held_out": null}'},
                                  "prediction.json: unreadable (Expecting value"),
    "no validation.json": ({"prediction.json": '{"points": []}'},
                           "validation.json: missing (python -m hpcio.simulate predict"),
    "a point without its stall": ({"prediction.json": json.dumps({"points": [
        {"reader": "naive", "ranks": 1, "au_percent": 50.0, "samples_per_s": 1.0,
         "storage_mib_per_s": 1.0, "extrapolated": False, "validated": False}]}),
        "validation.json": '{"held_out": null}'},
        "prediction.json: points[0].stall_s_per_step: missing"),
    "no directory": (None, "nope: missing (--prediction takes the -o DIR"),
}


@pytest.mark.hostile
@pytest.mark.parametrize("case", sorted(BAD_PREDICTIONS))
def test_unusable_prediction_is_one_line(tmp_path, case):
    files, want = BAD_PREDICTIONS[case]
    pred = tmp_path / "nope"
    if files is not None:
        pred.mkdir()
        for name, text in files.items():
            (pred / name).write_text(text)
    (tmp_path / "runs").mkdir()
    p = run_main(["-m", "hpcio.analyze", tmp_path / "runs", "-o", tmp_path / "out",
                  "--prediction", pred], cwd=ROOT)
    assert want in one_line(p, f"hpcio.analyze: error: {pred}", rc=2, raw=True)
    assert not (tmp_path / "out").exists()
