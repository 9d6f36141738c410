"""Hostile input to the commands' options and files: every bad value, bad manifest, bad
index, racing writer, unusable ``--out`` and shard shrinking under a memory map ends in one
line naming what is wrong, with a non-zero exit, before any work; never a traceback."""

import json
import os
import re
import sys
import threading
import time

import pytest

from hpcio.data.dataset import open_dataset

from common.datasets import error_lines, make_dataset
from common import failure
from common.inproc import run_main
from common.mpi import mpiexec, run_mpi, run_py
from common.launch import PIPE, spawn

HERE = os.path.dirname(os.path.abspath(__file__))
MAPFAULT = os.path.join(HERE, "mpi", "mapfault_naive.py")
pytestmark = pytest.mark.hostile


def one_line(p, prog, *says):
    """The failed command's only line (launcher notices aside): ``prog: error...: msg``
    with every one of ``says`` in it; returns the message."""
    line = failure.one_line(p, f"{prog}: ")
    m = re.match(rf"{re.escape(prog)}: error(?: \(rank \d+\))?: (.+)$", line)
    assert m, line
    for s in says:
        assert s in m.group(1), m.group(1)
    return m.group(1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "hostile-options"
    return {"packed": make_dataset(root, "packed", "raw", records=64, shards=2),
            "lmdb": make_dataset(root, "lmdb", "raw", preset="cifar10", records=400,
                                 shards=2, seed=3)}


# ---- numeric options: the option and its allowed range, before any work -----------------
T = ["-m", "hpcio.train", "--data", "/nonexistent", "--model", "emulate"]
G = ["-m", "hpcio.datagen", "generate", "OUT"]
B = ["-m", "hpcio.bench", "--data", "/nonexistent"]


@pytest.mark.parametrize("cmd, args, says", [
    (T, ["--compute-time", "1e308"], ["--compute-time", "between 0 and 1e+06"]),
    (T, ["--compute-time", "-1"], ["--compute-time", "between 0 and"]),
    (T, ["--compute-time", "nan"], ["--compute-time", "finite"]),
    (T, ["--stall-timeout", "inf"], ["--stall-timeout", "finite"]),
    (T, ["--prefetch", "-5"], ["--prefetch", ">= 0"]),
    (T, ["--reader-option", "prefetch=-5"], ["prefetch=-5", ">= 0"]),
    (T, ["--reader-option", "request_bytes=0"], ["request_bytes=0", ">= 1"]),
    (T, ["--momentum", "2"], ["--momentum", "between 0 and 1"]),
    (T, ["--batch", "0"], ["--batch", ">= 1"]),
    (T, ["--seed", "-1"], ["--seed", "between 0 and"]),
    (T, ["--exchange-bytes", "8", "--exchange-fabric", "0"], ["--exchange-fabric", "> 0"]),
    (T, ["--exchange-bytes", "8", "--exchange-fabric=1GB/s,-1us"],
     ["--exchange-fabric", "latency '-1us' must be between 0 and"]),
    (T, ["--exchange-bytes", "8", "--exchange-fabric", "1GB/s,x"],
     ["--exchange-fabric", "'x' is not a latency"]),
    (T, ["--exchange-fabric", "1GB/s"], ["--exchange-fabric needs an exchange size"]),
    (G, ["--quality", "999"], ["--quality", "between 1 and 100"]),
    (G, ["--quality", "0"], ["--quality", "between 1 and 100"]),
    (G, ["--chunk-records", "-3", "--format", "hdf5"], ["--chunk-records", ">= 1"]),
    (G, ["--chunk-records", "0", "--format", "hdf5"], ["--chunk-records", ">= 1"]),
    (G, ["--records", "0"], ["--records", ">= 1"]),
    (G, ["--records", "1e15"], ["--records", "not an integer"]),
    (G, ["--shards", "-2"], ["--shards", ">= 1"]),
    (B, ["--repeat", "0"], ["--repeat", ">= 1"]),
    (B, ["--compute-ms", "inf"], ["--compute-ms", "finite"]),
    (B, ["--prefetch", "-5"], ["--prefetch", ">= 0"]),
    (B, ["--batch", "-1"], ["--batch", ">= 1"]),
    (B, ["--wait-quiet", "1e308"], ["--wait-quiet", "between 0 and"]),
])
def test_numeric_option_out_of_range(tmp_path, cmd, args, says):
    cmd = [str(tmp_path / "out") if a == "OUT" else a for a in cmd]
    p = run_main(cmd + args, cwd=tmp_path)
    one_line(p, cmd[1].replace("-m ", ""), *says)
    assert p.returncode == 2
    assert not (tmp_path / "out").exists()


def test_config_value_out_of_range(tmp_path):
    """A config file's value is checked by the same type as the flag."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("compute_time: 1.0e+308\n")
    p = run_main(T + ["--config", cfg], cwd=tmp_path)
    one_line(p, "hpcio.train", "compute_time", "between 0 and")


# ---- datagen: space before writing, and one writer per directory ------------------------
@pytest.mark.parametrize("fmt, enc", [("packed", "raw"), ("lmdb", "png"), ("hdf5", "raw"),
                                      ("leveldb", "raw"), ("images", "png")])
def test_datagen_refuses_a_dataset_that_cannot_fit(tmp_path, fmt, enc):
    out = tmp_path / "d"
    p = run_main(["-m", "hpcio.datagen", "generate", out, "--records", 10**15, "--format",
                  fmt, "--encoding", enc])
    one_line(p, "hpcio.datagen", str(out), "no space for 1,000,000,000,000,000 records")
    assert not out.exists()  # refused before anything was made


def test_two_datagens_into_one_directory(tmp_path):
    """The second is refused while the first writes; the first's dataset is whole."""
    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "hpcio.datagen", "generate", str(out), "--preset",
           "cifar10", "--records", "30000", "--format", "packed", "--shards", "4",
           "--encoding", "png", "--no-progress"]
    with spawn(cmd, stdout=PIPE, stderr=PIPE,
                          text=True) as first:
        deadline = time.monotonic() + 60
        while not (out / ".hpcio-writing").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.02)
        p = run_py(["-m", "hpcio.datagen", "generate", out, "--records", 100, "--force"],
                   timeout=60)
        assert first.poll() is None, "the first datagen ended before the second tried"
        one_line(p, "hpcio.datagen", str(out), "another hpcio.datagen is writing into it")
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    ds = open_dataset(str(out))
    assert ds.records == 30000 and ds.manifest["preset"] == "cifar10"
    ds.verify_checksums()


