"""``python -m hpcio.train`` end to end, as real ``mpiexec -n 2`` jobs on tiny real data."""

import glob
import importlib.util
import json
import os
import re
import signal
import sys
import time

import lmdb
import numpy as np
import pytest
import yaml

from common.datasets import error_lines, make_dataset
from common.failure import one_line
from common.fs import private_mount
from common.inproc import run_main
from common.mpi import mpiexec, run_mpi, run_py
from common.procs import Job
from common.launch import launch
from hpcio.formats import FORMATS as FORMAT_REGISTRY
from hpcio.measure.steps import COMPONENTS, STEP_FIELDS
from hpcio.train.computetime import ComputeTime
from hpcio.train.options import MODEL_NAMES, READER_NAMES

TRAIN = ["-m", "hpcio.train"]
MODELS = list(MODEL_NAMES)
READERS = list(READER_NAMES)
FORMATS = list(FORMAT_REGISTRY)
# the data each model trains on (the pipeline resizes to the model's input)
PRESET = {"lenet": ("mnist", "png"), "cifar-quick": ("cifar10", "png"),
          "caffenet": ("cifar10", "raw"), "resnet50": ("cifar10", "raw"),
          "emulate": ("mnist", "raw")}
HEAVY = {"caffenet", "resnet50"}  # one step of batch 1 keeps CI fast


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    cache = {}

    def get(fmt, preset="mnist", encoding="raw", records=64):
        key = (fmt, preset, encoding, records)
        if key not in cache:
            cache[key] = make_dataset(root, fmt, encoding, preset=preset, records=records)
        return cache[key]
    return get


def _fail(p):
    return f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"


def _title(p):
    """The summary's first line, as rank 0 printed it (progress lines aside)."""
    return next(ln for ln in p.stdout.splitlines() if ln.startswith("hpcio.train: "))


def check_run(out, ranks, steps, epochs, batch, cut_short=False):
    """The run directory is complete and its files agree with each other."""
    names = set(os.listdir(out))
    want = {"config.yaml", "env.json", "provenance.json", "summary.json", "summary.txt"}
    want |= {f"rank-{r}.{ext}" for r in range(ranks) for ext in ("npz", "json")}
    assert want <= names, want - names
    assert not glob.glob(os.path.join(out, ".tmp-*"))  # atomic writes left no debris
    with open(os.path.join(out, "config.yaml")) as f:
        config = yaml.safe_load(f)
    assert config["ranks"] == ranks and config["batch"] == batch
    with open(os.path.join(out, "env.json")) as f:
        env = json.load(f)
    assert env["packages"]["torch"] and env["packages"]["mpi4py"]
    assert "MPICH" in env["mpi"]["library"] or env["mpi"]["library"]
    assert len(env["hosts"]) == ranks and env["data"]["fs_type"]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    assert summary["cut_short"] is cut_short
    total_records = 0
    for r in range(ranks):
        z = np.load(os.path.join(out, f"rank-{r}.npz"))
        assert set(STEP_FIELDS) <= set(z.files) and "loss" in z.files
        n = len(z["wall"])
        if not cut_short:
            assert n == steps * epochs
        assert (z["records"] == batch).all() and (z["nbytes"] > 0).all()
        parts = sum(z[c] for c in COMPONENTS)
        np.testing.assert_allclose(parts, z["wall"], rtol=1e-9, atol=1e-12)
        assert (z["wall"] > 0).all() and (z["compute"] > 0).all()
        for c in COMPONENTS:
            assert (z[c] >= -1e-12).all() or c == "stall_other", c
        with open(os.path.join(out, f"rank-{r}.json")) as f:
            rj = json.load(f)
        assert rj["rank"] == r and len(rj["epochs"]) == (epochs if not cut_short
                                                         else len(rj["epochs"]))
        for e in rj["epochs"]:
            m = z["epoch"] == e["epoch"]
            # what the reader delivered is what the trainer consumed (a run cut short
            # may have read ahead of its last step)
            got = (e["counters"]["reader"]["bytes"], e["counters"]["reader"]["records"])
            used = (int(z["nbytes"][m].sum()), int(z["records"][m].sum()))
            assert got == used or (cut_short and got >= used), (got, used)
            # no time lost between steps: the epoch's clock = the sum of its step walls
            assert abs(e["elapsed_s"] - z["wall"][m].sum()) <= 0.02 * e["elapsed_s"] + 1e-3
        assert rj["samples"]["t"], "the sampler took no sample"
        # MPI_Init's return, then the step origin, on this rank's clock; one node: no offset
        assert rj["mpi_init_unix"] <= rj["origin_unix"] < rj["mpi_init_unix"] + 600
        assert rj["clock"]["offset_s"] == rj["clock"]["rtt_s"] == 0.0
        assert rj["summary"]["steps"] == n
        total_records += int(z["records"].sum())
    m = summary["metrics"]
    assert m["records"] == total_records
    assert 0 < m["au_percent"] <= 100 and m["samples_per_s"] > 0 and m["mib_per_s"] > 0
    assert m["epoch_time_s_slowest"] >= m["epoch_time_s_fastest"] > 0
    with open(os.path.join(out, "summary.txt")) as f:
        text = f.read()
    assert "AU % (MLPerf Storage rule)" in text and "samples/s" in text
    # the step's split on the console adds up to 100%, as in summary.json (parts that
    # round to 0.0 are not printed: at most 0.05 each of the seven)
    split = [float(v) for v in re.findall(r"\n    [a-z0-9 ]+? +(\d+\.\d)", text)]
    assert "\n    compute " in text and "\n    stall " in text
    assert abs(sum(split) - 100) <= 0.36, (split, text)
    return summary


