"""Nothing measured is lost, nothing overwritten: the run directory's claim, checkpoint
directories, results flushed while a run trains, ``python -m hpcio.results summarize``."""

import contextlib
import errno
import hashlib
import json
import os
import shutil
import signal
import stat
import threading
import time

import numpy as np
import pytest
import yaml

from common.datasets import make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi
from common.procs import Job
from hpcio.errors import HpcioError
from hpcio.fsutil import atomic_write
from hpcio.measure.rundir import RUN_MARKER, Flusher, RunDir
from hpcio.train.checkpoint import CHECKPOINT, MARKER, claim_checkpoint_dir

TRAIN = ["-m", "hpcio.train"]
SUMMARIZE = ["-m", "hpcio.results", "summarize"]


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    # 256 records, 2 ranks, batch 4: 32 steps per epoch
    return make_dataset(tmp_path_factory.mktemp("data"), "packed", "raw", records=256)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, ds):
    """A finished 2-rank run (3 steps), in a user's empty directory that a sweep's
    ``runs/`` holds: the tests below read it, copy it or run into it, none changes it."""
    out = tmp_path_factory.mktemp("finished") / "sweep" / "runs" / "done-r0"
    out.mkdir(parents=True)  # a user's empty directory is used
    p = run_mpi(2, TRAIN + _emulate(ds, out, "--steps", 3, "--progress", "off"))
    assert p.returncode == 0, p.stderr
    return out


def _emulate(ds, out, *extra):
    return ["--data", ds.root, "--model", "emulate", "--compute-time", "0.01", "--batch",
            "4", "--out", out, *extra]


def _lines(stderr, prog="hpcio."):
    return [ln for ln in stderr.splitlines() if ln.startswith(prog)]


def _one_line(p, prog="hpcio.train"):
    line = one_line(p, "hpcio.", alone=False, raw=True)
    assert line.startswith(prog + ":"), line
    return line


