"""``--trace``: each rank's steps as a DFTracer trace that agrees with its step arrays."""

import gzip
import importlib.util
import json
import os

import numpy as np
import pytest

from common.datasets import make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi, run_py
from hpcio.errors import HpcioError
from hpcio.measure.steps import StepLog
from hpcio.measure.trace import EVENTS, TraceWriter, read_trace

TRAIN = ["-m", "hpcio.train"]
US = 1.0 + 1e-6  # each boundary is rounded to the microsecond once: a duration is off by <= 1 us
# trace event -> the step arrays' component(s) it spans
SPANS = {"step": ("wall",), "stall": ("fetch", "prep", "stall_other"), "fetch": ("fetch",),
         "prep": ("prep",), "h2d": ("h2d",), "compute": ("compute",),
         "straggler_wait": ("straggler_wait",), "exchange": ("exchange",), "ckpt": ("ckpt",)}
BY_NAME = {EVENTS[k]: k for k in EVENTS}
HAVE_VIEWER = importlib.util.find_spec("dftracer") is not None and \
    importlib.util.find_spec("dftracer.utils") is not None


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("data"), "packed", "raw", records=128)


def _fail(p):
    return f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"


def _lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return f.read().splitlines()


def check_trace(path, npz, info):
    """The trace at ``path`` is in DFTracer's format and its events are the step arrays'
    components (``npz``), at the rank's step times (``info``: rank-<r>.json)."""
    lines = _lines(path)
    assert lines[0] == "[" and lines[-1] == "]"
    for ln in lines[1:-1]:
        json.loads(ln)  # one JSON object a line, no commas between
    events, meta = read_trace(path)
    z = np.load(npz)
    pr = {m["args"]["name"]: m["args"]["value"] for m in meta if m["name"] == "PR"}
    assert pr["rank"] == info["rank"] and pr["hostname"] == info["host"]
    hh = [m["args"] for m in meta if m["name"] == "HH"]
    assert hh == [{"name": info["host"], "value": events[0]["args"]["hhash"]}]
    assert len({(e["pid"], e["tid"]) for e in events}) == 1
    assert all(e["ph"] == "X" and isinstance(e["ts"], int) and isinstance(e["dur"], int)
               for e in events)
    steps = {}
    for e in events:
        what = BY_NAME[(e["cat"], e["name"])]
        if what in SPANS:
            steps.setdefault((e["args"]["epoch"], e["args"]["step"]), {})[what] = e
    assert len(steps) == len(z["wall"])
    origin_us = info["origin_unix"] * 1e6
    for i in range(len(z["wall"])):
        ev = steps[(int(z["epoch"][i]), int(z["step"][i]))]
        step = ev["step"]
        assert abs(step["ts"] - (origin_us + z["t0"][i] * 1e6)) <= US
        assert step["args"]["records"] == z["records"][i]
        for what, comps in SPANS.items():
            want = sum(z[c][i] for c in comps) * 1e6
            got = ev[what]["dur"] if what in ev else 0  # none for what lasted < 1 us
            assert abs(got - want) <= US, (i, what, got, want)
            if what in ev:  # nested in its step (and the reader's parts in the wait)
                parent = ev["stall"] if what in ("fetch", "prep") else step
                assert parent["ts"] <= ev[what]["ts"]
                assert ev[what]["ts"] + ev[what]["dur"] <= parent["ts"] + parent["dur"]
    epochs = [e for e in events if e["name"] == "epoch.block"]
    assert [e["args"]["epoch"] for e in epochs] == sorted(set(z["epoch"].tolist()))
    for e in epochs:
        wall = z["wall"][z["epoch"] == e["args"]["epoch"]].sum() * 1e6
        assert abs(e["dur"] - wall) <= US
    return events