# every model once, each real model with another reader, and emulate (the benchmark's own
# step) with every reader: what a launch shows of a model does not depend on the reader
# (the readers' bytes are checked for every format in test_readers and test_checksum)
PAIRS = [(m, READERS[k % len(READERS)]) for k, m in enumerate(x for x in MODELS
                                                               if x != "emulate")] + \
    [("emulate", r) for r in READERS]


@pytest.mark.parametrize("model,reader", PAIRS)
def test_every_model_and_reader_completes(tmp_path, data, model, reader):
    fmt = FORMATS[(MODELS.index(model) + READERS.index(reader)) % len(FORMATS)]
    preset, enc = PRESET[model]
    ds = data(fmt, preset, enc, records=16 if model in HEAVY else 64)
    heavy = model in HEAVY
    batch, steps, epochs = (1, 1, 1) if heavy else (4, 3, 2)
    out = tmp_path / "run"
    # emulate reads bytes only (as DLIO does) unless asked to run the pipeline too
    extra = ["--preprocess", "on"] if (model, reader) == ("emulate", "memory") else []
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", model, "--reader", reader,
                            "--batch", batch, "--steps", steps, "--epochs", epochs,
                            "--compute-time", "0.005", "--out", out] + extra, timeout=240)
    assert p.returncode == 0, _fail(p)
    s = check_run(out, 2, steps, epochs, batch)
    assert s["metrics"]["au_excludes_first_step"] is (not heavy)
    assert "AU %" in p.stdout and str(out) in p.stdout
    # the data are read cold unless asked otherwise, and the summary's first line says so
    assert _title(p).startswith(f"hpcio.train: {model} on 2 rank(s), reader {reader}, "
                                f"cache cold, "), p.stdout
    assert s["cache"]["mode"] == "cold"
    # emulate ends each step in a barrier (DLIO's step), no gradients: straggler wait and
    # no exchange; DDP's exchange is inside compute
    z = np.load(out / "rank-0.npz")
    if model == "emulate":
        assert s["exchange"]["mode"] == "barrier" and s["exchange"]["bytes"] == 0
        assert (z["straggler_wait"] > 0).all() and not z["exchange"].any()
        assert "gradient exchange: barrier only: a zero-byte barrier over tcp" in p.stdout
        # torch only where a feature asks for it (here: preprocessing into tensors)
        tensors = bool(extra)
        for r in range(2):
            rj = json.loads((out / f"rank-{r}.json").read_text())
            assert rj["startup"]["torch_imported"] is tensors
            assert rj["startup"]["process_age_s"] > 0 and rj["startup"]["rss_bytes"] > 0
    else:
        assert s["exchange"]["bytes"] is None and "inside compute" in s["exchange"]["what"]
        assert not z["straggler_wait"].any() and not z["exchange"].any()
        # DDP on gloo: each step's first bucket is timed, inside compute
        assert (z["first_bucket_wait"] > 0).all()
        assert (z["first_bucket_wait"] < z["compute"]).all()


