"""Hostile cases of running: signals that cut a run or a sweep short, a finalize that hangs,
two sweeps into one directory, a sweep resumed after it was killed, a spec of wrong types.
Every case is a real ``mpiexec -n 2`` job (or a real sweep of them)."""

import json
import os
import signal
import sys
import time

import pytest

from common.datasets import error_lines, make_dataset
from common.inproc import run_main
from common.mpi import run_py
from common.procs import Job, rank_pids
from common.launch import PIPE, spawn
from hpcio.errors import HpcioError
from hpcio.sweep import outcome
from hpcio.sweep.command import settings
from hpcio.train.stop import STALL_EXIT

SWEEP = ["-m", "hpcio.sweep"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("data"), "packed", "raw", records=256)


def _catches(pid, signum):
    """Whether process ``pid`` has a handler for ``signum`` (SigCgt in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask >> (signum - 1) & 1)


def _is_python(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0]).startswith(b"python")
    except OSError:
        return False


# ---- hpcio.train ---------------------------------------------------------------------------

@pytest.mark.hostile
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_set_up_is_one_line_and_128_plus_it(tmp_path, data, signum):
    """Before training there is nothing to flush: the run ends where it stands, in one line,
    with the shell's code for the signal (not a traceback from torch's import, not 0)."""
    out = tmp_path / "run"
    with Job(2, ["--data", data.root, "--model", "emulate", "--out", out]) as job:
        pids = job.ranks(2)
        deadline = time.monotonic() + 30
        while not all(_catches(p, signum) for p in pids):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.killpg(job.p.pid, signum)  # the terminal's Ctrl-C, or a kill of the job
        rc = job.finish(timeout=60)
    assert rc == 128 + signum, f"{rc}\n{job.stderr}"
    by = "" if signum == signal.SIGINT else " by SIGTERM"
    assert error_lines(job.stderr) == [f"hpcio.train: interrupted{by}"], job.stderr
    assert not (out / "summary.json").exists()


@pytest.mark.hostile
def test_a_rank_stopped_before_finalize_ends_the_job_with_one_line(tmp_path, data):
    """Rank 0 stopped after its last write: rank 1 would wait in MPI_Finalize for ever;
    its watchdog, still on, ends the job with a line and exit 3, results on disk."""
    out = tmp_path / "run"
    timeout = 6
    with Job(2, ["--data", data.root, "--model", "emulate", "--compute-time", "0.001",
                 "--batch", "4", "--epochs", "1", "--out", out, "--stall-timeout", timeout,
                 "--progress", "off"], env={"HPCIO_FAULT": "0:finalize"}) as job:
        rc = job.finish(timeout=120)
    assert rc == STALL_EXIT, f"{rc}\n{job.stdout}\n{job.stderr}"
    assert error_lines(job.stderr) == [
        f"hpcio.train: rank 1: no progress for {timeout} s, waiting for MPI_Finalize (every "
        f"rank ends together); ending the job (--stall-timeout)"], job.stderr
    with open(out / "summary.json") as f:
        assert json.load(f)["cut_short"] is False


def _stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.hostile
@pytest.mark.parametrize("signum", [signal.SIGTERM])  # SIGINT takes the same path
def test_a_signal_after_the_summary_keeps_the_run_done(tmp_path, data, signum):
    """The job signalled between its summary and MPI_Finalize (rank 1 held there, stopped,
    so the signal lands in that window every time): the run stays complete with the
    signal noted, every rank exits 128 + it, one hpcio line, and a sweep counts it done."""
    out = tmp_path / "run"
    with Job(2, ["--data", data.root, "--model", "emulate", "--compute-time", "0.001",
                 "--batch", "4", "--epochs", "1", "--out", out, "--progress", "off"],
             env={"HPCIO_FAULT": "1:finalize"}) as job:
        pids = job.ranks(2)
        deadline = time.monotonic() + 90
        while not _stopped(pids[1]):
            assert time.monotonic() < deadline and job.p.poll() is None, job.finish()
            time.sleep(0.05)
        os.killpg(job.p.pid, signum)  # the whole job, as a terminal or scheduler does
        time.sleep(0.5)  # rank 0 in MPI_Finalize meanwhile
        os.kill(pids[1], signal.SIGCONT)
        rc = job.finish(timeout=60)
    assert rc == 128 + signum, f"{rc}\n{job.stdout}\n{job.stderr}"
    with open(out / "summary.json") as f:
        s = json.load(f)
    assert s["cut_short"] is False and s["signal_after_summary"] == signum.name
    assert error_lines(job.stderr) == [
        f"hpcio.train: {signum.name} after the run was complete and its results written "
        f"(exit {128 + signum}); {out} holds them"], job.stderr
    status, details = outcome(rc, str(out), job.stderr)
    assert status == "done" and details["signal"] == signum.name
    assert details["figures"]["au_percent"] == s["metrics"]["au_percent"]


# ---- hpcio.sweep ---------------------------------------------------------------------------

def _sweep_args(data, out):
    """One point, a few seconds of training, flushed often."""
    return SWEEP + ["--data", data.root, "--ranks", "2", "--reader", "coordinated",
                    "--out", out, "--", "--model", "emulate", "--batch", "4",
                    "--compute-time", "0.02", "--epochs", "4", "--flush-interval", "0.5",
                    "--progress", "off"]


class Sweep:
    """A sweep in the background, in its own session (a terminal's foreground job)."""

    def __init__(self, args):
        self.p = spawn([sys.executable] + [str(a) for a in args],
                                  stdout=PIPE, stderr=PIPE, text=True,
                                  start_new_session=True)
        self.ranks = []

    def training(self, out, timeout=90):
        """Wait until the run has flushed steps; returns its ranks' pids."""
        deadline = time.monotonic() + timeout
        while not list((out / "runs").glob("*/rank-1.npz")):
            assert self.p.poll() is None, self.p.communicate()
            assert time.monotonic() < deadline, "the run did not start training"
            time.sleep(0.1)
        self.ranks = [pid for pid in rank_pids(self.p.pid) if _is_python(pid)]  # not mpiexec
        assert len(self.ranks) == 2, self.ranks
        return self.ranks

    def finish(self, timeout=120):
        self.stdout, self.stderr = self.p.communicate(timeout=timeout)
        return self.p.returncode

    def wait_ranks_gone(self, timeout=60):
        deadline = time.monotonic() + timeout
        while any(os.path.exists(f"/proc/{pid}") for pid in self.ranks):
            assert time.monotonic() < deadline, "the run outlived its sweep"
            time.sleep(0.1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.communicate()
        for pid in self.ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _record(out):
    with open(out / "sweep.json") as f:
        return json.load(f)


def _agrees(out):
    """sweep.json names every run directory on disk, and only those."""
    doc = _record(out)
    listed = {r["run_dir"] for r in doc["runs"] if r.get("run_dir")}
    listed |= {h["run_dir"] for r in doc["runs"] for h in r.get("history", [])}
    assert listed == {str(d) for d in (out / "runs").iterdir()}
    return doc


@pytest.mark.slow
@pytest.mark.hostile
@pytest.mark.parametrize("how", ["SIGKILL", "ctrl-c", "SIGTERM"])
def test_an_interrupted_sweep_resumes_on_the_first_try(tmp_path, data, how):
    """A second sweep into the same directory is refused in one line while the first runs;
    the first is then killed (its lock must not outlive it), Ctrl-C'd or terminated. A
    signal it can catch goes to the run, which writes what it measured: the point is
    cut_short, not done, and the sweep exits 128 + the signal. Resuming once finishes the
    point in a fresh run directory; the record always names the directories on disk."""
    out = tmp_path / "sweep"
    args = _sweep_args(data, out)
    with Sweep(args) as sweep:
        sweep.training(out)
        second = run_py(args, timeout=60)
        assert second.returncode == 2 and error_lines(second.stderr) == [
            f"hpcio.sweep: error: {out}: another sweep is running into it (pid "
            f"{sweep.p.pid} on {os.uname().nodename}); wait for it to end or choose another "
            f"--out"], second.stderr
        if how == "SIGKILL":
            os.kill(sweep.p.pid, signal.SIGKILL)
            rc = sweep.finish()
            assert rc == -signal.SIGKILL
        else:
            signum = signal.SIGINT if how == "ctrl-c" else signal.SIGTERM
            if how == "ctrl-c":
                os.killpg(sweep.p.pid, signum)  # the terminal's foreground group
            else:
                sweep.p.send_signal(signum)
            rc = sweep.finish()
            assert rc == 128 + signum, f"{rc}\n{sweep.stdout}\n{sweep.stderr}"
            assert f"stopped by {signum.name}" in sweep.stdout.splitlines()[-1]
        sweep.wait_ranks_gone()  # after SIGKILL: the run was told (parent-death signal)
    doc = _agrees(out)
    (r,) = doc["runs"]
    first = r["run_dir"]
    if how == "SIGKILL":
        assert r["status"] == "running"  # as the sweep left it: honest about not knowing
    else:
        assert r["status"] == "cut_short" and r["signal"] == signum.name
        assert r["returncode"] == 128 + signum and "figures" in r
        with open(os.path.join(first, "summary.json")) as f:
            s = json.load(f)
        assert s["cut_short"] is True and s["signal_name"] == signum.name

    p = run_py(args, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1].startswith("hpcio.sweep: 1 of 1 runs done, 0 failed")
    doc = _agrees(out)
    (r,) = doc["runs"]
    assert r["status"] == "done" and r["attempts"] == 2 and r["run_dir"] == first + "-a2"
    assert [h["run_dir"] for h in r["history"]] == [first]
    assert r["history"][0]["status"] == ("interrupted" if how == "SIGKILL" else "cut_short")


@pytest.mark.hostile
def test_a_run_cut_short_under_a_sweep_is_not_done(tmp_path, data):
    """SIGTERM to one rank of a sweep's run (an administrator, an OOM killer's warning):
    the run stops and flushes; the sweep records cut_short, goes on, and exits 1."""
    out = tmp_path / "sweep"
    with Sweep(_sweep_args(data, out)) as sweep:
        pids = sweep.training(out)
        os.kill(pids[-1], signal.SIGTERM)
        rc = sweep.finish()
    assert rc == 1, sweep.stdout + sweep.stderr
    assert sweep.stdout.splitlines()[-1].startswith(
        "hpcio.sweep: 0 of 1 runs done, 0 failed, 1 cut short;")
    (r,) = _agrees(out)["runs"]
    assert r["status"] == "cut_short" and r["returncode"] == 143 and r["signal"] == "SIGTERM"
    assert r["error"].startswith("hpcio.train: cut short by SIGTERM after ")


def test_outcome_reads_exit_code_and_summary(tmp_path):
    """Only exit 0 with a complete summary is done."""
    run = tmp_path / "run"
    run.mkdir()
    assert outcome(0, run, "")[0] == "failed"  # no summary: not done, whatever the code
    assert outcome(143, run, "")[0] == "interrupted"
    (run / "summary.json").write_text(json.dumps({"cut_short": True, "signal_name": "SIGINT",
                                                  "metrics": None}))
    assert outcome(0, run, "")[0] == "cut_short"  # a trainer of before exit codes
    assert outcome(130, run, "")[1]["signal"] == "SIGINT"
    (run / "summary.json").write_text(json.dumps({"cut_short": False, "metrics": {}}))
    assert outcome(0, run, "")[0] == "done"
    assert outcome(2, run, "hpcio.train: error: x")[1] == {"error": "hpcio.train: error: x"}


BAD_SPECS = [
    ("ranks: [1, two]", "ranks [1, 'two']: expected a comma-separated list of integers"),
    ("ranks: true", "ranks True: expected a comma-separated list of integers"),
    ("ranks: 1.5", "ranks 1.5: expected a comma-separated list of integers"),
    ("ranks: 0", "ranks 0: every rank count must be >= 1"),
    ("repeat: 3x", "repeat '3x': expected an integer"),
    ("repeat: 2.5", "repeat 2.5: expected an integer"),
    ("repeat: true", "repeat True: expected an integer"),
    ("repeat: 0", "repeat 0: must be at least 1"),
    ("reader: 5", "reader 5: expected a string or a list of strings"),
    ("reader: nave", "reader 'nave': unknown reader(s) nave; choose from "),
    ("data: {a: 1}", "data {'a': 1}: expected a string or a list of strings"),
    ("data: [/x, 3]", "data ['/x', 3]: expected a string or a list of strings"),
    ("reader_option: [1]", "reader_option [1]: expected a string or a list of strings"),
    ("reader_option: prefetch", "reader_option 'prefetch': expected KEY=VALUE"),
    ("launcher: 3", "launcher 3: expected a non-empty string"),
    ("darshan: [a]", "darshan ['a']: expected a non-empty string"),
    ("out: 7", "out 7: expected a non-empty string"),
    ("out: ''", "out '': expected a non-empty string"),
    ("train: 5", "train 5: expected a mapping of option: value, a list of words or a string"),
    ("train: {model: {a: 1}}", "train {'model': {'a': 1}}: model: expected a value or a "
                               "list of values, got {'a': 1}"),
    ("train: [{a: 1}]", "train [{'a': 1}]: expected a mapping of option: value"),
]


@pytest.mark.hostile
@pytest.mark.parametrize("line, says", BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_every_spec_value_is_checked_by_key(tmp_path, line, says):
    spec = tmp_path / "spec.yaml"
    spec.write_text(("data: /d\n" if not line.startswith("data") else "") + line + "\n")
    with pytest.raises(HpcioError) as e:
        settings([str(spec)])
    assert str(e.value).startswith(f"spec {spec}: {says}"), str(e.value)


@pytest.mark.hostile
def test_a_bad_spec_is_one_line_and_no_directory(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"data: {tmp_path}\nranks: [1, two]\nout: {tmp_path}/sweep\n")
    p = run_main(SWEEP + [spec])
    assert p.returncode == 2 and p.stderr.splitlines() == [
        f"hpcio.sweep: error: spec {spec}: ranks [1, 'two']: expected a comma-separated "
        f"list of integers"], p.stderr
    assert not (tmp_path / "sweep").exists()
    p = run_main(SWEEP + ["--data", tmp_path, "--reader", "naive,x", "--dry-run"])
    assert p.returncode == 2 and p.stderr.startswith(
        "hpcio.sweep: error: --reader 'naive,x': unknown reader(s) x;"), p.stderr


@pytest.mark.hostile
@pytest.mark.parametrize("record, says", [
    ("[]", "not a sweep record hpcio wrote (a field of the wrong type)"),
    ('{"settings": {}, "runs": [{"point": 3}]}',
     "not a sweep record hpcio wrote (a field of the wrong type)"),
    ('{"settings": {}}', "not a sweep record hpcio wrote (no 'runs' field)"),
    ("{", "unreadable sweep record"),
])
def test_a_sweep_record_not_ours_is_one_line_and_kept(tmp_path, record, says):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text(record)
    p = run_main(SWEEP + ["--data", tmp_path, "--out", out])
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"hpcio.sweep: error: {out}/sweep.json: {says}"), p.stderr
    assert (out / "sweep.json").read_text() == record


@pytest.mark.hostile
def test_an_out_that_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("mine")
    p = run_main(SWEEP + ["--data", tmp_path, "--out", f])
    assert p.returncode == 2 and p.stderr.splitlines() == [
        f"hpcio.sweep: error: --out {f}: cannot make the sweep directory (Not a directory: "
        f"{f}/runs)"], p.stderr
    assert f.read_text() == "mine"
