"""Bytes read are bytes delivered; reader options and counters mean one thing.

A shard that shrinks, grows, vanishes, is replaced or rewritten during a run stops every
reader with one line naming it, the expected and the actual size (real files, changed for
real: under ``mpiexec -n 2`` mid-epoch, and mid-training by a test watching the progress
bar). Bad reader options are one line naming the option and the value. The counters:
``calls`` one per read system call or MPI-IO read, ``opens`` apart, ``read_bytes`` what
the reads brought in (HDF5's sieve shows), ``cache_gained_bytes`` for memory maps.
"""

import importlib.util
import json
import os
import re
import shutil
import sys
import threading
import time

import pytest

from hpcio.cache import evict, resident_bytes, warm
from hpcio.data.dataset import open_dataset
from hpcio.errors import HpcioError
from hpcio.plan import make_plan
from hpcio.readers import check_options, make_reader
from hpcio.readers.base import FileCheck

from common.datasets import error_lines, make_dataset
from common.mpi import mpiexec, run_mpi
from common.launch import PIPE, spawn

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "mpi", "check_integrity.py")
TRAIN = ["-m", "hpcio.train"]
SIZES = r"(\d+) bytes, expected (\d+)"
C = "coordinated:request_bytes=1"  # one step per request


def copy(ds, dst):
    shutil.copytree(ds.root, dst)
    return open_dataset(str(dst))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "integrity-data"
    sets = {f: make_dataset(root, f, "raw", records=400, shards=2, seed=4)
            for f in ("packed", "lmdb", "hdf5", "leveldb")}
    sets["images"] = make_dataset(root, "images", "png", records=120, shards=2, seed=4)
    return sets


def errors(stderr, prog):
    """The messages of ``prog``'s error lines (without their prefix), and whatever else
    the job printed, less the launcher's notices. The launcher may glue two ranks' lines
    into one: messages are found by their prefix, not by line."""
    pat = rf"{re.escape(prog)}: error(?: \(rank \d+\))?: (.+?)(?={re.escape(prog)}: |\n|$)"
    return re.findall(pat, stderr), error_lines(re.sub(pat, "", stderr))


def one_error(rc, stdout, stderr, prog):
    """The error of a failed job: the same message from every rank that saw it (each may
    say it), nothing else, no traceback; returns the message."""
    assert rc != 0, stdout + stderr
    assert "DELIVERED" not in stdout, stdout
    assert "Traceback" not in stderr, stderr
    msgs, rest = errors(stderr, prog)
    assert len(set(msgs)) == 1 and not rest, stderr
    return msgs[0]


# ---- the check itself (real files, one process) -----------------------------------------
@pytest.mark.parametrize("how, says", [
    ("truncate", "the file shrank during the run"),
    ("grow", "the file grew during the run"),
    ("vanish", "vanished during the run"),
    ("replace", "replaced by another file during the run"),
    ("modify", "modified during the run"),
    ("rewrite", "its change time changed"),
])
def test_file_check_names_every_change(tmp_path, base, how, says):
    ds = copy(base["packed"], tmp_path / "d")
    spec = importlib.util.spec_from_file_location("check_integrity", CHECK)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # its change(), as the MPI tests use it
    fc = FileCheck(ds)
    fc.check_all()
    time.sleep(0.05)  # file times tick in jiffies: the change must come in a later one
    script.change(ds.path(1), how)
    fc.check([0])  # the other file is as it was
    with pytest.raises(HpcioError) as e:
        fc.check([1])
    msg = str(e.value)
    assert msg.startswith(ds.path(1) + ": ") and says in msg and "\n" not in msg
    want = int(ds.index.file_bytes[1])
    assert f"expected {want}" in msg
    if how in ("truncate", "grow"):
        assert re.search(SIZES, msg).group(1) == str(os.path.getsize(ds.path(1)))
    # a reader opened now on the changed files refuses at once
    if how not in ("modify", "replace", "rewrite"):
        with pytest.raises(HpcioError, match="since the dataset was indexed"):
            FileCheck(ds)


