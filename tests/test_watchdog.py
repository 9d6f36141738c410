"""No silent hang: a rank that waits too long ends the job with one line naming itself and
what it waits for (``--stall-timeout``)."""

import os
import signal
import time

import pytest

from common.datasets import make_dataset
from common.failure import one_line
from common.mpi import run_py
from common.procs import Job
from hpcio.errors import HpcioError
from hpcio.train.options import parse_args
from hpcio.train.stop import STALL_EXIT, StopFlag, Watchdog


@pytest.mark.parametrize("exchange, waits", [
    ("lenet", "gradient exchange"),  # every step
    ("none", "stop vote"),  # independent steps: the next vote, within 4 steps
])
def test_a_stopped_rank_ends_the_job_with_one_line(tmp_path, exchange, waits):
    """SIGSTOP one rank: the other waits in the next collective, the step's gradient
    exchange or, with independent steps, the stop vote; its watchdog names the wait and
    aborts the job, the stopped rank too."""
    ds = make_dataset(tmp_path, "packed", "raw", records=256)
    out = tmp_path / "run"
    # set-up must not trip it on a busy 2-core machine (torch's first optimiser imports
    # its compiler: seconds); 8 s is well above that
    timeout = 8
    with Job(2, ["--data", ds.root, "--model", "emulate", "--compute-time", "0.01",
                 "--batch", "4", "--epochs", "1000", "--out", out, "--stall-timeout",
                 timeout, "--flush-interval", 1, "--exchange-model", exchange]) as job:
        job.wait_for(out / "rank-1.npz")  # training
        pids = job.ranks(2)
        t = time.monotonic()
        os.kill(pids[1], signal.SIGSTOP)
        rc = job.finish(timeout=6 * timeout)
        took = time.monotonic() - t
    assert rc == STALL_EXIT, f"{rc}\n{job.stdout}\n{job.stderr}"
    assert timeout <= took <= 2 * timeout + 3, took
    assert one_line(job, "hpcio.", rc=STALL_EXIT, alone=False, raw=True) == (
        f"hpcio.train: rank 0: no progress for {timeout} s, waiting for the {waits} (a "
        f"collective of every rank); ending the job (--stall-timeout)"), job.stderr
    assert (out / "rank-1.npz").exists() and not (out / "summary.json").exists()


@pytest.mark.parametrize("value, says", [("-1", "must be a finite number between 0 and"),
                                         ("soon", "is not a number")])
def test_bad_stall_timeout_is_one_error(value, says):
    with pytest.raises(HpcioError, match=f"--stall-timeout.*{says}"):
        parse_args(["--data", "x", "--stall-timeout", value])


def test_flush_interval_must_be_positive():
    with pytest.raises(HpcioError, match="--flush-interval.*must be a finite number > 0"):
        parse_args(["--data", "x", "--flush-interval", "0"])


def test_ctrl_c_is_a_stop_and_a_second_one_interrupts():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background
    flag = StopFlag()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        assert flag.signum == signal.SIGINT  # the run stops at the next vote, and flushes
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    finally:
        flag.restore()
    assert signal.getsignal(signal.SIGINT) is before  # the handler it found is back


def test_watchdog_marks_progress_and_stays_off_at_zero():
    wd = Watchdog(0, rank=0, prog="hpcio.test")
    wd.start()
    wd.mark("a batch")
    assert not wd.is_alive() and wd.beat == 1 and wd.waiting == "a batch"
    wd.stop()


def test_watchdog_ends_a_process_without_mpi():
    p = run_py(["-c", "import time; from hpcio.train.stop import Watchdog; "
                      "Watchdog(0.5, 0, 'hpcio.x', waiting='a batch').start(); time.sleep(60)"],
               timeout=30)
    assert p.returncode == STALL_EXIT
    assert p.stderr.strip() == ("hpcio.x: rank 0: no progress for 0.5 s, waiting for a batch; "
                                "ending the job (--stall-timeout)")
