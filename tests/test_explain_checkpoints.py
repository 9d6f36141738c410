"""The report's checkpoint part (hpcio.explain.checkpoints) over recorded checkpoint runs:
real hpcio.checkpoint and hpcio.train runs with their Darshan logs (tests/fixtures/
checkpoint-runs), each finding's numbers checked against the counters they quote."""

import json
import os
import shutil

import numpy as np

from common.fixtures import CKPT_RUNS, copy_run
from common.inproc import run_main
from hpcio.explain.checkpoints import (CKPT_RULES, META_SHARE, ckpt_figures, ckpt_findings,
                                       from_training, load_checkpoint_run, split_inputs)
from hpcio.explain.runs import load_run


def _fig(name):
    return ckpt_figures(load_checkpoint_run(os.path.join(CKPT_RUNS, name)))


def test_darshan_figures_are_the_checkpoint_files_counters():
    """Only the files under the checkpoint directory count, and the figures add up: the
    histogram to the writes, DCP's file per rank plus its metadata, the manifest and the
    marker per checkpoint; MPI-IO wrote the checkpoint's bytes."""
    for name in ("ckpt-dcp-n2", "ckpt-coordinated-n2"):
        f = _fig(name)
        d = f["darshan"]
        assert sum(d["write_sizes"].values()) == d["writes"] > 0
        assert d["small_writes"] <= d["writes"] and d["alignment"] == 4096
        assert 0 <= d["not_aligned"] <= d["ops"]
    dcp, coord = _fig("ckpt-dcp-n2"), _fig("ckpt-coordinated-n2")
    assert dcp["darshan"]["files_written"] == 2 + 3  # 2 shards, .metadata, manifest, marker
    assert coord["darshan"]["files_written"] == 1 + 2
    with open(os.path.join(CKPT_RUNS, "ckpt-coordinated-n2", "summary.json")) as fh:
        size = json.load(fh)["checkpoint_bytes"]
    assert coord["darshan"]["mpiio_bytes_written"] == 2 * size  # 2 checkpoints
    assert dcp["darshan"]["meta_share"] > META_SHARE > coord["darshan"]["meta_share"]


def test_findings_speak_to_each_writer_with_their_sources():
    """DCP's file per rank trips the metadata rule and the coordinated writer does not;
    the coordinated writer's small POSIX writes are said to come from few large MPI-IO
    calls; each finding names its counters and log."""
    fs = ckpt_findings([_fig("ckpt-dcp-n2"), _fig("ckpt-coordinated-n2")])
    got = {(f.run, f.rule): f for f in fs}
    assert ("ckpt-dcp-n2", "file-per-process metadata") in got
    assert ("ckpt-coordinated-n2", "file-per-process metadata") not in got
    meta = got[("ckpt-dcp-n2", "file-per-process metadata")].what
    assert "POSIX_F_META_TIME" in meta and "run.darshan" in meta and "5 files" in meta
    small = got[("ckpt-coordinated-n2", "small checkpoint writes")]
    assert "4 MPI-IO writes (4 collective" in small.what and "romio_cb_write" in small.advice
    assert "POSIX_FILE_NOT_ALIGNED" in got[("ckpt-dcp-n2", "unaligned checkpoint writes")].what
    assert {f.source for f in fs} == {"checkpoint"}
    assert len({r.name for r in CKPT_RULES}) == len(CKPT_RULES)


def test_slowest_rank_from_hpcios_per_rank_records():
    """The slowest/median ratio is the summary's per-rank write seconds', median over the
    checkpoints; a rank made slower in a copy trips the rule and is named."""
    f = _fig("ckpt-dcp-n2")
    with open(os.path.join(CKPT_RUNS, "ckpt-dcp-n2", "summary.json")) as fh:
        per = json.load(fh)["checkpoints"]
    want = np.median([max(c["write_rank_s"]) / np.median(c["write_rank_s"]) for c in per])
    assert abs(f["write_median_ratio"] - want) < 1e-12
    c = load_checkpoint_run(os.path.join(CKPT_RUNS, "ckpt-dcp-n2"))
    c.write_rank_s = [[s[0], 3 * s[0]] for s in c.write_rank_s]
    c.logs = []
    hit = [x for x in ckpt_findings([ckpt_figures(c)]) if x.rule == "slowest checkpoint rank"]
    assert len(hit) == 1 and "rank 1" in hit[0].what and "summary.json write_rank_s" in hit[0].what