@pytest.mark.parametrize("reader,opts", [("naive", []),
                                         ("memory", ["--reader-option", "hold=pymem"])])
def test_trains_on_caffe_float32_hdf5(tmp_path, reader, opts):
    """LeNet on Caffe's float32 HDF5 at 2 ranks: the run is complete and its accounting
    adds up; the reader delivers the 4-byte elements (3136-byte MNIST records)."""
    ds = make_dataset(tmp_path, "hdf5", "raw", records=64, dtype="float32")
    out = tmp_path / "run"
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "lenet", "--reader", reader,
                            "--batch", 4, "--steps", 3, "--epochs", 2, "--out", out] + opts,
                timeout=240)
    assert p.returncode == 0, _fail(p)
    check_run(out, 2, 3, 2, 4)
    for r in range(2):
        assert (np.load(out / f"rank-{r}.npz")["nbytes"] == 4 * 3136).all()
        assert np.isfinite(np.load(out / f"rank-{r}.npz")["loss"]).all()


def _draws(mean, std, dist, seed, rank, n):
    ct = ComputeTime(mean, std, dist, seed=seed, rank=rank)
    return np.array([ct.draw() for _ in range(n)])


def test_accounting_adds_up_with_emulated_steps(tmp_path, data):
    ds = data("packed", records=128)
    out = tmp_path / "run"
    mean, std, steps, epochs = 0.05, 0.01, 10, 2
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "emulate", "--reader", "naive",
                            "--compute-time", mean, "--compute-dist", "normal",
                            "--compute-std", std, "--seed", 3, "--batch", 4, "--steps", steps,
                            "--epochs", epochs, "--out", out])
    assert p.returncode == 0, _fail(p)
    summary = check_run(out, 2, steps, epochs, 4)
    aus = []
    for r in range(2):
        z = np.load(out / f"rank-{r}.npz")
        wall = z["wall"]
        # components add up to each step's wall time (by construction of the stamps)
        parts = sum(z[c] for c in COMPONENTS)
        assert (np.abs(parts - wall) <= 0.02 * wall).all()
        # within an epoch, step s+1 starts where step s ended: no unaccounted gap
        for e in range(epochs):
            t0, w = z["t0"][z["epoch"] == e], wall[z["epoch"] == e]
            np.testing.assert_allclose(np.diff(t0), w[:-1], rtol=0, atol=1e-9)
        # compute is the emulated sleep (the same seeded draws): never shorter, and
        # within 2% of the step for the median step and for most steps. A sleeper on a
        # busy 2-core VM (other test jobs) is woken a few ms late now and then; that
        # lateness is compute time as the trainer saw it, so only the tail is spared.
        draws = _draws(mean, std, "normal", 3, r, len(wall))
        err = z["compute"] - draws
        assert (err >= -1e-4).all(), err
        assert np.median(err) <= 0.02 * np.median(wall), err
        assert np.mean(err <= 0.02 * wall) >= 0.6, err
        assert z["compute"].sum() <= 1.05 * draws.sum(), err
        keep = z["step"] != 0
        aus.append(z["compute"][keep].sum() / wall[keep].sum())
    # the summary's AU is the mean over ranks of compute / wall, first steps excluded
    assert summary["metrics"]["au_percent"] == pytest.approx(100 * np.mean(aus), rel=1e-9)


FABRIC_BYTES, FABRIC = 4_000_000, "1GB/s,10us"
RING_S = 2 * (2 - 1) / 2 * FABRIC_BYTES / 1e9 + 2 * (2 - 1) * 10e-6  # 4.02 ms


