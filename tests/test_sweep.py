"""``python -m hpcio.sweep``: real hpcio.train jobs per point, interleaved repeats, a sweep
record that says what ran and what failed, and resuming."""

import json
import os

import pytest

from common.datasets import make_dataset
from common.inproc import run_main
from common.mpi import run_py
from hpcio.errors import HpcioError
from hpcio.sweep import Point, SweepDir, build_parser, points
from hpcio.sweep.command import settings
from hpcio.sweep.spec import SPEC, checked, unknown_keys

SWEEP = ["-m", "hpcio.sweep"]


def test_points_cover_every_combination():
    pts = points(["/d/a", "/d/b"], ["naive", "coordinated"], [1, 2], ["", "shared=true"])
    assert len(pts) == 16 and len(set(pts)) == 16
    assert Point("/d/a", "coordinated", 4, "shared=true").name == \
        "a-coordinated-shared_true-n4"


@pytest.mark.mpi
@pytest.mark.slow
def test_sweep_runs_records_and_resumes(tmp_path):
    ds = make_dataset(tmp_path, "packed", "raw", records=20)
    out = tmp_path / "sweep"
    args = SWEEP + ["--data", ds.root, "--ranks", "1,2,3", "--reader", "naive,coordinated",
                    "--out", out, "--", "--model", "emulate", "--batch", "8",
                    "--compute-time", "0.001"]
    p = run_py(args, timeout=300)
    assert p.returncode == 1, p.stderr  # the 3-rank points cannot run: recorded, not fatal
    lines = p.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("[")]) == 6
    assert lines[-1].startswith("hpcio.sweep: 4 of 6 runs done, 2 failed")
    with open(out / "sweep.json") as f:
        doc = json.load(f)
    runs = doc["runs"]
    assert [r["point"]["ranks"] for r in runs] == [1, 2, 3] * 2
    for r in runs:
        if r["point"]["ranks"] == 3:
            assert r["status"] == "failed" and "larger than the 6 records per rank" in \
                r["error"]
            with open(r["stderr"]) as f:  # kept whole, in the sweep's own logs/
                assert r["error"] in f.read()
            assert os.path.dirname(r["stderr"]) == str(out / "logs")
        else:
            assert r["status"] == "done" and 0 < r["figures"]["au_percent"] <= 100
            with open(f"{r['run_dir']}/summary.json") as f:
                assert json.load(f)["ranks"] == r["point"]["ranks"]
            with open(f"{r['run_dir']}/config.yaml") as f:
                assert "cache: cold" in f.read()
    # the same command again: done runs are skipped, the failed ones tried again
    p = run_py(args, timeout=300)
    assert "resuming" in p.stdout and "4 of 6 runs done" in p.stdout
    assert len([ln for ln in p.stdout.splitlines() if ln.startswith("[")]) == 2
    with open(out / "sweep.json") as f:
        again = json.load(f)["runs"]
    assert [r["attempts"] for r in again] == [1, 1, 2] * 2
    assert again[2]["run_dir"].endswith("-a2")


def test_bad_sweeps_are_one_line(tmp_path):
    p = run_main(SWEEP + ["--ranks", "1,x", "--data", tmp_path])
    assert p.returncode != 0 and p.stderr.strip().splitlines() == [
        "hpcio.sweep: error: --ranks '1,x': expected a comma-separated list of integers"]
    p = run_main(SWEEP + ["--ranks", "64", "--data", tmp_path, "--", "--model", "lenet"])
    assert "only emulated compute (--model emulate) may oversubscribe" in p.stderr