def _state(path):
    """Every file under ``path``: (sha256, mtime_ns, mode)."""
    out = {}
    for root, _, files in os.walk(path):
        for n in files:
            f = os.path.join(root, n)
            with open(f, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            st = os.stat(f)
            out[os.path.relpath(f, path)] = (digest, st.st_mtime_ns, st.st_mode)
    return out


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- in-process: the claims and the file mode ------------------------------------------------

def test_atomic_write_gives_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a", lambda f: f.write(b"x"))
        os.umask(0o022)
        atomic_write(tmp_path / "b", lambda f: f.write(b"y"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(tmp_path / "b").st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]


def test_run_directory_is_claimed_once(tmp_path):
    empty = tmp_path / "mine"
    empty.mkdir()
    assert RunDir.create(empty).path == str(empty)  # a user's empty directory will do
    assert os.listdir(empty) == [RUN_MARKER]
    with pytest.raises(HpcioError, match="exists and is not empty"):
        RunDir.create(empty)
    (tmp_path / "file").write_text("x")
    with pytest.raises(HpcioError, match="exists and is not a directory"):
        RunDir.create(tmp_path / "file")
    # many claims at once: exactly one wins, whatever the timing
    target, won, lost = tmp_path / "race", [], []

    def claim():
        try:
            won.append(RunDir.create(target))
        except HpcioError as e:
            lost.append(str(e))
    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7, (won, lost)
    assert os.listdir(target) == [RUN_MARKER]


def test_checkpoint_directory_claim(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / CHECKPOINT).write_bytes(b"the user's")
    with pytest.raises(HpcioError, match=r"holds files hpcio did not write \(checkpoint.pt\)"):
        claim_checkpoint_dir(str(theirs))
    assert os.listdir(theirs) == [CHECKPOINT]
    new = tmp_path / "a" / "new"
    claim_checkpoint_dir(str(new), "/runs/1")
    (new / CHECKPOINT).write_bytes(b"hpcio's")
    claim_checkpoint_dir(str(new), "/runs/1")  # the same run's: used again
    with pytest.raises(HpcioError, match=r"holds the checkpoint of run /runs/1, which this "
                                         r"run would replace \(give a new directory, or "
                                         r"--force\)"):
        claim_checkpoint_dir(str(new), "/runs/2")
    claim_checkpoint_dir(str(new), "/runs/2", force=True)
    assert (new / MARKER).read_text() == "/runs/2\n"
    assert sorted(os.listdir(new)) == sorted([MARKER, CHECKPOINT])
    (new / MARKER).write_text("")  # marked by an hpcio that did not say whose
    with pytest.raises(HpcioError, match="holds the checkpoint of an earlier run"):
        claim_checkpoint_dir(str(new), "/runs/3")


def _until(cond, timeout=10):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_flusher_kicks_retries_and_stops(capsys):
    calls = []

    def write():
        calls.append(time.monotonic())
        if len(calls) <= 2:
            raise OSError(errno.ENOSPC, "No space left on device", "/r/rank-0.npz")
    f = Flusher(write, 1000.0, label="hpcio.train: rank 0")
    f.start()
    for n in (1, 2, 3):  # an epoch's end flushes at once, not after the interval
        f.kick()
        _until(lambda: len(calls) >= n)
    f.stop()
    assert not f.is_alive() and len(calls) == 3
    assert capsys.readouterr().err == (
        "hpcio.train: rank 0: flushing results failed: /r/rank-0.npz: No space left on "
        "device (disk or quota full) (OSError); retrying every 1000 s\n")  # said once
    f = Flusher(lambda: calls.append(0), 0.05)
    f.start()
    _until(lambda: len(calls) >= 6)  # and every interval without kicks
    f.stop()


# ---- real jobs -------------------------------------------------------------------------------

@pytest.mark.mpi
def test_second_run_into_the_same_out_is_refused(ds, finished):
    out = finished
    before = _state(out)
    mode = 0o666 & ~_umask()
    assert all(stat.S_IMODE(m) == mode for _, _, m in before.values()), before
    p = run_mpi(2, TRAIN + _emulate(ds, out, "--steps", 3))
    assert "exists and is not empty (results are never overwritten" in _one_line(p)
    assert _state(out) == before
    # a run that finished keeps its own summary
    p = run_main(SUMMARIZE + [out])
    assert p.returncode == 0 and "the run finished; its summary is kept" in p.stdout
    assert _state(out) == before


@pytest.mark.mpi
def test_two_runs_at_once_into_one_out(tmp_path, ds):
    out = tmp_path / "run"
    with contextlib.ExitStack() as stack:
        jobs = [stack.enter_context(Job(2, _emulate(ds, out, "--steps", 3, "--seed", seed)))
                for seed in (1, 2)]
        codes = [j.finish(timeout=180) for j in jobs]
    assert sorted(codes) == [0, 2], [(j.stdout, j.stderr) for j in jobs]
    loser = jobs[codes.index(2)]
    lines = _lines(loser.stderr)
    assert len(lines) == 1 and "exists and is not empty" in lines[0], loser.stderr
    with open(out / "config.yaml") as f:
        assert yaml.safe_load(f)["seed"] == 1 + codes.index(0)  # the winner's files
    with open(out / "summary.json") as f:
        assert json.load(f)["metrics"]["steps_per_rank"] == 3


@pytest.mark.mpi
def test_checkpoint_dir_of_the_user_is_never_replaced(tmp_path, ds):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / CHECKPOINT).write_bytes(b"the user's")
    before = _state(theirs)
    out = tmp_path / "run1"
    p = run_mpi(2, TRAIN + _emulate(ds, out, "--steps", 2, "--checkpoint-every", 1,
                                    "--checkpoint-dir", theirs))
    line = _one_line(p)
    assert f"--checkpoint-dir {theirs}: holds files hpcio did not write" in line
    assert _state(theirs) == before and not out.exists()  # refused before anything
    # an empty directory is used and marked with its run; another run's checkpoint there
    # is refused, and replaced with --force
    empty = tmp_path / "empty"
    empty.mkdir()
    for run, force in (("run2", []), ("run3", []), ("run3", ["--force"])):
        p = run_mpi(2, TRAIN + _emulate(ds, tmp_path / run, "--steps", 2, "--checkpoint-every",
                                        1, "--checkpoint-dir", empty, *force))
        if run == "run3" and not force:
            assert f"holds the checkpoint of run {tmp_path / 'run2'}" in _one_line(p)
            assert not (tmp_path / run).exists()
            continue
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(empty)) == sorted([MARKER, CHECKPOINT])
        assert (empty / MARKER).read_text() == f"{tmp_path / run}\n"
        with open(tmp_path / run / "summary.json") as f:
            assert json.load(f)["checkpoints"]["count"] == 2


