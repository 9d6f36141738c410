"""Progress that reaches a user through mpiexec's pipes: plain lines when not on a terminal,
a bar on one, nothing for short work."""

import os

import pytest

from hpcio.progress import Progress

from common.datasets import make_dataset
from common.mpi import run_mpi


def test_lines_on_a_pipe_every_interval(tmp_path):
    path = tmp_path / "log"
    with open(path, "w") as f:
        p = Progress(4, "step", "training", file=f, every=0)
        assert p.mode == "lines"
        for _ in range(4):
            p.update()
        p.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 4
    assert lines[1].startswith("training: step 2/4 (50%), ")
    assert lines[-1].endswith("~0s left")


def test_short_work_prints_nothing(tmp_path):
    path = tmp_path / "log"
    with open(path, "w") as f:
        p = Progress(1000, "rec", "lmdb/jpeg", file=f)
        p.update(1000)
        p.close()
    assert path.read_text() == ""


def test_a_terminal_gets_a_bar_and_off_is_silent(tmp_path):
    main, sub = os.openpty()
    with open(sub, "w") as tty, open(tmp_path / "log", "w") as f:
        assert Progress(3, "step", "training", file=tty).mode == "bar"
        off = Progress(3, "step", "training", file=f, mode="off", every=0)
        off.update(3)
    os.close(main)
    assert (tmp_path / "log").read_text() == ""
    with pytest.raises(ValueError, match="progress mode"):
        Progress(3, "step", "training", mode="sometimes")


def test_train_under_mpiexec_prints_progress_lines_on_stdout(tmp_path):
    ds = make_dataset(tmp_path / "d", "packed", "raw", records=256)
    p = run_mpi(2, ["-m", "hpcio.train", "--data", ds.root, "--model", "emulate",
                    "--compute-time", "0.001", "--batch", "16", "--epochs", "2",
                    "--progress-interval", "0", "--out", tmp_path / "run"], timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("training: ")]
    assert len(lines) == 16 and lines[-1].startswith("training: step 16/16 (100%)")
    assert "training:" not in p.stderr