@pytest.mark.parametrize("via", ["gloo", "mpi", "fabric"])
def test_fast_rank_waits_for_the_slow_one_in_the_exchange(tmp_path, data, via):
    """Ranks draw different compute times each step (seeded per rank): in every step the
    rank that finished early waits in the barrier for the other, as long as the other's
    extra time, and that is straggler wait, not its own wait for data; the allreduce that
    follows is measured over gloo or MPI, or is the ring's time on a declared fabric (a
    sleep after the barrier: the straggler wait still shows apart)."""
    ds = data("packed", records=256)
    out = tmp_path / "run"
    mean, std, steps = 0.04, 0.015, 24
    how = (["--exchange-bytes", FABRIC_BYTES, "--exchange-fabric", FABRIC]
           if via == "fabric" else ["--exchange-model", "lenet", "--exchange-via", via])
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "emulate", "--reader", "memory",
                            "--compute-time", mean, "--compute-dist", "uniform",
                            "--compute-std", std, "--seed", 5, "--batch", 4,
                            "--steps", steps, "--out", out] + how)
    assert p.returncode == 0, _fail(p)
    s = check_run(out, 2, steps, 1, 4)
    if via == "fabric":
        assert s["exchange"] == {
            "mode": "fabric", "bytes": FABRIC_BYTES, "via": "tcp",
            "fabric": {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-5,
                       "allreduce_s": pytest.approx(RING_S)},
            "what": "4,000,000 bytes (--exchange-bytes), emulated on fabric 1 GB/s, 10 us: a "
                    "ring allreduce of 4.020 ms per step at 2 ranks (a sleep after the "
                    "barrier over tcp)"}
    else:
        assert s["exchange"] == {
            "mode": "measured", "bytes": 4 * 431_080, "via": via, "fabric": None,
            "what": f"1,724,320 bytes: lenet's gradients (--exchange-model), measured via "
                    f"{via} (all ranks on one node: loopback through the host's memory, not "
                    f"a network; --exchange-fabric emulates one)"}
    z = [np.load(out / f"rank-{r}.npz") for r in range(2)]
    keep = z[0]["step"] != 0  # the first step waits for the pipeline's start
    # each rank's time to the exchange; the one that got there first waits the difference
    arrive = np.array([(x["fetch"] + x["prep"] + x["stall_other"] + x["h2d"]
                        + x["compute"])[keep] for x in z])
    late = arrive.max(axis=0) - arrive
    waited = np.array([x["straggler_wait"][keep] for x in z])
    err = waited - late
    assert np.median(np.abs(err)) < 0.002, err
    assert np.mean(np.abs(err) < 0.005) >= 0.8, err
    # and the difference is the other rank's extra compute (its seeded draws)
    draws = np.array([_draws(mean, std, "uniform", 5, r, steps)[keep] for r in range(2)])
    extra = draws.max(axis=0) - draws
    # (no less; more by the barrier's floor and sleeps woken late: MPICH's waiting rank
    # spins on a core the other one's wake-up may need on a busy 2-core machine)
    assert 0.9 * extra.sum() <= waited.sum() <= 1.15 * extra.sum() + 0.003 * keep.sum()
    assert extra.sum() > 0.2  # the ranks really were unbalanced
    for x in z:
        own = (x["fetch"] + x["prep"] + x["stall_other"])[keep]
        assert np.median(own) < 0.002  # the memory reader: each batch is ready
        assert (x["exchange"] > 0).all()
        if via == "fabric":  # the ring's time, slept: never shorter, late by a wake-up
            assert (x["exchange"] >= RING_S - 1e-4).all(), x["exchange"]
            assert np.median(x["exchange"]) <= RING_S + 0.003, x["exchange"]
    m = s["metrics"]
    assert m["straggler_wait_percent"] > 5 and m["exchange_percent"] > 0
    # both on the console, as they are not zero, with summary.json's figures
    for label, key in (("straggler wait", "straggler_wait_percent"),
                       ("exchange", "exchange_percent")):
        assert re.search(rf"\n    {label} +{m[key]:.1f}\b", p.stdout), p.stdout
    assert f"gradient exchange: {s['exchange']['what']}" in p.stdout
    # the barrier's own cost (the least wait over ranks, step by step: the rank arriving
    # last waits for the barrier alone) and the client's CPU per sample, their own rows
    assert m["barrier_s_per_step"] == pytest.approx(float(np.median(waited.min(axis=0))))
    assert 0 < m["client_cpu_s_per_sample"] < 0.1
    assert re.search(rf"\n  barrier per step +{1000 * m['barrier_s_per_step']:.2f} ms",
                     p.stdout), p.stdout
    assert re.search(rf"\n  client CPU per sample +"
                     rf"{1000 * m['client_cpu_s_per_sample']:.3f} ms", p.stdout), p.stdout