# ---- named files: the manifest and the index --------------------------------------------
@pytest.mark.parametrize("edit, says", [
    (lambda m: [m], "not an hpcio dataset manifest"),
    (lambda m: {**m, "shards": None}, "field 'shards' is null"),
    (lambda m: {**m, "shards": {"a": 1}}, "field 'shards' is {\"a\": 1}"),
    (lambda m: {**m, "shards": [{"records": [0, 64]}]}, "field 'shards'"),
    (lambda m: {**m, "shards": ["shard-0.bin"]}, "field 'shards'"),
    (lambda m: {**m, "records": "64"}, "field 'records' is \"64\""),
    (lambda m: {**m, "shape": None}, "field 'shape' is null"),
    (lambda m: {k: v for k, v in m.items() if k != "format"}, "field 'format' missing"),
    (lambda m: {**m, "index": "../../etc/passwd"}, "field 'index'"),
])
def test_bad_manifest_names_file_and_field(tmp_path, data, edit, says):
    import shutil
    root = tmp_path / "d"
    shutil.copytree(data["packed"].root, root)
    mpath = root / "hpcio.json"
    mpath.write_text(json.dumps(edit(json.loads(mpath.read_text()))))
    p = run_main(["-m", "hpcio.datagen", "info", root])
    msg = one_line(p, "hpcio.datagen", says)
    assert msg.startswith(f"{mpath}: "), msg


@pytest.mark.parametrize("keep", [0, 10, 300, 0.5, 0.9])
def test_truncated_index_names_it(tmp_path, data, keep):
    """Also for a manifest without the index's sha256 (datasets made before it)."""
    import shutil
    root = tmp_path / "d"
    shutil.copytree(data["packed"].root, root)
    mpath, ipath = root / "hpcio.json", root / "index.npz"
    m = json.loads(mpath.read_text())
    m.pop("index_sha256", None)
    mpath.write_text(json.dumps(m))
    size = ipath.stat().st_size
    os.truncate(ipath, int(size * keep) if isinstance(keep, float) else keep)
    p = run_main(["-m", "hpcio.datagen", "info", root])
    msg = one_line(p, "hpcio.datagen", "not a readable record index")
    assert msg.startswith(f"{ipath}: "), msg


# ---- bench --out: checked before the run, never overwritten without --force -------------
def test_bench_out_is_a_directory(tmp_path, data):
    d = tmp_path / "results"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    t = time.monotonic()
    p = run_main(["-m", "hpcio.bench", "--data", data["packed"].root, "--out", d,
                  "--readers", "naive", "--cache", "asis", "--shuffle", "none",
                  "--limits", "seq", "--repeat", "1", "--quiet"])
    one_line(p, "hpcio.bench", f"--out {d} is a directory")
    assert time.monotonic() - t < 30
    assert sorted(os.listdir(d)) == ["keep.txt"]


def test_bench_out_exists(tmp_path, data):
    f = tmp_path / "bench.json"
    f.write_text("the user's own file")
    p = run_main(["-m", "hpcio.bench", "--data", data["packed"].root, "--out", f,
                  "--readers", "naive", "--cache", "asis", "--shuffle", "none",
                  "--limits", "seq", "--repeat", "1", "--quiet"])
    one_line(p, "hpcio.bench", f"--out {f} exists (--force replaces it)")
    assert f.read_text() == "the user's own file"


