"""How a job ends on an error every rank raised: under real mpiexec -n 2."""

import os
import time

import pytest

from common.mpi import run_mpi

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi",
                      "guard_everywhere.py")


def test_an_error_every_rank_raised_ends_without_an_abort_banner():
    p = run_mpi(2, [SCRIPT, "all"], timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == ["guard-test: error: the same failure everywhere"]


def test_a_rank_that_does_not_come_cannot_hold_the_job():
    """everywhere=True said wrongly (rank 1 waits in a collective): the ranks that raised
    wait FINISH_WAIT (2 s here) for it, then abort the job as before."""
    t = time.monotonic()
    p = run_mpi(2, [SCRIPT, "rank0"], timeout=60)
    took = time.monotonic() - t
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines()[0] == "guard-test: error: the same failure everywhere"
    assert 2 <= took < 30, took


def test_a_failure_met_by_every_rank_at_once_is_said_once(tmp_path):
    """Ranks that lose a peer together (a node gone) race to create one file: the first
    says it, the others end without a word; the job still ends non-zero."""
    said = tmp_path / "said"
    p = run_mpi(4, [SCRIPT, "once", said], timeout=60)
    assert p.returncode != 0, p.stderr
    ours = [ln for ln in p.stderr.splitlines() if ln.startswith("guard-test")]
    assert len(ours) == 1 and "lost its peer" in ours[0], p.stderr
    assert said.exists()