def test_no_exchange_keeps_steps_independent(tmp_path, data):
    """--exchange-model none: no barrier either. (Warm, as asked: the summary's first line
    says the data were read from the page cache.)"""
    ds = data("packed")
    out = tmp_path / "run"
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "emulate", "--batch", 4,
                            "--steps", 5, "--exchange-model", "none", "--cache", "warm",
                            "--out", out])
    assert p.returncode == 0, _fail(p)
    assert ("reader coordinated, cache warm [DATA IN THE PAGE CACHE: 100% at the start, "
            "reads came from memory], batch 4") in _title(p), p.stdout
    s = check_run(out, 2, 5, 1, 4)
    assert s["exchange"]["bytes"] is None and s["metrics"]["straggler_wait_percent"] == 0
    for r in range(2):
        z = np.load(out / f"rank-{r}.npz")
        assert not z["straggler_wait"].any() and not z["exchange"].any()
    assert "gradient exchange: none (--exchange-model none): ranks step independently" \
        in p.stdout


@pytest.mark.lane
@pytest.mark.skipif(importlib.util.find_spec("horovod") is None,
                    reason="horovod not installed: make horovod (.ci/lane-horovod)")
def test_horovod_training_accounting_adds_up(tmp_path, data):
    """--dist horovod trains a real model (gradients exchanged in Horovod's optimiser step,
    inside the step's compute) and every step's components still add up to its wall."""
    ds = data("packed", "mnist", "png")
    out = tmp_path / "run"
    steps, epochs, batch = 3, 2, 4
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "lenet", "--dist", "horovod",
                            "--batch", batch, "--steps", steps, "--epochs", epochs,
                            "--out", out], timeout=240)
    assert p.returncode == 0, _fail(p)
    check_run(out, 2, steps, epochs, batch)
    with open(out / "config.yaml") as f:
        config = yaml.safe_load(f)
    assert config["dist"] == config["dist_used"] == config["dist_backend"] == "horovod"
    for r in range(2):
        z = np.load(out / f"rank-{r}.npz")
        for e in range(epochs):  # step s+1 starts where step s ended
            t0, w = z["t0"][z["epoch"] == e], z["wall"][z["epoch"] == e]
            np.testing.assert_allclose(np.diff(t0), w[:-1], rtol=0, atol=1e-9)


def test_config_file_checkpoints_and_single_rank(tmp_path, data):
    ds = data("lmdb")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"data": ds.root, "model": "lenet", "reader": "naive",
                                   "batch": 8, "steps": 4, "checkpoint-every": 2,
                                   "hint": {"cb_nodes": 1}, "drop_last": True}))
    out = tmp_path / "run"
    p = run_py(TRAIN + ["--config", cfg, "--batch", 4, "--out", out])
    assert p.returncode == 0, _fail(p)
    check_run(out, 1, 4, 1, 4)
    with open(out / "config.yaml") as f:
        config = yaml.safe_load(f)
    assert config["batch"] == 4 and config["steps"] == 4  # the flag beat the file
    assert config["hints"] == {"cb_nodes": "1"}
    with open(out / "rank-0.json") as f:
        ck = json.load(f)["checkpoints"]
    assert [c["global_step"] for c in ck] == [1, 3]
    assert all(c["bytes"] > 0 and c["mib_per_s"] > 0 for c in ck)
    z = np.load(out / "rank-0.npz")
    assert (z["ckpt"][[1, 3]] > 0).all() and (z["ckpt"][[0, 2]] == 0).all()
    import torch
    state = torch.load(ck[-1]["path"], map_location="cpu", weights_only=False)
    assert {"model", "optimizer"} <= set(state) and state["step"] == 3
    with open(out / "summary.json") as f:
        assert json.load(f)["checkpoints"]["count"] == 2


def test_exception_on_rank1_ends_the_job(tmp_path, data):
    ds = data("packed")
    out = tmp_path / "run"
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "emulate", "--batch", 4,
                            "--epochs", 1000, "--out", out],
                env={"HPCIO_FAULT": "1:40"}, timeout=60)
    ended = time.time()
    assert p.returncode != 0
    # from the failure (the failing rank's flush) to the job's end: the abort, not the
    # ranks' wait for each other (FINISH_WAIT, 10 s) or the run's 1000 epochs
    took = ended - os.stat(out / "rank-1.json").st_mtime
    assert took < 6, f"took {took:.1f} s after the failure"
    trace = out / "error-rank-1.txt"
    assert one_line(p) == ("hpcio.train: rank 1: HPCIO_FAULT test hook: injected failure at "
                           f"step 40 (RuntimeError); traceback in {trace}"), p.stderr
    with open(trace) as f:
        assert "RuntimeError" in f.read()
    # what the failing rank measured is on disk up to the failure (5 epochs of 8 steps),
    # marked partial; the other rank's up to its last flush (its first epoch end's at
    # least: the abort comes 1.5 s after the failure)
    z = np.load(out / "rank-1.npz")
    assert len(z["wall"]) == 40 and (z["wall"] > 0).all()
    with open(out / "rank-1.json") as f:
        rj = json.load(f)
    assert rj["partial"] is True and rj["steps_flushed"] == 40 and len(rj["epochs"]) == 5
    assert len(np.load(out / "rank-0.npz")["wall"]) >= 8
    assert not (out / "summary.json").exists()