def test_training_runs_stall_share_from_its_steps():
    """A training run that checkpoints a layout: the stall share is its steps' ckpt over
    their wall (rank-R.npz), the slowest-rank figure its ranks' own write seconds."""
    run = load_run(os.path.join(CKPT_RUNS, "train-dcp-n2"))
    c = from_training(run)
    f = ckpt_figures(c)
    share = run.steps["ckpt"].sum(axis=1) / run.steps["wall"].sum(axis=1)
    assert abs(f["stall_pct"] - 100 * share.mean()) < 1e-9
    assert f["checkpoints"] == 3 and f["write_median_ratio"] >= 1
    assert f["darshan"]["writes"] > 0  # the training run's log, its checkpoint files
    hit = [x for x in ckpt_findings([f]) if x.rule == "checkpoint stall"]
    assert len(hit) == 1 and f"{f['stall_pct']:.1f}%" in hit[0].what
    assert "--checkpoint-mode async" in hit[0].advice


def test_analyze_reports_checkpoint_runs_with_and_without_logs(tmp_path):
    """hpcio.analyze over the folder of checkpoint runs: the checkpoint table and findings
    in every format; a copy without its log gets hpcio's own figures and a note."""
    out = tmp_path / "rep"
    p = run_main(["hpcio.analyze", CKPT_RUNS, "-o", str(out), "--no-drishti",
                                   "--report-formats", "md,json"])
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert {r["run"] for r in doc["checkpoints"]} == {"ckpt-dcp-n2", "ckpt-coordinated-n2",
                                                      "train-dcp-n2"}
    assert any(f["source"] == "checkpoint" for f in doc["findings"])
    assert "Checkpoints, per run" in (out / "report.md").read_text()
    assert (out / "table-checkpoints.csv").exists()
    bare = copy_run(CKPT_RUNS, "ckpt-dcp-n2", tmp_path / "in")
    shutil.rmtree(os.path.join(bare, "darshan"))
    assert split_inputs([str(tmp_path / "in")]) == ([bare], [])
    p = run_main(["hpcio.analyze", bare, "-o", str(tmp_path / "rep2"), "--no-drishti",
                                   "--report-formats", "json"])
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "rep2" / "summary.json").read_text())
    row, = doc["checkpoints"]
    assert row["files_written"] is None and row["write_median_ratio"] > 0
    assert any("not traced with Darshan" in n for n in doc["notes"])


def test_a_broken_checkpoint_run_is_one_line_and_left_out(tmp_path):
    """A summary whose records are not a list, or whose seconds are not numbers: a gap
    said in one line (or figures without that rank), never a traceback."""
    bad = copy_run(CKPT_RUNS, "ckpt-dcp-n2", tmp_path)
    path = os.path.join(bad, "summary.json")
    with open(path) as fh:
        doc = json.load(fh)
    doc["checkpoints"][0]["write_rank_s"] = ["x", 0.5]
    with open(path, "w") as fh:
        json.dump(doc, fh)
    f = ckpt_figures(load_checkpoint_run(bad))
    assert f["checkpoints"] == 2 and f["write_median_ratio"] >= 1
    doc["checkpoints"] = {"a": 1}
    with open(path, "w") as fh:
        json.dump(doc, fh)
    p = run_main(["hpcio.analyze", bad, "-o", str(tmp_path / "rep"), "--no-drishti"])
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"hpcio.analyze: error: no run to analyse: {path}: 'checkpoints' is not a list of "
        f"per-checkpoint records; left out"], p.stderr