@pytest.mark.parametrize("fmt", ["packed", "hdf5", "lmdb", "images", "leveldb"])
def test_naive_reader_stops_at_a_shard_that_shrank(tmp_path, base, fmt):
    """One process, the naive reader: a shard truncated between two batches is found
    before the next batch is delivered (HDF5 would deliver zeros, LMDB would SIGBUS)."""
    ds = copy(base[fmt], tmp_path / "d")
    plan = make_plan(ds.records, 1, 0, 8, epoch=0, seed=1, shuffle="global")
    victim = int(ds.index.file[plan.step(2)[0]])  # a file the third batch reads
    path = ds.path(victim)
    with make_reader("naive", ds) as r:
        it = r.epoch(plan)
        first = next(it)
        assert first.nbytes == int(ds.index.length[first.ids].sum())
        next(it)
        os.truncate(path, os.path.getsize(path) // 2)
        with pytest.raises(HpcioError) as e:
            next(it)
        it.close()
    msg = str(e.value)
    assert msg.startswith(path + ": "), msg
    if fmt != "images":
        assert "shrank during the run" in msg
        assert re.search(SIZES, msg).groups() == (str(os.path.getsize(path)),
                                                 str(int(ds.index.file_bytes[victim])))
    else:  # the record file is read whole: its length is what shows
        assert re.search(r"record \d+ is \d+ bytes, expected \d+", msg), msg


# ---- mid-epoch, every coordinated mechanism, under mpiexec -n 2 --------------------------
@pytest.mark.parametrize("fmt, reader, change, says", [
    ("packed", C, "truncate", "shrank during the run"),
    ("packed", C + ":mechanism=nonblocking", "truncate",
     "shrank during the run"),
    ("packed", C + ":mechanism=sync", "truncate", "shrank during the run"),
    ("packed", C + ":collective=true", "truncate", "shrank during the run"),
    ("lmdb", C + ":shared=true", "truncate", "shrank during the run"),
    ("hdf5", C + ":prefetch=0", "replace", "replaced by another file"),
    ("packed", C, "vanish", "vanished during the run"),
    ("packed", C, "modify", "modified during the run"),
    # the change time is what shows once the modification time is set back; a check that
    # falls between the write and the set-back sees the modification time
    ("packed", C, "rewrite", "modified during the run"),
    ("images", C, "truncate", "shrank during the run"),
    ("lmdb", "naive", "truncate", "shrank during the run"),
    ("hdf5", "naive", "grow", "grew during the run"),
])
def test_a_shard_changed_mid_epoch_stops_the_job(tmp_path, base, fmt, reader, change, says):
    # one step per request (request_bytes=1): most reads come after the change
    ds = copy(base[fmt], tmp_path / "d")
    plan = make_plan(ds.records, 2, 0, 4, epoch=0, seed=1, shuffle="global")
    victim = int(ds.index.file[plan.step(plan.steps - 1)[0]])  # read at the very end
    before = {p: os.path.getsize(p) for p in ds.paths if p != ds.path(victim)}
    t = time.monotonic()
    p = run_mpi(2, [CHECK, "--data", ds.root, "--reader", reader, "--change", change,
                    "--file", victim, "--at", 1], timeout=120)
    assert time.monotonic() - t < 60
    msg = one_error(p.returncode, p.stdout, p.stderr, "check_integrity")
    assert msg.startswith(ds.path(victim) + ": ") and says in msg, msg
    assert f"expected {int(ds.index.file_bytes[victim])}" in msg
    assert {q: os.path.getsize(q) for q in before} == before  # nothing else touched


# ---- the repro: a shard truncated during training -------------------------------
@pytest.fixture(scope="module")
def trainset(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "integrity-train"
    return {f: make_dataset(root, f, "raw", preset="cifar10", records=4000, shards=4, seed=5)
            for f in ("lmdb", "packed")}


def _train_and_truncate(ds, out, reader, shuffle, at_step, shard, size):
    """Train 3 epochs on 2 ranks; when the progress bar passes ``at_step``, truncate
    ``shard`` to ``size`` bytes. Returns (exit code, stderr, step seen at truncation)."""
    cmd = [mpiexec(), "-n", "2", sys.executable, *TRAIN, "--data", ds.root, "--reader",
           reader, "--model", "emulate", "--compute-time", "0.02", "--batch", "16",
           "--epochs", "3", "--shuffle", shuffle, "--progress", "on", "--out", str(out)]
    seen, cut, at, err = [0], threading.Event(), [], []

    def watch(out):
        buf = b""
        while True:
            chunk = os.read(out.fileno(), 4096)
            if not chunk:
                return
            buf = (buf + chunk)[-200:]
            steps = re.findall(rb"(\d+)/\d+ \[", buf)
            if steps:
                seen[0] = int(steps[-1])
            if seen[0] >= at_step and not cut.is_set():
                os.truncate(shard, size)
                at.append(seen[0])
                cut.set()

    with spawn(cmd, stdout=PIPE, stderr=PIPE) as p:
        t_err = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
        t_out = threading.Thread(target=watch, args=(p.stdout,), daemon=True)
        t_err.start()
        t_out.start()
        try:
            p.wait(timeout=150)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        t_out.join(5)
        t_err.join(5)
    assert cut.is_set(), f"training ended before step {at_step}: {err}"
    return p.returncode, err[0].decode(), at[0]


@pytest.mark.parametrize("fmt, reader, shuffle", [
    ("lmdb", "coordinated", "none"), ("lmdb", "naive", "none"),
    ("packed", "coordinated", "none"), ("packed", "naive", "none"),
    ("lmdb", "coordinated", "global"),
])
def test_shard_truncated_during_training(tmp_path, trainset, fmt, reader, shuffle):
    """The issue's case: 3 epochs on 2 ranks, a shard truncated during epoch 1 (old code:
    exit 0, 65 of 500 batches wrong with shuffle none). Now: a non-zero exit with one line
    naming the shard and both sizes, within seconds, and no results written as if whole."""
    ds = copy(trainset[fmt], tmp_path / "d")
    steps = ds.records // 32  # per epoch: 2 ranks x batch 16
    shard = ds.path(2)
    size = int(ds.index.file_bytes[2]) // 2
    out = tmp_path / "run"
    rc, stderr, at = _train_and_truncate(ds, out, reader, shuffle, steps + 3, shard, size)
    assert at < 2 * steps, f"truncated at step {at}, not during epoch 1"
    msg = one_error(rc, "", stderr, "hpcio.train")
    assert msg == (f"{shard}: {size} bytes, expected {int(ds.index.file_bytes[2])}: the "
                   f"file shrank during the run"), msg
    assert not (out / "summary.json").exists()


# ---- reader options: one line naming the option and the value ---------------------------
def test_reader_options_are_typed():
    got = check_options("coordinated", {"prefetch": "3", "collective": "auto",
                                        "shared": "false", "sieve_gap": "0",
                                        "sieve_ratio": "2.5", "willneed": "no",
                                        "mechanism": "sync", "hints": {"cb_nodes": "1"}})
    assert got == {"prefetch": 3, "collective": "auto", "shared": False, "sieve_gap": 0,
                   "sieve_ratio": 2.5, "willneed": False, "mechanism": "sync",
                   "hints": {"cb_nodes": "1"}}
    assert check_options("memory", {"max_bytes": "1000", "prefetch": "2"}) == \
        {"max_bytes": 1000, "prefetch": 2}
    assert check_options("naive", {"collective": "true"}) == {"collective": True}


@pytest.mark.parametrize("reader, opts, says", [
    ("coordinated", {"prefetch": "abc"}, "reader option prefetch='abc' is not an integer"),
    ("coordinated", {"shared": "maybe"}, "reader option shared='maybe' is not true, false "
                                         "or auto"),
    ("coordinated", {"willneed": "auto"}, "reader option willneed='auto' is not true or false"),
    ("coordinated", {"sieve_ratio": "x"}, "reader option sieve_ratio='x' is not a number"),
    ("coordinated", {"mechanism": "mmap"}, "reader option mechanism='mmap' is not one of "
                                           "thread, nonblocking, sync"),
    ("coordinated", {"hints": "cb_nodes=1"}, "reader option hints='cb_nodes=1' is not a "
                                             "mapping"),
    ("naive", {"prefetch": "-"}, "reader option prefetch='-' is not an integer"),
    ("memory", {"max_bytes": "lots"}, "reader option max_bytes='lots' is not an integer"),
    ("naive", {"request_bytes": "1"}, "reader 'naive' has no option request_bytes"),
])
def test_bad_reader_option_is_one_line(reader, opts, says):
    with pytest.raises(HpcioError) as e:
        check_options(reader, opts)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)
    assert e.value.everywhere


@pytest.mark.parametrize("args, says", [
    (["--reader-option", "junk"], "--reader-option 'junk' is not of the form key=value"),
    (["--hint", "junk"], "--hint 'junk' is not of the form key=value"),
    (["--reader-option", "shared=maybe"], "reader option shared='maybe' is not true, false "
                                          "or auto"),
    (["--reader-option", "prefetch=abc"], "reader option prefetch='abc' is not an integer"),
    (["--reader", "naive", "--reader-option", "prefetch=1.5"],
     "reader option prefetch='1.5' is not an integer"),
])
def test_bad_reader_option_on_the_command_line(tmp_path, base, args, says):
    out = tmp_path / "run"
    p = run_mpi(2, TRAIN + ["--data", base["packed"].root, "--model", "emulate",
                            "--out", out] + args, timeout=90)
    msg = one_error(p.returncode, "", p.stderr, "hpcio.train")
    assert msg == says
    assert len(errors(p.stderr, "hpcio.train")[0]) == 1  # said once, by rank 0
    assert not out.exists()  # refused before the run directory


# ---- counters ---------------------------------------------------------------------------
def _epoch(reader, ds, shuffle, steps=30, batch=8):
    plan = make_plan(ds.records, 1, 0, batch, epoch=0, seed=2, shuffle=shuffle).head(steps)
    reader.mark_cache()
    for _ in reader.epoch(plan):
        pass
    reader.mark_cache(end=True)
    return reader.stats


def test_counters_of_the_naive_reader(tmp_path, base):
    """packed: one pread per record, exactly the record bytes; images: an open per record
    and the reads Python's whole-file read makes; HDF5: the sieve buffer shows for 784-byte
    records read in random order; LMDB (mapped): no read calls, the page cache shows it."""
    ds = base["packed"]
    with make_reader("naive", ds) as r:
        assert r.stats.opens == len(ds.paths)
        st = _epoch(r, ds, "global")
        assert (st.calls, st.read_bytes) == (st.records, st.bytes) == (240, st.bytes)
        assert st.opens == len(ds.paths)  # nothing opened during the epoch
    ds = base["images"]
    with make_reader("naive", ds) as r:
        st = _epoch(r, ds, "global", steps=10)
        assert st.opens == st.records == 80
        assert st.read_bytes == st.bytes and st.records <= st.calls <= 2 * st.records
    ds = base["hdf5"]
    with make_reader("naive", ds) as r:
        st = _epoch(r, ds, "global")
        assert st.read_bytes > 10 * st.bytes, st  # HDF5 reads a 64 KiB sieve per record
        assert 0 < st.calls <= st.records  # a sieve hit reads nothing
    ds = copy(base["lmdb"], tmp_path / "lmdb")
    evict(ds)
    with make_reader("naive", ds) as r:
        st = _epoch(r, ds, "none", steps=50)
        assert (st.calls, st.read_bytes) == (0, 0)
        # opening the env already faulted some pages in: the epoch brought the rest
        assert 0 < st.cache_gained_bytes <= int(ds.index.file_bytes.sum())
        assert resident_bytes(ds.paths) >= st.bytes
        assert r.stats.extra["cache_measured"]


def test_resident_bytes(tmp_path, base):
    ds = copy(base["packed"], tmp_path / "d")
    total = int(ds.index.file_bytes.sum())
    warm(ds)
    assert resident_bytes(ds.paths) == total  # the partial last page counts its bytes only
    evict(ds)
    assert resident_bytes(ds.paths) < total // 10
    os.unlink(ds.paths[0])
    with pytest.raises(HpcioError, match="shard file missing"):
        resident_bytes(ds.paths)


@pytest.mark.parametrize("reader", ["naive", "coordinated"])
def test_counters_per_epoch_in_training(tmp_path, base, reader):
    """Cold epochs under mpiexec -n 2: each epoch's reader counters hold opens, calls and
    the page-cache gain, measured on the node's first rank only."""
    ds = base["lmdb"]
    out = tmp_path / "run"
    p = run_mpi(2, TRAIN + ["--data", ds.root, "--reader", reader, "--model", "emulate",
                            "--compute-time", "0", "--batch", "8", "--epochs", "2",
                            "--cache", "cold", "--out", out], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]
    for r, rank in enumerate(ranks):
        for e in rank["epochs"]:
            c = e["counters"]["reader"]
            assert c["records"] == 25 * 8 and c["bytes"] == c["records"] * 784
            gained = c["cache_gained_bytes"]
            if r == 0:
                assert 0 < gained <= int(ds.index.file_bytes.sum())
            else:
                assert gained == 0
            if reader == "naive":
                assert (c["calls"], c["read_bytes"]) == (0, 0)  # mapped: no read calls
            else:
                assert c["calls"] > 0 and c["read_bytes"] >= c["bytes"]
            assert "opens" in c  # files opened during the epoch (set-up opens apart)
