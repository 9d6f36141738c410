"""The ranks' clocks (hpcio.measure.clock): MPI_Init stamps and node offsets by ping-pong."""

import json

import pytest

from common.mpi import run_mpi

PINGS = """
import json, sys, time
from hpcio.measure.clock import mpi_started, offsets
t = mpi_started()
from mpi4py import MPI
comm = MPI.COMM_WORLD
alone = comm.Split(comm.rank, 0)            # every rank a node of its own
off, rtt = offsets(comm, alone)
same = comm.Split(0, comm.rank)             # one node: nobody pings
with open(f"{sys.argv[1]}/rank-{comm.rank}.json", "w") as f:
    json.dump({"rank": comm.rank, "started": t, "now": time.time(), "off": off,
               "rtt": rtt, "one_node": offsets(comm, same)}, f)
"""


def test_offsets_on_one_clock_are_within_their_bound(tmp_path):
    """Both ranks read one kernel's clock: the true offset is 0, so each estimate must be
    within half its round trip of it (plus the two clock reads' own cost)."""
    script = tmp_path / "pings.py"
    script.write_text(PINGS)
    run_mpi(3, [script, tmp_path], check=True)
    out = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(3)]
    assert [d["rank"] for d in out] == [0, 1, 2]
    assert out[0]["off"] == out[0]["rtt"] == 0.0
    for d in out[1:]:
        assert 0 < d["rtt"] < 0.05
        assert abs(d["off"]) <= d["rtt"] / 2 + 1e-4, d
    assert all(d["one_node"] == [0.0, 0.0] for d in out)
    assert all(0 < d["now"] - d["started"] < 60 for d in out)


def test_stamp_is_unknown_when_mpi_started_elsewhere():
    """A stamp taken after someone else initialised MPI would be late by an unknown time:
    it is None, and the analysis falls back to the log's start."""
    p = run_mpi(1, ["-c", "from mpi4py import MPI; from hpcio.measure.clock import "
                          "mpi_started; print(mpi_started())"], check=True)
    assert p.stdout.strip() == "None"