# ---- the naive LMDB reader: a shard that shrinks under its memory map -------------------
def test_bus_error_in_a_mapped_shard_names_it(tmp_path, data):
    """The read races the truncation after the size check passed: the rank dies of SIGBUS,
    and its watcher prints the line the check would have."""
    import shutil
    root = tmp_path / "d"
    shutil.copytree(data["lmdb"].root, root)
    ds = open_dataset(str(root))
    shard, want = ds.path(1), int(ds.index.file_bytes[1])
    p = run_mpi(2, [MAPFAULT, "--data", root, "--file", 1], timeout=90)
    assert p.returncode != 0 and "DELIVERED" not in p.stdout, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "Fatal Python error" not in p.stderr, p.stderr
    lines = error_lines(p.stderr)
    msg = f"{shard}: {want // 2} bytes, expected {want}: the file shrank during the run"
    assert lines and all(re.fullmatch(rf"mapfault_naive: error \(rank \d\): {re.escape(msg)}",
                                      ln) for ln in lines), p.stderr
    others = {q: os.path.getsize(q) for q in ds.paths if q != shard}
    assert others == {q: int(ds.index.file_bytes[j]) for j, q in enumerate(ds.paths)
                      if q != shard}


def test_naive_lmdb_shard_truncated_while_training(tmp_path, data):
    """The audit's case: ``hpcio.train --reader naive`` at --compute-time 0 --batch 64 on 2
    ranks, the shard truncated mid-run: one line naming it, whichever comes first (the
    size check or the bus error), never a bare signal death."""
    import shutil
    root = tmp_path / "d"
    shutil.copytree(data["lmdb"].root, root)
    ds = open_dataset(str(root))
    shard, want = ds.path(1), int(ds.index.file_bytes[1])
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "hpcio.train", "--data", str(root),
           "--reader", "naive", "--model", "emulate", "--compute-time", "0", "--batch",
           "8", "--epochs", "200", "--shuffle", "global", "--progress", "lines",
           "--progress-interval", "0.2", "--out", str(tmp_path / "run")]
    err = []
    with spawn(cmd, stdout=PIPE, stderr=PIPE) as p:
        t = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
        t.start()
        p.stdout.readline()  # training has begun
        os.truncate(shard, want // 2)
        try:
            p.wait(timeout=90)
        finally:
            if p.poll() is None:
                p.kill()
        p.stdout.read()
        t.join(5)
    stderr = err[0].decode()
    assert p.returncode != 0, stderr
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr
    lines = error_lines(stderr)
    # cold epochs re-open the naive reader, whose open check may see it first
    msg = (f"{re.escape(f'{shard}: {want // 2} bytes, expected {want}: the file shrank')} "
           f"(during the run|since the dataset was indexed)")
    assert lines and all(re.fullmatch(rf"hpcio.train: error(?: \(rank \d\))?: {msg}", ln)
                         for ln in lines), stderr


# ---- lines that name the file, member, option or record -------------------------------------
def test_lmdb_values_that_start_like_png_but_are_not(tmp_path):
    import lmdb
    db = tmp_path / "db"
    with lmdb.open(str(db), map_size=1 << 20) as env, env.begin(write=True) as txn:
        for i in range(4):
            txn.put(b"%08d" % i, b"\x89PNG\r\n\x1a\n" + bytes(100))
    p = run_main(["-m", "hpcio.datagen", "index", db])
    assert one_line(p, "hpcio.datagen") == (
        f"{db}: its first value: starts like PNG but is not a readable image (not a "
        f"picture PIL reads)")


def test_npz_labels_that_are_strings(tmp_path):
    import numpy as np
    f = tmp_path / "d.npz"
    np.savez(f, x=np.zeros((4, 8, 8), np.uint8), y=np.array(["a", "b", "c", "d"]))
    p = run_main(["-m", "hpcio.datagen", "index", f])
    assert one_line(p, "hpcio.datagen") == (
        f"{f}: member y holds str32 values, not integer class labels (--labels names "
        f"another member)")


def test_trace_dir_that_is_a_file(tmp_path):
    f = tmp_path / "t"
    f.write_text("mine")
    p = run_main(T + ["--trace", "--trace-dir", f], cwd=tmp_path)
    assert one_line(p, "hpcio.train") == f"--trace-dir {f}: exists and is not a directory"


def test_simulate_records_bound_before_calibration(tmp_path):
    from common.fixtures import RUNS
    p = run_main(["-m", "hpcio.simulate", "predict", "--platform",
                  os.path.join(HERE, "..", "platforms", "testbed.yaml"), "--from",
                  os.path.join(RUNS, "local-inet-lmdb-naive-n2"), "--ranks", "1,2",
                  "--records", "100000000000000000", "-o", tmp_path / "p"])
    msg = one_line(p, "hpcio.simulate", "--records 100,000,000,000,000,000: the "
                                        "simulation's sample order needs")
    assert "GiB of memory available here" in msg and not (tmp_path / "p").exists()