@pytest.mark.mpi
def test_two_ranks_trace_their_steps(tmp_path, ds):
    out = tmp_path / "run"
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "emulate", "--reader", "naive",
                            "--batch", 4, "--steps", 6, "--epochs", 2, "--compute-time",
                            0.005, "--checkpoint-every", 4, "--trace", "--out", out,
                            "--exchange-model", "lenet"])  # an allreduce: its events too
    assert p.returncode == 0, _fail(p)
    assert f"\n  trace: {out / 'trace'}/rank-<r>.pfw.gz (DFTracer's format)\n" in p.stdout
    for r in range(2):
        path = str(out / "trace" / f"rank-{r}.pfw.gz")
        with open(out / f"rank-{r}.json") as f:
            info = json.load(f)
        events = check_trace(path, out / f"rank-{r}.npz", info)
        names = {(e["cat"], e["name"]) for e in events}
        assert {EVENTS[k] for k in ("train", "epoch", "step", "stall", "compute",
                                    "straggler_wait", "exchange")} <= names
        assert (EVENTS["ckpt"] in names) == (r == 0)  # rank 0 writes the checkpoints
        if HAVE_VIEWER:  # DFTracer's own reader sees the same complete events
            from dftracer.utils import TraceViewer
            got = TraceViewer(path).collect().to_dict()
            assert sorted(zip(got["cat"], got["name"], got["ts"], got["dur"])) == \
                sorted((e["cat"], e["name"], e["ts"], e["dur"]) for e in events)


@pytest.mark.mpi
def test_plain_trace_in_a_directory_of_its_own(tmp_path, ds):
    out, where = tmp_path / "run", tmp_path / "local" / "traces"
    p = run_py(TRAIN + ["--data", ds.root, "--model", "emulate", "--batch", 16, "--steps", 9,
                        "--trace", "--no-trace-gzip", "--trace-dir", where, "--out", out])
    assert p.returncode == 0, _fail(p)
    assert "hpcio.train: note: --steps 9: an epoch of 128 records at batch 16 on 1 rank(s) " \
           "holds 8 steps; running 8\n" in p.stderr  # said, not silently cut
    assert f"\n  trace: {where}/rank-<r>.pfw (DFTracer's format)\n" in p.stdout
    assert not (out / "trace").exists()
    with open(out / "rank-0.json") as f:
        info = json.load(f)
    check_trace(str(where / "rank-0.pfw"), out / "rank-0.npz", info)


@pytest.mark.mpi
@pytest.mark.hostile
def test_trace_that_cannot_be_written_is_one_line(tmp_path, ds):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    args = TRAIN + ["--data", ds.root, "--model", "emulate", "--batch", 4, "--steps", 2,
                    "--trace"]
    p = run_mpi(2, args + ["--trace-dir", blocker / "traces", "--out", tmp_path / "a"],
                timeout=60)
    line = one_line(p, "hpcio.train:", alone=False, raw=True)
    assert f"trace {blocker / 'traces'}" in line and "Not a directory" in line
    # a trace directory that already holds a run's traces is never appended to
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "rank-1.pfw.gz").write_bytes(b"")
    p = run_mpi(2, args + ["--trace-dir", shared, "--out", tmp_path / "b"], timeout=60)
    line = one_line(p, "hpcio.train:", alone=False, raw=True)
    assert "rank-1.pfw.gz: exists" in line
    assert (shared / "rank-1.pfw.gz").read_bytes() == b""
    p = run_main(TRAIN + ["--data", ds.root, "--trace-dir", shared])
    assert "--trace-dir needs --trace" in one_line(p, "hpcio.train:", alone=False, raw=True)


def test_events_nest_and_keep_their_durations(tmp_path):
    """Stamps at awkward sub-microsecond offsets: every event within 1 us of its
    component, children inside parents, every epoch and the run spanned."""
    rng = np.random.default_rng(1)
    log = StepLog(8, origin=100.0)
    t = 100.0 + 1e-7
    for s in range(8):
        d = rng.uniform(1e-7, 3e-3, 8)
        t0, t1 = t, t + d[0]
        f0, f1, p1 = t0 - 1e-3 if s % 2 else t0 + d[0] / 4, t0 + d[0] / 2, t0 + d[0] * 0.7
        t2, t3, t4, t5, t6, t7 = np.cumsum(d[1:7]) + t1
        log.add(s // 4, s % 4, t0, t1, t2, t3, t4, t5, t6, t7, f0, f1, p1, 4, 100)
        t = t7
    path = str(tmp_path / "rank-0.pfw.gz")
    w = TraceWriter.open(path)
    w.start(1_700_000_000.123456789, "node7", 0, 1)
    w.write(log, 0)
    w.close(log)
    z = tmp_path / "steps.npz"
    np.savez(z, **log.arrays())
    events = check_trace(path, z, {"rank": 0, "host": "node7",
                                   "origin_unix": 1_700_000_000.123456789})
    train = [e for e in events if e["name"] == "train"]
    assert len(train) == 1 and abs(train[0]["dur"] - log.column("wall").sum() * 1e6) <= US
    with pytest.raises(HpcioError, match="exists"):
        TraceWriter.open(path)
