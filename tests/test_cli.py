"""Every command answers ``--help`` without a launcher, without MPI starting, and exits 0."""

import pytest

from common.mpi import run_py

COMMANDS = ["datagen", "train", "bench", "sweep", "analyze", "results", "demo", "simulate"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command):
    p = run_py(["-m", f"hpcio.{command}", "--help"], timeout=120,
               env={"MPIR_CVAR_DEBUG_SUMMARY": "1"})  # MPI_Init would print its netmod's
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: ") and f"hpcio.{command}" in p.stdout.splitlines()[0]
    assert "netmod Capability" not in p.stdout + p.stderr and not p.stderr.strip(), p.stderr
