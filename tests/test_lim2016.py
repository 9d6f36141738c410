"""The Lim et al. 2016 study (analysis/lim2016/study.py): the compute times derived from the
paper's training times, the projection onto its schedule, the sweeps it runs, and its
report from run directories: ratios to the fastest store, and the refusal of stores of
different record counts (one line, exit 2, nothing written). No training runs here."""

import importlib.util
import json
import os
import sys

import numpy as np
import pytest
import yaml

from hpcio.explain.runs import STEP_COLUMNS
from hpcio.errors import HpcioError
from common.launch import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "analysis", "lim2016", "study.py")


def _study_module():
    spec = importlib.util.spec_from_file_location("lim2016_study", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


S = _study_module()


def test_compute_per_step_is_the_papers_time_over_its_iterations():
    ct = S.compute_times()
    assert ct["mnist"] == pytest.approx(20.40 / 10_000)      # image files warm, sec. 3.1
    assert ct["cifar10"] == pytest.approx(38.06 / 4_000)     # LevelDB warm, sec. 3.2
    assert ct["imagenet"] == pytest.approx(3600 / 15_000)    # "an hour", sec. 1
    # the paper's ratios that the tables quote come from its stated times
    assert S.PAPER["cifar10"]["time_s"][("lmdb", "warm")] == pytest.approx(38.06, abs=0.01)
    assert S.PAPER["cifar10"]["time_s"][("images", "cold")] / \
        S.PAPER["cifar10"]["time_s"][("leveldb", "cold")] == pytest.approx(6.8, abs=0.06)


def test_projection_reads_only_the_first_epoch_cold_when_the_data_fit_in_memory():
    # 10 iterations, 4 steps per epoch: 4 cold steps, then 6 warm ones
    assert S.project(2.0, 1.0, 10, 4, "cold", warm_step_s=0.5) == pytest.approx(1 + 8 + 3)
    assert S.project(2.0, 1.0, 3, 4, "cold", warm_step_s=0.5) == pytest.approx(1 + 6)
    assert S.project(0.5, 1.0, 10, 4, "warm") == pytest.approx(6.0)
    assert S.project(2.0, 0.0, 10, 4, "cold", warm_step_s=0.5,
                     fits_in_memory=False) == pytest.approx(20.0)
    assert S.project(2.0, 0.0, 10, 4, "cold") is None  # no warm run to project with


def test_verdict_says_how_much_of_the_papers_gap_shows():
    assert S.verdict(9.0, 17.0) == "holds"
    assert S.verdict(43.0, 6.8) == "holds, 7x the paper's excess"
    assert S.verdict(2.6, 17.0) == "direction only (10% of the paper's excess)"
    assert S.verdict(1.05, 1.28) == "does not hold"
    assert S.verdict(None, 6.8) == "not measured"


def _config(tmp_path, stores=("images", "lmdb"), extra=None):
    cfg = {"root": str(tmp_path / "root"), "ranks": [1, 2], "model_ranks": [1],
           "cache": ["cold", "warm"], "repeat": 1, "drop_caches": 3,
           "datasets": {"mnist": {"preset": "mnist", "records": 600, "batch": 64,
                                  "model": "lenet", "model_steps": 5, "emulate_steps": 10,
                                  "stores": list(stores)}},
           "stores": {"images": {"format": "images", "encoding": "png", "reader": "naive",
                                 "paper": "image files"},
                      "lmdb": {"format": "lmdb", "encoding": "raw", "reader": "naive",
                               "reader_option": "access=cursor", "paper": "LMDB"},
                      **(extra or {})}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path), cfg


def test_a_store_this_hpcio_cannot_make_is_skipped_and_an_undefined_one_refused(tmp_path):
    extra = {"nosuch": {"format": "nosuch", "encoding": "raw", "reader": "naive"},
             "opt": {"format": "lmdb", "encoding": "raw", "reader": "naive",
                     "reader_option": "colour=blue"},
             "mem": {"loads": "nosuch", "reader": "memory"}}
    path, _ = _config(tmp_path, stores=("images", "nosuch", "opt", "mem"), extra=extra)
    st = S.Study(path)
    assert st.skipped == {"nosuch": "no format 'nosuch' in this hpcio",
                          "opt": "reader 'naive' has no option colour",
                          "mem": "it loads nosuch, and no format 'nosuch' in this hpcio"}
    assert st.stores_of("mnist") == ["images"]
    path, _ = _config(tmp_path, stores=("images", "undefined"))
    with pytest.raises(HpcioError, match="names store 'undefined'"):
        S.Study(path)


def test_sweeps_read_in_key_order_and_run_the_cpu_model_at_its_rank_counts(tmp_path):
    path, _ = _config(tmp_path)
    st = S.Study(path)
    cmds = S.sweeps(st, {"mnist": 0.002}, str(tmp_path / "sw"))
    names = [os.path.basename(p) for p, _ in cmds]
    assert names == [f"mnist-{m}-{c}-naive{o}" for m in ("model", "emulate")
                     for c in ("cold", "warm") for o in ("", "-access_cursor")]
    for p, cmd in cmds:
        after = cmd[cmd.index("--") + 1:]
        assert after[after.index("--shuffle") + 1] == "none"
        ranks = cmd[cmd.index("--ranks") + 1]
        assert ranks == ("1" if "-model-" in p else "1,2")
        assert ("--drop-caches" in after) == ("-cold-" in p and os.geteuid() == 0)
        if "-emulate-" in p:
            assert after[after.index("--compute-time") + 1] == "0.002"
        data = cmd[cmd.index("--data") + 1:cmd.index("--reader")]
        assert data == [os.path.join(st.root, "mnist",
                                     "lmdb" if "cursor" in p else "images")]


def _run(path, data, reader, records, cache, step_s, opts=(), ranks=1, steps=10):
    """A run directory as hpcio.train writes it, with the files the report reads."""
    os.makedirs(path)
    cfg = {"data": data, "reader": reader, "reader_option": list(opts), "model": "emulate",
           "cache": cache, "ranks": ranks, "batch": 64,
           "dataset": {"format": os.path.basename(data), "encoding": "raw",
                       "records": records}}
    with open(os.path.join(path, "config.yaml"), "w") as f:
        yaml.safe_dump(cfg, f)
    with open(os.path.join(path, "summary.json"), "w") as f:
        json.dump({"metrics": {"stall_percent": 10.0, "fetch_percent": 8.0,
                               "prep_percent": 0.0, "au_percent_all_steps": 90.0}}, f)
    n = steps * 64
    for r in range(ranks):
        epoch = {"epoch": 0, "steps": steps, "elapsed_s": steps * step_s, "setup_s": 0.1,
                 "cache": {"mode": cache, "seconds": 0.05},
                 "counters": {"reader": {"opens": n, "calls": 2 * n, "read_bytes": 300 * n,
                                         "io_s": 1e-4 * n, "records": n},
                              "rusage": {"majflt": 0}}}
        with open(os.path.join(path, f"rank-{r}.json"), "w") as f:
            json.dump({"rank": r, "epochs": [epoch], "reader_stats": {}}, f)
        np.savez(os.path.join(path, f"rank-{r}.npz"),
                 **{c: np.zeros(steps) for c in STEP_COLUMNS})


def _runs(tmp_path, cfg, records):
    """Cold and warm runs of both stores, images with ``records[0]`` records."""
    sweep = tmp_path / "sweep"
    root = cfg["root"]
    for cache, slow in (("cold", 3.0), ("warm", 1.0)):
        _run(str(sweep / f"img-{cache}"), os.path.join(root, "mnist", "images"), "naive",
             records[0], cache, 0.004 * slow)
        _run(str(sweep / f"lmdb-{cache}"), os.path.join(root, "mnist", "lmdb"), "naive",
             records[1], cache, 0.002, opts=("access=cursor",))
    return str(sweep)


def _report(path, sweep, out):
    return launch([sys.executable, SCRIPT, "report", "--config", path, "--sweeps",
                           sweep, "--out", out])


def test_report_puts_each_store_beside_the_fastest_and_the_paper(tmp_path):
    path, cfg = _config(tmp_path)
    sweep = _runs(tmp_path, cfg, (600, 600))
    out = tmp_path / "out"
    out.mkdir()
    p = _report(path, sweep, str(out))
    assert p.returncode == 0, p.stderr
    text = (out / "README.md").read_text()
    # warm: images 4 ms against LMDB's 2 ms a step, 10,000 iterations; cold: 937 cold
    # steps of 12 ms, then 9,063 warm ones of 4 ms: 47.5 s over 20 s
    assert "| images | 1.00x | 2.00x | 20.94x | 2.37x |" in text
    assert "| lmdb | - | 1.00x | - | 1.00x |" in text
    assert "| fastest, s | - | 20.0 | - | 20.0 |" in text
    assert "| mnist | images | 20.94x | 1.19x |" in text  # cold over warm
    assert {f.name for f in out.iterdir()} >= {"README.md", "relative.png"}


def test_report_refuses_stores_of_different_record_counts_in_one_line(tmp_path):
    path, cfg = _config(tmp_path)
    sweep = _runs(tmp_path, cfg, (600, 60))
    out = tmp_path / "out"
    out.mkdir()
    p = _report(path, sweep, str(out))
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "lim2016: error: stores of different record counts in one table (images 600, "
        "lmdb 60 records): compare stores of the same records"]
    assert list(out.iterdir()) == []  # no README, no figure


def test_a_config_with_a_base_takes_the_bases_keys_under_its_own(tmp_path, monkeypatch):
    path, _ = _config(tmp_path)
    over = tmp_path / "over.yaml"
    over.write_text(yaml.safe_dump({"base": "study.yaml", "root": "/nowhere/pfs",
                                    "root_env": "LIM2016_TEST_ROOT", "ranks": [1]}))
    monkeypatch.setenv("LIM2016_ROOT", str(tmp_path / "not-this"))
    st = S.Study(str(over))
    assert st.root == "/nowhere/pfs" and st.ranks == [1]
    assert st.stores_of("mnist") == ["images", "lmdb"]  # the base's stores
    monkeypatch.setenv("LIM2016_TEST_ROOT", str(tmp_path / "this"))
    assert S.Study(str(over)).root == str(tmp_path / "this")