@pytest.mark.mpi
def test_sigkill_of_one_rank_keeps_what_was_flushed(tmp_path, ds):
    out = tmp_path / "run"
    interval = 1.0
    with Job(2, _emulate(ds, out, "--epochs", 1000, "--flush-interval", interval)) as job:
        job.wait_for(out / "env.json")
        pids = job.ranks(2)
        job.wait_for(out / "rank-1.npz")
        time.sleep(2.5 * interval)  # more than two flush intervals into training
        killed = time.time()
        os.kill(pids[1], signal.SIGKILL)
        rc = job.finish(timeout=60)
    assert rc != 0
    assert not (out / "summary.json").exists()
    steps = {}
    for r in range(2):
        z = np.load(out / f"rank-{r}.npz")
        with open(out / f"rank-{r}.json") as f:
            rj = json.load(f)
        steps[r] = len(z["wall"])
        # a kill between a flush's two files leaves the counters one flush behind
        assert rj["partial"] is True and 32 < rj["steps_flushed"] <= steps[r]
        assert (z["records"] == 4).all() and (z["wall"] > 0).all()
        if r == 1:  # flushed up to the last interval before the kill
            last = rj["origin_unix"] + z["t0"][-1] + z["wall"][-1]
            assert killed - last < interval + 2.0, killed - last
    p = run_main(SUMMARIZE + [out])
    assert p.returncode == 0, p.stderr
    for r in range(2):
        assert f"rank {r}: {steps[r]} of 32000 steps flushed (partial)" in p.stdout
    assert "[INCOMPLETE]" in p.stdout and "AU %" in p.stdout
    with open(out / "summary.json") as f:
        s = json.load(f)
    assert s["complete"] is False and s["ranks_partial"] == [0, 1]
    assert s["ranks_missing"] == [] and s["steps_flushed"] == {"0": steps[0], "1": steps[1]}
    assert s["metrics"]["records"] == 4 * (steps[0] + steps[1])
    # a rank that left nothing is named as missing; the figures are the others'
    gone = tmp_path / "gone"
    shutil.copytree(out, gone)
    for ext in ("npz", "json"):
        os.unlink(gone / f"rank-1.{ext}")
    os.unlink(gone / "summary.json")
    p = run_main(SUMMARIZE + [gone])
    assert p.returncode == 0, p.stderr
    assert "rank 1: missing (no rank-1.npz)" in p.stdout
    with open(gone / "summary.json") as f:
        s = json.load(f)
    assert s["ranks_missing"] == [1] and s["ranks_summarized"] == [0]
    assert s["metrics"]["records"] == 4 * steps[0]


@pytest.mark.parametrize("make, says", [
    (lambda d: d, "not a run directory of hpcio.train (no config.yaml)"),
    (lambda d: d / "nowhere", "no such run directory"),
])
def test_summarize_what_is_not_a_run_gives_one_line(tmp_path, make, says):
    p = run_main(SUMMARIZE + [make(tmp_path)])
    assert p.returncode == 2 and says in _one_line(p, "hpcio.results")
    assert os.listdir(tmp_path) == []


# ---- export ----------------------------------------------------------------------------------

EXPORT = ["-m", "hpcio.results", "export"]


@pytest.mark.mpi
def test_export_of_a_sweep_and_of_a_summarized_run(tmp_path, finished):
    done = finished
    sweep = done.parent.parent
    (sweep / "sweep.json").write_text(json.dumps({"runs": [
        {"point": {"reader": "coordinated", "ranks": 2}, "status": "done", "repeat": 0,
         "run_dir": str(done)},
        {"point": {"reader": "naive", "ranks": 2}, "status": "failed", "repeat": 0,
         "error": "hpcio.train: error: something", "run_dir": str(sweep / "runs" / "x")},
    ]}))
    # a run that did not finish, summarized from its ranks' files
    flushed = tmp_path / "flushed"
    shutil.copytree(done, flushed)
    os.unlink(flushed / "summary.json")
    os.unlink(flushed / "summary.txt")
    assert run_main(SUMMARIZE + [flushed]).returncode == 0
    out = tmp_path / "results.json"
    p = run_main(EXPORT + [sweep, flushed, "-o", out])
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())
    assert [r["run_dir"] for r in rows] == [str(done), str(flushed)]
    assert "complete" not in rows[0]["rules"]
    assert "complete: the run wrote no summary; hpcio.results summarize made it" in \
        rows[1]["rules"]
    assert rows[0]["workload_hash"] == rows[1]["workload_hash"]
    assert "repeats: 2 run(s) of this workload" in rows[0]["rules"]


@pytest.mark.mpi
def test_export_replaces_its_output_whole_or_not_at_all(tmp_path, finished):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    out = tmp_path / "results.csv"
    out.write_text("the user's\n")
    p = run_main(EXPORT + [run, tmp_path / "nowhere", "-o", out])  # one bad RUNS: nothing
    assert "no such directory" in _one_line(p, "hpcio.results")
    assert out.read_text() == "the user's\n"
    p = run_main(EXPORT + [run, "-o", out])  # a file hpcio did not write: never replaced
    assert _one_line(p, "hpcio.results").endswith(f"-o {out}: exists and hpcio did not "
                                                   f"write it (--force replaces it)")
    assert out.read_text() == "the user's\n"
    for force in (["--force"], []):  # then its own export is replaced without --force
        p = run_main(EXPORT + [run, "-o", out] + force)
        assert p.returncode == 0, p.stderr
        assert out.read_text().startswith("run_dir,benchmark_type,model,workload,")
    assert sorted(os.listdir(tmp_path)) == ["results.csv", "run"]  # no temporary left


def test_a_runs_au_threshold_in_percent_whichever_unit_it_was_recorded_in():
    """Runs recorded --au-threshold as a fraction before it became a percent everywhere."""
    from hpcio.explain.summary import au_threshold_percent
    assert au_threshold_percent(0.9) == 90.0 and au_threshold_percent(70) == 70.0
    assert au_threshold_percent(None) is None