def _hydra_version():
    """The launcher's hydra version, (0,) when it is not hydra."""
    p = launch([mpiexec(), "--version"], timeout=30)
    m = re.search(r"Version:\s+(\d+)\.(\d+)", p.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0,)


@pytest.mark.hostile
@pytest.mark.parametrize("target", ["mpiexec", "one-rank", "ctrl-c"])
def test_signal_flushes_results_cut_short(tmp_path, data, target):
    """SIGTERM to the launcher or to one rank, or Ctrl-C (SIGINT to the terminal's whole
    process group; mpiexec forwards it): every rank stops at the same step, writes
    everything with cut_short and the signal, and exits 128 + the signal, as a shell
    reports it: a job script or a sweep must not take it for a complete run."""
    ds = data("packed")
    out = tmp_path / "run"
    with Job(2, ["--data", ds.root, "--model", "emulate", "--compute-time", "0.01",
                 "--batch", "4", "--epochs", "1000", "--out", out]) as job:
        job.wait_for(out / "env.json")
        pids = job.ranks(2)
        time.sleep(1.5)  # well into training
        if target == "mpiexec":
            job.p.send_signal(signal.SIGTERM)
        elif target == "one-rank":  # only the last rank hears it: the vote ends both
            os.kill(pids[-1], signal.SIGTERM)
        else:
            os.killpg(job.p.pid, signal.SIGINT)
        rc = job.finish(timeout=30)
    want = signal.SIGINT if target == "ctrl-c" else signal.SIGTERM
    if target == "one-rank" or _hydra_version() >= (4, 1):
        assert rc == 128 + want, f"{rc}\n{job.stdout}\n{job.stderr}"
    else:  # hydra before 4.1, signalled itself, exits with its own status, not the ranks'
        assert rc in (0, 128 + want), f"{rc}\n{job.stdout}\n{job.stderr}"
    s = check_run(out, 2, None, None, 4, cut_short=True)
    assert s["signal"] == want and s["signal_name"] == want.name and s["signalled_ranks"]
    assert error_lines(job.stderr) == [
        f"hpcio.train: cut short by {want.name} after {s['epochs_run']} of 1000 epoch(s); "
        f"what it measured is in {out} (exit {128 + want})"], job.stderr
    assert s["epochs_run"] < 1000
    steps = [len(np.load(out / f"rank-{r}.npz")["wall"]) for r in range(2)]
    assert steps[0] == steps[1] > 0  # both stopped at the same step
    assert "CUT SHORT" in job.stdout
    for r in range(2):
        with open(out / f"rank-{r}.json") as f:
            rj = json.load(f)
        assert rj["partial"] is False and rj["cut_short"] is True
        assert rj["signal"] in (want, None)  # the ranks the signal reached say it


def _one_error(p):
    return one_line(p, "hpcio.train:", alone=False, raw=True)


@pytest.mark.parametrize("args, says", [
    (["--model", "alexnet"], "invalid choice: 'alexnet'"),
    (["--batch", "0"], "--batch"),
    (["--batch", "80"], "larger than the 64 records per rank"),
    (["--compute-std", "0.1"], "--compute-dist"),
    (["--hint", "cb_nodes"], "key=value"),
    (["--offline", "--model", "cifar-quick", "--batch", "4"], "offline preprocessing needs"),
    (["--preprocess", "off", "--model", "lenet"], "only emulate runs on the bytes"),
    (["--reader-option", "bogus=1", "--batch", "4"], "reader 'coordinated' has no option bogus"),
    (["--model", "emulate", "--exchange-model", "vgg16"], "invalid choice: 'vgg16'"),
])
def test_bad_flags_give_one_line(tmp_path, data, args, says):
    ds = data("packed")
    p = run_main(TRAIN + ["--data", ds.root, "--out", tmp_path / "run"] + args)
    assert says in _one_error(p)


