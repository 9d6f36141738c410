"""``python -m hpcio.demo``: its accelerator table, plan of runs, table, and a real short run
without the testbed (as an unprivileged user when the tests run as root). The demo on the
GlusterFS testbed is tested in tests/test_pfs.py (root, its CI lane)."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

from hpcio import demo
from hpcio.errors import HpcioError

from common.datasets import make_dataset
from common.launch import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_compute_per_step_is_dlio_resnet50_time_per_sample_times_the_batch():
    assert demo.compute_per_step("a100", 400) == pytest.approx(0.435)
    assert demo.compute_per_step("h100", 16) == pytest.approx(0.224 / 400 * 16)
    assert demo.compute_per_step("v100", 64) == pytest.approx(0.195)
    # a faster accelerator asks more of the storage
    assert demo.compute_per_step("h100", 16) < demo.compute_per_step("a100", 16) < \
        demo.compute_per_step("v100", 16)
    with pytest.raises(HpcioError, match="choose from"):
        demo.compute_per_step("tpu", 16)


def test_plan_runs_every_point_each_repeat_with_the_readers_alternating():
    runs = demo.plan([1, 2, 4], 3)
    assert len(runs) == 18 and len(set(runs)) == 18
    assert runs[:6] == [(0, 1, "naive"), (0, 1, "coordinated"), (0, 2, "naive"),
                        (0, 2, "coordinated"), (0, 4, "naive"), (0, 4, "coordinated")]
    assert runs[6:8] == [(1, 1, "coordinated"), (1, 1, "naive")]
    assert [r[0] for r in runs] == sorted(r[0] for r in runs)   # a repeat ends before the next


def test_table_gives_median_and_range_over_the_repeats():
    def run(stall, au):
        return {"metrics": {"stall_percent": stall, "au_percent": au}}
    results = {(1, "naive"): [run(40, 60), run(30, 70), run(50, 55)],
               (1, "coordinated"): [run(1, 99)]}
    lines = demo.table(results).splitlines()
    assert lines[0].split() == ["ranks", "stall", "%", "naive", "stall", "%", "coordinated",
                                "AU", "%", "naive", "AU", "%", "coordinated"]
    assert lines[1].split() == ["1", "40.0", "(30.0-50.0)", "1.0", "60.0", "(55.0-70.0)",
                                "99.0"]


def test_skipped_without_root_in_one_line_that_says_how():
    line = demo.testbed_skipped(euid=1000)
    assert "\n" not in line and "needs root" in line and "sudo make run" in line
    assert demo.testbed_skipped(euid=0) is None      # the script is in this checkout


def test_sequential_mb_s_reads_every_byte(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(os.urandom(3 << 20))
    assert demo.sequential_mb_s([str(p)], repeat=1) > 0


def test_dataset_copied_once_and_whole(tmp_path):
    ds = make_dataset(tmp_path, "lmdb", "raw", records=32)
    dst = str(tmp_path / "copy")
    assert demo._copy_dataset(ds.root, dst)
    assert not demo._copy_dataset(ds.root, dst)
    for a in Path(ds.root).rglob("*"):
        if a.is_file():
            assert a.read_bytes() == (Path(dst) / a.relative_to(ds.root)).read_bytes()
    assert not os.path.exists(dst + ".copying")


def _as_nobody(cmd):
    """``cmd`` run as nobody, or None when nobody cannot run this Python (e.g. under /root)."""
    ok = launch(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh",
                         "-c", 'exec "$0" -c pass', sys.executable], text=False)
    if ok.returncode:
        return None
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd


@pytest.mark.slow
def test_demo_runs_on_local_disk_and_says_what_it_skipped():
    work = tempfile.mkdtemp(prefix="hpcio-demo-")
    os.chmod(work, 0o777)
    cmd = [sys.executable, "-m", "hpcio.demo", "--workdir", work, "--records", "96",
           "--local-ranks", "1", "--repeats", "2", "--batch", "8"]
    skipped = demo.testbed_skipped()
    if os.geteuid() == 0:       # what a user without root sees, where nobody can run this
        nobody = _as_nobody(cmd)
        cmd, skipped = ((nobody, demo.testbed_skipped(euid=65534)) if nobody else
                        (cmd + ["--no-testbed"], demo.NO_TESTBED))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep +
               os.environ["PATH"], HOME=work)
    try:
        p = launch(cmd, timeout=240, cwd=ROOT,
                           env=env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        out = p.stdout
        assert [ln for ln in out.splitlines() if "testbed" in ln] == [skipped]
        assert "accelerator A100" in out and "ms per step of 8 samples" in out
        head = out.index("local disk, 2 repeat(s), median (min-max):")
        rows = out[head:].splitlines()
        assert rows[1].split()[0] == "ranks" and rows[2].split()[0] == "1"
        assert rows[3].startswith("cache cold on ") and "not cleared:" in rows[3]
        runs = os.listdir(os.path.join(work, "runs"))
        assert len(runs) == 4 and all("-local-" in r for r in runs)
        reports = [d for d in os.listdir(work) if d.startswith("report-")]
        assert len(reports) == 1 and reports[0].endswith("-local")
        assert os.path.exists(os.path.join(work, reports[0], "report.html"))
    finally:
        launch(["rm", "-rf", work], capture=False, text=False)


def test_checkpoint_part_is_named_in_help_and_bad_writers_are_one_line():
    """The demo's --help names its checkpoint part; writers it does not know, or the
    checkpoint part alone without writers, are one line before anything runs."""
    from common.inproc import run_main
    p = run_main(["-m", "hpcio.demo", "--help"])
    assert p.returncode == 0 and "--checkpoints WRITERS" in p.stdout
    assert "checkpoints (skipped unless asked)" in p.stdout
    for args, says in ((["--checkpoints", "x"], "--checkpoints 'x': choose writers from "
                        "coordinated, dcp, torch_save"),
                       (["--checkpoints-only"],
                        "--checkpoints-only: name the writers with --checkpoints WRITERS")):
        p = run_main(["-m", "hpcio.demo", "--no-testbed", *args])
        assert p.returncode != 0 and p.stderr.strip().splitlines() == [
            f"hpcio.demo: error: {says}"], p.stderr