def test_default_out_is_under_runs(tmp_path):
    p = run_main(SWEEP + ["--data", tmp_path, "--reader", "naive", "--dry-run"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f" --out {tmp_path}/runs/sweep-" in p.stdout


# ---- the spec: one table checks every key, in one line as before ---------------------------

SPEC_LINES = [
    ("ranks", [1, "two"], "ranks [1, 'two']: expected a comma-separated list of integers"),
    ("ranks", [], "ranks []: expected a comma-separated list of integers"),
    ("ranks", "", "ranks '': every rank count must be >= 1"),
    ("ranks", "2,-1", "ranks '2,-1': every rank count must be >= 1"),
    ("repeat", 0, "repeat 0: must be at least 1"),
    ("repeat", True, "repeat True: expected an integer"),
    ("warmup", -1, "warmup -1: expected an integer >= 0"),
    ("warmup", "1", "warmup '1': expected an integer >= 0"),
    ("data", ["/d", ""], "data ['/d', '']: expected dataset directories, not empty names"),
    ("reader", "naive,nave", "reader 'naive,nave': unknown reader(s) nave; choose from "),
    ("reader", ",", "reader ',': unknown reader(s) (none); choose from "),
    ("reader_option", ["a=1", "b"], "reader_option ['a=1', 'b']: expected KEY=VALUE, got 'b'"),
    ("launcher", " ", "launcher ' ': expected a non-empty string"),
    ("find_max_accelerators", "yes", "find_max_accelerators 'yes': expected true or false"),
    ("train", {"model": [{}]}, "train {'model': [{}]}: model: expected a value or a list of "
                               "values, got [{}]"),
]


@pytest.mark.parametrize("key, value, says", SPEC_LINES, ids=[f"{k}={v!r}" for k, v, _ in
                                                               SPEC_LINES])
def test_a_bad_spec_value_is_one_line_naming_key_or_flag(key, value, says):
    with pytest.raises(HpcioError) as e:
        checked(key, value, "s.yaml")
    assert str(e.value).startswith(f"spec s.yaml: {says}") and "\n" not in str(e.value)
    with pytest.raises(HpcioError) as e:
        checked(key, value)
    flag = "--" + key.replace("_", "-")
    assert str(e.value).startswith(f"{flag} {says[len(key) + 1:]}")


def test_good_spec_values_become_settings():
    assert checked("ranks", "1, 2,4") == [1, 2, 4] and checked("ranks", [8, 16]) == [8, 16]
    assert checked("ranks", 3) == [3]
    assert checked("reader", ["naive,coordinated"]) == ["naive", "coordinated"]
    assert checked("data", "/d") == ["/d"]
    assert checked("reader_option", ["", "shared=true"]) == ["", "shared=true"]
    assert checked("train", {"model": "emulate", "offline": True, "seed": None,
                             "reader_option": ["a=1", "b=2"]}) == [
        "--model", "emulate", "--offline", "--reader-option", "a=1", "--reader-option", "b=2"]
    assert checked("train", "--batch 8 --steps 3") == ["--batch", "8", "--steps", "3"]


def test_every_spec_key_is_a_flag_and_unknown_keys_are_one_line():
    flags = {a.dest for a in build_parser()._actions} - {"help", "spec", "dry_run"}
    assert set(SPEC) - {"train"} == flags
    with pytest.raises(HpcioError) as e:
        unknown_keys({"rank": 1, "data": "/d", "repeats": 2}, "s.yaml")
    assert str(e.value) == "spec s.yaml: unknown key(s): rank, repeats"


def test_flags_override_the_spec_and_go_through_the_same_checks(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("data: /d\nranks: [1, 2]\nrepeat: 3\ntrain: {model: emulate}\n")
    s = settings([str(spec), "--ranks", "4", "--", "--batch", "8"])
    assert s["ranks"] == [4] and s["repeat"] == 3 and s["data"] == ["/d"]
    assert s["train"] == ["--model", "emulate", "--batch", "8"]
    with pytest.raises(HpcioError) as e:
        settings([str(spec), "--repeat", "0"])
    assert str(e.value) == "--repeat 0: must be at least 1"


# ---- the sweep directory: every file named, written and read back in one place -------------

def _record(sd):
    p = Point("/d/a", "naive", 2)
    return {"settings": {"ranks": [2]}, "cores": 2, "oversubscribed": False,
            "runs": [{"point": {"data": p.data, "reader": p.reader, "ranks": p.ranks,
                                "reader_option": p.reader_option}, "repeat": 0,
                      "status": "failed", "attempts": 1, "run_dir": sd.run_dir("a-r0"),
                      "history": [{"run_dir": "x", "status": "interrupted"}]}]}


def test_sweepdir_writes_and_reads_its_record_back(tmp_path):
    sd = SweepDir(str(tmp_path / "s"))
    sd.make()
    assert sd.record() is None and os.path.isdir(tmp_path / "s" / "runs")
    doc = _record(sd)
    sd.write_record(doc)
    assert sd.record_file == str(tmp_path / "s" / "sweep.json")
    assert sd.record() == doc
    kept = sd.keep_stderr(doc["runs"][0]["run_dir"], "hpcio.train: error: x\n")
    assert kept == str(tmp_path / "s" / "logs" / "a-r0.stderr") == sd.stderr_file("a-r0")
    with open(kept) as f:
        assert f.read() == "hpcio.train: error: x\n"
    assert sd.keep_stderr("a-r0", "  \n") is None


def test_sweepdir_names_a_fresh_run_dir_and_records_strays(tmp_path):
    sd = SweepDir(str(tmp_path))
    run = {"attempts": 2}
    os.makedirs(sd.run_dir("p-r0-a2"))      # on disk, not in the record: a sweep killed
    d = sd.fresh_run_dir(run, "p-r0", set())
    assert d == sd.run_dir("p-r0-a3")
    assert run["history"][0]["run_dir"] == sd.run_dir("p-r0-a2")


@pytest.mark.parametrize("change, says", [
    (lambda d: d.pop("runs"), "(no 'runs' field)"),
    (lambda d: d["runs"][0].pop("attempts"), "(no 'attempts' field)"),
    (lambda d: d["runs"][0].update(status="done?"), "(a field of the wrong type)"),
    (lambda d: d["runs"][0]["point"].update(extra=1), "(a field of the wrong type)"),
    (lambda d: d["runs"][0].update(repeat="0"), "(a field of the wrong type)"),
])
def test_a_record_not_ours_is_one_line(tmp_path, change, says):
    sd = SweepDir(str(tmp_path))
    doc = _record(sd)
    change(doc)
    sd.write_record(doc)
    with pytest.raises(HpcioError) as e:
        sd.record()
    assert str(e.value) == (f"{sd.record_file}: not a sweep record hpcio wrote {says}; move "
                            f"it away to start over")


def test_a_second_lock_on_a_sweepdir_is_refused(tmp_path):
    sd = SweepDir(str(tmp_path))
    with sd.locked():
        with pytest.raises(HpcioError) as e:
            with SweepDir(str(tmp_path)).locked():
                pass
        assert "another sweep is running into it (pid" in str(e.value)
    with SweepDir(str(tmp_path)).locked():  # released when the block ended
        pass


def test_checkpoint_sweep_plans_one_checkpoint_job_per_writer_and_ranks(tmp_path):
    """--checkpoint-writer: the points are writers x rank counts of the options' model, each
    a hpcio.checkpoint run job with its own checkpoint directory under the sweep; a
    finished one's figures are its metric."""
    from hpcio.sweep.loop import Sweep
    from hpcio.sweep.outcome import figures
    s = settings(["--checkpoint-writer", "dcp,coordinated", "--ranks", "2,4", "--out",
                  str(tmp_path / "sw"), "--", "--model", "llama3_70b", "--scale", "0.001"])
    assert s["checkpoint"] and s["data"] == ["llama3_70b"]
    pts = points(s["data"], s["readers"], s["ranks"], s["reader_options"])
    assert [(p.reader, p.ranks) for p in pts] == [("dcp", 2), ("dcp", 4), ("coordinated", 2),
                                                  ("coordinated", 4)]
    sweep = Sweep(s, SweepDir(str(tmp_path / "sw")), 2)
    sweep.check()
    run_dir = sweep.dir.run_dir(f"{pts[0].name}-r0")
    cmd = sweep.command(pts[0], run_dir)
    i = cmd.index("-m")
    assert cmd[i:i + 7] == ["-m", "hpcio.checkpoint", "run", "--writer", "dcp", "--dir",
                            str(tmp_path / "sw" / "checkpoints" / "llama3_70b-dcp-n2-r0")]
    assert cmd[-4:] == ["--model", "llama3_70b", "--scale", "0.001"] and "-n" in cmd
    with open(os.path.join(os.path.dirname(__file__), "fixtures", "checkpoint-runs",
                           "ckpt-dcp-n2", "summary.json")) as f:
        got = figures(json.load(f))
    assert got["save_checkpoint_io_mean_GB_per_second"] > 0 and "au_percent" not in got


@pytest.mark.parametrize("args, says", [
    (["--checkpoint-writer", "dcpx"], "--checkpoint-writer 'dcpx': unknown checkpoint writer"),
    (["--checkpoint-writer", "dcp", "--data", "/d"], "--data is a train sweep's"),
    (["--checkpoint-writer", "dcp", "--", "--dir", "x"], "--dir after --: the sweep sets"),
    (["--checkpoint-writer", "dcp", "--", "--scale", "7"],
     "the checkpoint options after --: argument --scale"),
])
def test_bad_checkpoint_sweeps_are_one_line(tmp_path, args, says):
    cut = args.index("--") if "--" in args else len(args)
    p = run_main(SWEEP + args[:cut] + ["--out", str(tmp_path / "sw")] + args[cut:])
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and says in lines[0], p.stderr


@pytest.mark.mpi
def test_checkpoint_sweep_runs_a_checkpoint_job(tmp_path):
    """One checkpoint job (coordinated, 2 ranks, a 4 MiB llama3_8b): done, its figures in
    sweep.json, its checkpoints removed, its run directory analysable."""
    from hpcio.explain.checkpoints import load_checkpoint_run, split_inputs
    out = tmp_path / "sw"
    p = run_main(SWEEP + ["--checkpoint-writer", "coordinated", "--ranks", "2", "--out", out,
                          "--", "--scale", "0.0002", "--checkpoints", "1"])
    assert p.returncode == 0, p.stderr
    run, = json.loads((out / "sweep.json").read_text())["runs"]
    assert run["status"] == "done" and run["point"]["data"] == "llama3_8b"
    assert run["figures"]["save_checkpoint_io_mean_GB_per_second"] > 0
    assert os.listdir(out / "checkpoints") == []
    ckpts, rest = split_inputs([str(out)])
    assert ckpts == [run["run_dir"]] and rest == []
    assert load_checkpoint_run(ckpts[0]).write_rank_s[0][1] > 0