@pytest.mark.parametrize("args, says", [
    (["--batch", "40"], "larger than the 32 records per rank"),
    (["--model", "emulate", "--batch", "4", "--exchange-bytes", str(1 << 60)],
     "bytes of memory"),
])
def test_bad_flags_on_two_ranks_are_one_line(tmp_path, data, args, says):
    """What only ranks can get wrong (a rank's share of the records, 32 of 64 on 2; the
    gradients' buffers, exchanged between ranks only): every rank refuses it, one says so."""
    ds = data("packed")
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--out", tmp_path / "run"] + args,
                timeout=60)
    assert says in _one_error(p)


def test_bad_data_and_config_give_one_line(tmp_path, data):
    p = run_main(TRAIN + ["--data", tmp_path / "nothing"])
    assert "no such dataset directory" in _one_error(p)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("batchsize: 4\n")
    p = run_main(TRAIN + ["--config", cfg])
    assert "unknown option(s): batchsize" in _one_error(p)
    # a shard shorter than its index says: found before training, on rank 0, said once
    ds = make_dataset(tmp_path, "packed", "raw", records=64)
    shard = ds.paths[0]
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 100)
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--out", tmp_path / "run"], timeout=60)
    assert "bytes on disk, the index says" in _one_error(p)
    assert not (tmp_path / "run").exists()  # checks come before the run directory


def test_no_room_for_results_is_refused_before_training(tmp_path, data):
    """A full disk at the end would lose every figure the run measured: refused first."""
    ds = data("packed")
    prefix, mnt = private_mount(tmp_path, "size=512k")
    p = launch(prefix + [mpiexec(), "-n", "2", sys.executable] + TRAIN + [
        "--data", ds.root, "--model", "emulate", "--batch", "4", "--out", str(mnt / "run")],
        timeout=60)
    assert p.returncode != 0
    line = _one_error(p)
    assert f"--out {mnt / 'run'}:" in line and "bytes free, the run needs about" in line


def test_overwritten_lmdb_shard_is_one_line(tmp_path):
    """The library's own error (LMDB's CorruptedError here) ends the job as one line naming
    the rank, what failed and its type; the traceback goes to the run directory."""
    ds = make_dataset(tmp_path, "lmdb", "raw", records=64)
    data = os.path.join(ds.paths[0])
    with open(data, "r+b") as f:  # same size, so the index still matches: pages garbled
        f.seek(8192)
        f.write(os.urandom(os.path.getsize(data) - 8192))
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--reader", "naive", "--model", "emulate",
                            "--batch", 4, "--out", tmp_path / "run"], timeout=60)
    line = _one_error(p)
    assert "MDB_CORRUPTED" in line and "(CorruptedError); traceback in" in line
    assert os.path.exists(line.rsplit("traceback in ", 1)[1])


def test_values_that_are_not_pictures(tmp_path):
    """An indexed LMDB of plain values (shape [N], not H x W x C): emulate reads its bytes;
    preprocessing it is one line, not a traceback."""
    env = tmp_path / "kv"
    with lmdb.open(str(env), map_size=16 << 20) as e, e.begin(write=True) as txn:
        for i in range(32):
            txn.put(b"%08d" % i, bytes([i]) * 100)
    assert run_main(["-m", "hpcio.datagen", "index", env]).returncode == 0
    base = TRAIN + ["--data", env, "--model", "emulate", "--batch", 4, "--compute-time", 0]
    run_mpi(2, base + ["--out", tmp_path / "ok"], timeout=60, check=True)
    p = run_mpi(2, base + ["--preprocess", "on", "--out", tmp_path / "no"], timeout=60)
    assert "records of shape [100] are not pictures" in _one_error(p)


@pytest.mark.parametrize("config", sorted(glob.glob(os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "*.yaml"))))
def test_example_configs_parse(config):
    from hpcio.train import parse_args
    with open(config) as f:
        keys = yaml.safe_load(f)
    a = parse_args(["--config", config, "--data", "somewhere"])
    assert a.model == keys["model"] and a.batch == keys["batch"]
