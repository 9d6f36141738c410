"""Darshan tracing (hpcio.measure.darshan): Darshan 3.5.0 built from ../shared/vendor against
mpi4py's MPI by scripts/darshan-local.sh (once, cached in the checkout's .darshan), real traced
``mpiexec -n 2`` jobs that re-execute themselves with it preloaded, and the real logs in
tests/fixtures."""

import glob
import importlib.util
import json
import os
import shutil
import sys
import tempfile

import pytest

from common.datasets import make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import mpiexec, run_mpi, run_py, slurm_up
from common.launch import launch
from hpcio.errors import HpcioError
from hpcio.explain.checkpoints import ckpt_figures, ckpt_findings, load_checkpoint_run
from hpcio.measure import darshan, darshanlog

from common.fixtures import FIXTURES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
TARBALL = os.path.join(SHARED, "vendor", "darshan-3.5.0.tar.gz")
BUILD = os.path.join(ROOT, "scripts", "darshan-local.sh")
WORKLOAD = os.path.join(ROOT, "tests", "mpi", "darshan_read.py")
BIN = os.path.dirname(sys.executable)


def _text(path):
    with open(path) as f:
        return f.read()


def _builds():
    """Darshan is built (about a minute) in its own CI lane, after the main test run."""
    if os.environ.get("HPCIO_DARSHAN_TESTS") != "1":
        pytest.skip("Darshan builds are tested in .ci/lane-darshan (HPCIO_DARSHAN_TESTS=1)")


def _build(prefix, mpicc=None):
    _builds()
    env = dict(os.environ, PYTHON=sys.executable, PATH=BIN + os.pathsep + os.environ["PATH"])
    if mpicc:
        env["MPICC"] = mpicc
    return launch([BUILD, "build", "--source", TARBALL, "--prefix", prefix],
                          timeout=1200, env=env)


@pytest.fixture(scope="session")
def lib():
    """libdarshan.so built against the mpicc beside this Python (the mpich wheel's)."""
    if not os.path.isfile(TARBALL):
        pytest.skip(f"no Darshan source at {TARBALL}")
    if not shutil.which("cc"):
        pytest.skip("no C compiler (cc)")
    if not (os.path.exists(os.path.join(BIN, "mpicc")) or shutil.which("mpicc")):
        pytest.skip("no mpicc beside this Python nor on PATH")
    if not os.path.isfile("/usr/include/zlib.h") and os.geteuid() != 0:
        pytest.skip("zlib headers missing and not root (apt-get install zlib1g-dev)")
    p = _build(os.path.join(ROOT, ".darshan"))
    assert p.returncode == 0, p.stderr
    path = p.stdout.split()[-1]
    assert os.path.isfile(path)
    return path


@pytest.fixture(scope="session")
def parser(request):
    """None (PyDarshan) when PyDarshan is installed, else the build's darshan-parser."""
    if importlib.util.find_spec("darshan") is not None:
        return None
    return darshanlog.find_parser(request.getfixturevalue("lib"))


def _traced(n, lib, config, data, out, launcher=None):
    """Run the workload on n ranks; return (process, [rank outputs], log path)."""
    os.makedirs(out, exist_ok=True)
    args = [WORKLOAD, lib, config, data, out]
    if launcher:
        p = launch(launcher + ["-n", str(n), sys.executable] + args,
                           timeout=180)
    else:
        p = run_mpi(n, args)
    assert p.returncode == 0, p.stderr
    ranks = []
    for r in range(n):
        with open(os.path.join(out, f"rank-{r}.json")) as f:
            ranks.append(json.load(f))
    return p, ranks, darshan.log_path(out, "read")


def _data_file(tmp_path, size=5 * (1 << 20) + 12345):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(size))
    return str(path), size


# -- config and environment (pure) -----------------------------------------------------

def test_config_raises_records_and_memory_for_many_files():
    small = darshan.config_text(100)
    assert small == _text(darshan.DEFAULT_CONFIG)  # the shipped sizes already fit
    text = darshan.config_text(1_000_000)
    lines = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines()
             if ln.strip() and not ln.startswith("#")}
    assert int(lines["MAX_RECORDS"][0]) >= 1_000_000
    assert set(lines["MAX_RECORDS"][1].split(",")) == {"POSIX", "STDIO", "MPI-IO",
                                                        "DXT_POSIX", "DXT_MPIIO"}
    # POSIX + MPI-IO + STDIO records are 704 + 560 + 248 bytes in Darshan 3.5.0
    assert int(lines["MODMEM"][0]) * (1 << 20) >= 1_000_000 * 1512
    assert int(lines["NAMEMEM"][0]) * (1 << 20) >= 1_000_000 * 100
    excluded = lines["NAME_EXCLUDE"][0].split(",")
    assert r"\.pyc?$" in excluded and "/site-packages/" in excluded


def test_write_config_and_shared_config(tmp_path):
    path = darshan.write_config(str(tmp_path / "sub" / "d.conf"), 50_000)
    assert _text(path) == darshan.config_text(50_000)
    shared = darshan.shared_config(50_000, str(tmp_path))
    assert shared == darshan.shared_config(50_000, str(tmp_path))  # same content, same name
    assert shared != darshan.shared_config(60_000, str(tmp_path))
    assert _text(shared) == darshan.config_text(50_000)


def test_trace_env():
    env = darshan.trace_env("/x/libdarshan.so", "/c/d.conf", dxt=True,
                            environ={"LD_PRELOAD": "/y/other.so"})
    assert env == {"LD_PRELOAD": "/x/libdarshan.so:/y/other.so",
                   "DARSHAN_CONFIG_PATH": "/c/d.conf", "DARSHAN_DISABLE_SHARED_REDUCTION": "1",
                   "DARSHAN_MOD_ENABLE": "DXT_POSIX,DXT_MPIIO",
                   "DARSHAN_LOG_DIR_PATH": tempfile.gettempdir()}
    env = darshan.trace_env("/x/libdarshan.so", "/c/d.conf", dxt=False,
                            environ={"DARSHAN_LOG_DIR_PATH": "/logs"})
    assert env["LD_PRELOAD"] == "/x/libdarshan.so" and "DARSHAN_MOD_ENABLE" not in env
    assert env["DARSHAN_LOG_DIR_PATH"] == "/logs"
    assert darshan.trace_env("/x/l.so", "/c", log_dir="/mine",
                             environ={"DARSHAN_LOG_DIR_PATH": "/logs"})["DARSHAN_LOG_DIR_PATH"] \
        == "/mine"


# -- a real build and real traced jobs ---------------------------------------------------

def test_library_fits_mpi4py(lib):
    used = darshan.check_library(lib)
    assert os.path.realpath(used) == os.path.realpath(darshan.mpi4py_libmpi())
    meta = darshan.info(lib, environ={"DARSHAN_CONFIG_PATH": darshan.DEFAULT_CONFIG,
                                      "DARSHAN_DISABLE_SHARED_REDUCTION": "1", "HOME": "/h"})
    assert meta["version"] == "3.5.0" and meta["libmpi"] == os.path.realpath(used)
    assert meta["env"] == {"DARSHAN_CONFIG_PATH": darshan.DEFAULT_CONFIG,
                           "DARSHAN_DISABLE_SHARED_REDUCTION": "1"}
    assert any(s.startswith("NAME_EXCLUDE") for s in meta["config"])


def test_build_is_cached(lib):
    p = _build(os.path.join(ROOT, ".darshan"))
    assert p.returncode == 0 and p.stdout.split()[-1] == lib
    assert "building" not in p.stderr


def _check_traced_mpiio(ranks, log, data_size, lib):
    assert [r["size"] for r in ranks] == [2, 2]
    for r in ranks:
        assert r["pid"] == r["pid_before_exec"]  # exec kept the launcher's process
        assert len(r["libmpi"]) == 1  # one MPI library, shared by Darshan and mpi4py
        assert r["libdarshan"] == [os.path.realpath(lib)]
    assert os.path.isfile(log)
    s = darshanlog.log_summary(log)
    assert s["nprocs"] == 2 and s["partial"] == [] and not darshanlog.log_is_partial(log)
    assert {"POSIX", "MPI-IO", "DXT_POSIX", "DXT_MPIIO"} <= set(s["modules"])
    assert s["bytes_read"]["MPI-IO"] == {r["rank"]: r["read"] for r in ranks}
    assert sum(r["read"] for r in ranks) == data_size
    # per rank: the data file and its own rank-<r>.json; none of Python's imports
    assert s["records"]["POSIX"] == 4 and s["records"]["MPI-IO"] == 2
    return s


def test_traced_mpiexec_mpiio_reads(lib, tmp_path):
    data, size = _data_file(tmp_path)
    config = darshan.write_config(str(tmp_path / "d.conf"), 1)
    out = str(tmp_path / "run")
    _, ranks, log = _traced(2, lib, config, data, out)
    s = _check_traced_mpiio(ranks, log, size, lib)
    assert s["bytes_read"]["POSIX"] == s["bytes_read"]["MPI-IO"]  # independent reads: 1:1
    assert os.listdir(os.path.join(out, "darshan")) == ["read.darshan"]
    assert not os.path.exists(os.path.join(out, "fallback")) or \
        os.listdir(os.path.join(out, "fallback")) == []
    parsed = darshanlog.log_summary(log, parser=darshanlog.find_parser(lib))
    assert parsed == s  # darshan-parser and PyDarshan (when installed) agree


def test_traced_srun_pmi2_mpiio_reads(lib, tmp_path):
    why = "no /etc/slurm" if not os.path.isdir("/etc/slurm") else slurm_up()
    if why:
        pytest.skip(f"no Slurm here: {why} (scripts/slurm-local.sh start; needs root)")
    data, size = _data_file(tmp_path)
    config = darshan.write_config(str(tmp_path / "d.conf"), 1)
    _, ranks, log = _traced(2, lib, config, data, str(tmp_path / "run"),
                            launcher=["srun", "--mpi=pmi2", "-O", "--kill-on-bad-exit=1"])
    _check_traced_mpiio(ranks, log, size, lib)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """3,000 files of 1 KiB: one file per record, as an image folder; 1,500 per rank."""
    d = tmp_path_factory.mktemp("images")
    for i in range(3000):
        (d / f"{i:06d}.raw").write_bytes(bytes([i % 256]) * 1024)
    return str(d)


def test_config_sized_for_a_folder_keeps_every_file(lib, folder, tmp_path):
    config = darshan.write_config(str(tmp_path / "d.conf"), 3000)
    _, ranks, log = _traced(2, lib, config, folder, str(tmp_path / "run"))
    s = darshanlog.log_summary(log)
    assert s["partial"] == []
    assert s["records"]["POSIX"] == 3000 + 2  # every file, and the two rank-<r>.json
    assert [r["read"] for r in ranks] == [1500 * 1024] * 2
    assert s["bytes_read"]["POSIX"] == {r["rank"]: r["read"] for r in ranks}


def test_default_record_table_overflows_partial(lib, folder, tmp_path):
    config = tmp_path / "d.conf"  # the project's exclusions, Darshan's 1,024 records
    config.write_text("".join(ln for ln in _text(darshan.DEFAULT_CONFIG).splitlines(True)
                              if ln.startswith("NAME_EXCLUDE")))
    _, _, log = _traced(2, lib, str(config), folder, str(tmp_path / "run"))
    assert darshanlog.log_is_partial(log)
    s = darshanlog.log_summary(log)
    assert "POSIX" in s["partial"]
    assert s["records"]["POSIX"] <= 2 * 1024


# -- bad input: one line, non-zero exit, nothing left running -------------------------

def test_no_library(tmp_path):
    data, _ = _data_file(tmp_path, 10)
    p = run_py([WORKLOAD, str(tmp_path / "libdarshan.so"), darshan.DEFAULT_CONFIG, data,
                str(tmp_path / "run")], timeout=60)
    assert "no Darshan library at" in one_line(p, "darshan_read: ")


def test_library_that_is_not_darshan(tmp_path):
    data, _ = _data_file(tmp_path, 10)
    libmpi = darshan.mpi4py_libmpi()
    p = run_py([WORKLOAD, libmpi, darshan.DEFAULT_CONFIG, data, str(tmp_path / "run")],
               timeout=60)
    assert "is not a Darshan runtime library" in one_line(p, "darshan_read: ")
    text = tmp_path / "libdarshan.so"
    text.write_text("not a library\n")
    with pytest.raises(HpcioError, match="is not a shared library"):
        darshan.check_library(str(text))


def test_bad_library_under_mpiexec_ends_every_rank(tmp_path):
    data, _ = _data_file(tmp_path, 10)
    p = run_mpi(2, [WORKLOAD, str(tmp_path / "nope.so"), darshan.DEFAULT_CONFIG, data,
                    str(tmp_path / "run")], timeout=60)
    assert one_line(p, "darshan_read: ") == \
        f"darshan_read: error: no Darshan library at {tmp_path}/nope.so"


def test_library_of_another_mpi(tmp_path_factory):
    """Darshan built with the system's mpicc while mpi4py uses the wheel's MPI."""
    other = "/usr/bin/mpicc"
    if not (os.path.exists(other) and os.path.isfile(TARBALL) and shutil.which("cc")):
        pytest.skip("no system mpicc (apt-get install libmpich-dev) or no Darshan source")
    if os.path.realpath(darshan.mpi4py_libmpi()).startswith(("/usr/", "/lib")):
        pytest.skip("mpi4py uses the system MPI here")
    p = _build(os.path.join(ROOT, ".darshan", "other-mpi"), mpicc=other)
    assert p.returncode == 2  # the build succeeds, its check against mpi4py fails
    assert "but mpi4py loads" in p.stderr.splitlines()[-1]
    lib = os.path.join(ROOT, ".darshan", "other-mpi", "lib", "libdarshan.so")
    with pytest.raises(HpcioError, match="but mpi4py loads"):
        darshan.check_library(lib)


def test_bad_logs(tmp_path):
    with pytest.raises(HpcioError, match="no Darshan log at"):
        darshanlog.log_summary(str(tmp_path / "none.darshan"))
    junk = tmp_path / "junk.darshan"
    junk.write_bytes(b"3.41" + bytes(2000))
    with pytest.raises(HpcioError, match="is not a Darshan 3 log"):
        darshanlog.log_is_partial(str(junk))
    p = run_main(["-m", "hpcio.measure.darshan", "summary", str(junk)])
    assert "is not a Darshan 3 log" in one_line(p)


# -- the shared fixture logs and their truth ------------------------------------------

def _fixture(*parts):
    path = os.path.join(FIXTURES, *parts)
    if not os.path.exists(path):
        pytest.skip(f"no fixtures at {path}")
    return path


def test_fixture_logs_against_truth(parser):
    d = _fixture("darshan")
    truth = {}
    for line in _text(os.path.join(d, "truth.jsonl")).splitlines():
        t = json.loads(line)
        truth.setdefault((t["mode"], t["nprocs"]), {})[t["rank"]] = t
    logs = sorted(glob.glob(os.path.join(d, "*.darshan")))
    assert len(logs) == len(truth) == 12
    for log in logs:
        mode, np_ = os.path.basename(log)[:-len(".darshan")].rsplit("-np", 1)
        ranks = truth[(mode, int(np_))]
        s = darshanlog.log_summary(log, parser)
        assert s["nprocs"] == len(ranks) and s["version"] == "3.5.0"
        posix = s["bytes_read"]["POSIX"]
        got = {r: t["bytes"] for r, t in ranks.items()}
        if mode == "coordinated-mpiio":
            assert s["bytes_read"]["MPI-IO"] == got and posix == got
        elif mode == "naive-lmdb":  # memory-mapped: Darshan sees the meta pages only
            assert all(posix[r] < got[r] / 1000 for r in ranks)
        elif mode == "naive-hdf5":  # HDF5's sieve buffer reads more than it delivers
            assert all(posix[r] > got[r] for r in ranks)
        else:  # naive-images: one file a record
            assert posix == got
            assert s["records"]["POSIX"] == sum(t["records"] for t in ranks.values())
        # only the 1-rank image run overflowed a table: DXT's 2 MiB default trace memory
        expect = ["DXT_POSIX"] if (mode, np_) == ("naive-images", "1") else []
        assert s["partial"] == expect and darshanlog.log_is_partial(log) == bool(expect)


@pytest.mark.skipif(importlib.util.find_spec("darshan") is None, reason="no PyDarshan")
def test_older_formats_read_through_pydarshan():
    """Logs of Darshan 3.0.0 to 3.4.0 (formats 3.00 to 3.21, another header layout), made
    by others: read, with the numbers their program wrote and PyDarshan's DXT."""
    from darshan.backend import cffi_backend as be

    logs = sorted(glob.glob(os.path.join(_fixture("darshan", "older"), "*.darshan")))
    assert len(logs) == 7
    for path in logs:
        log = darshanlog.read_log(path)
        s = darshanlog.log_summary(path)
        lib = os.path.basename(path)[:-len(".darshan")].rsplit("-", 1)[1]
        assert log.lib_version == s["version"] == lib and log.log_version < "3.41"
        assert log.counter_reader == "pydarshan" and "mpi-io-test" in log.exe
        if "dxt" in path:  # -i 4 at 32 ranks, no shared reduction
            assert log.nprocs == 32
            assert s["bytes_read"]["MPI-IO"] == {r: 4 << 24 for r in range(32)}
            h = be.log_open(path)
            want = 0
            for mod in ("DXT_POSIX", "DXT_MPIIO"):
                rec = be.log_get_dxt_record(h, mod)
                while rec is not None:
                    want += rec["write_count"] + rec["read_count"]
                    rec = be.log_get_dxt_record(h, mod)
            be.log_close(h)
            assert len(log.dxt) == want > 0
            assert (log.dxt["end"] >= log.dxt["start"]).all()
        else:  # 4 ranks, 16 MiB each way per rank, one shared file
            assert log.nprocs == 4
            for key in ("bytes_read", "bytes_written"):
                assert s[key]["MPI-IO"] == s[key]["POSIX"] == {-1: 64 << 20}

    # what hpcio checks before PyDarshan (whose library crashes on a corrupt stream)
    with open(next(p for p in logs if p.endswith("x86_64-3.0.0.darshan")), "rb") as f:
        good = f.read()
    bad = {"cut": (good[:400], "truncated \\(400 of 846 bytes\\)"),
           "flip": (good[:400] + bytes([good[400] ^ 255]) + good[401:],
                    "job record: corrupt"),
           "3.99": (b"3.99" + good[4:], "format 3.99 that PyDarshan cannot read either")}
    d = tempfile.mkdtemp()
    try:
        for name, (data, said) in bad.items():
            junk = os.path.join(d, name + ".darshan")
            with open(junk, "wb") as f:
                f.write(data)
            with pytest.raises(HpcioError, match=said):
                darshanlog.read_log(junk)
    finally:
        shutil.rmtree(d)


def test_hpcio_run_logs_match_the_runs_counters(parser):
    runs = sorted(glob.glob(os.path.join(_fixture("hpcio-runs"), "*-n[0-9]*")))
    assert runs
    for run in runs:
        log, = glob.glob(os.path.join(run, "darshan", "*.darshan"))
        s = darshanlog.log_summary(log, parser)
        stats = {}
        for path in glob.glob(os.path.join(run, "rank-*.json")):
            r = json.loads(_text(path))
            stats[r["rank"]] = r["reader_stats"]
        assert s["nprocs"] == len(stats) and s["partial"] == []
        if "-coordinated-" in run:  # MPI-IO bytes are the reader's own count, to the byte
            assert s["bytes_read"]["MPI-IO"] == {r: st["read_bytes"] for r, st in stats.items()}
        elif "-lmdb-" in run:  # naive LMDB: memory-mapped, invisible to Darshan
            assert all(s["bytes_read"]["POSIX"][r] < st["bytes"] / 100
                       for r, st in stats.items())
        else:  # naive HDF5, 784-byte records: a 64 KiB sieve-buffer read for each
            assert all(s["bytes_read"]["POSIX"][r] > 50 * st["bytes"]
                       for r, st in stats.items())


def test_parser_and_pydarshan_agree_on_fixtures(lib):
    pytest.importorskip("darshan", reason="PyDarshan not installed (the [darshan] extra)")
    parser = darshanlog.find_parser(lib)
    for log in glob.glob(os.path.join(_fixture("darshan"), "*.darshan")):
        assert darshanlog.log_summary(log) == darshanlog.log_summary(log, parser)


def test_incomplete_tracing_is_named(tmp_path):
    """A run preloaded by its launcher without the project's config would miss the dataset."""
    assert darshan.preloaded_library({"LD_PRELOAD": "/a/libdarshan.so:/b/x.so"}) == \
        "/a/libdarshan.so"
    assert darshan.preloaded_library({"LD_PRELOAD": "/b/x.so"}) is None
    assert "without DARSHAN_CONFIG_PATH" in darshan.incomplete(4, {})
    assert darshan.incomplete(4, {"DARSHAN_CONFIG_PATH": darshan.DEFAULT_CONFIG}) is None
    assert "below the dataset's 100000 files" in darshan.incomplete(
        100_000, {"DARSHAN_CONFIG_PATH": darshan.DEFAULT_CONFIG})
    bare = tmp_path / "bare.conf"
    bare.write_text("MAX_RECORDS 4096 POSIX\n")
    assert "no NAME_EXCLUDE" in darshan.incomplete(4, {"DARSHAN_CONFIG_PATH": str(bare)})
    assert darshan.dataset_files(str(tmp_path)) == 0
    (tmp_path / "hpcio.json").write_text(json.dumps(
        {"format": "images", "records": 70, "shards": [{}, {}]}))
    assert darshan.dataset_files(str(tmp_path)) == 70


@pytest.mark.parametrize("reader", ["naive", "coordinated"])
def test_traced_training_run(tmp_path, lib, parser, reader):
    """hpcio.train --darshan: every rank re-executes itself preloaded, the log lands in the
    run directory, is complete, and MPI-IO's bytes are the coordinated reader's to the byte."""
    ds = make_dataset(tmp_path, "packed", "raw", records=256, shards=2)
    out = tmp_path / "run"
    p = run_mpi(2, ["-m", "hpcio.train", "--data", ds.root, "--reader", reader, "--model",
                    "emulate", "--batch", 16, "--darshan", lib, "--darshan-dxt",
                    "--out", out], timeout=180)
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr
    logs = glob.glob(str(out / "darshan" / "*.darshan"))
    assert logs == [str(out / "darshan" / "run.darshan")]
    assert not darshanlog.log_is_partial(logs[0])
    with open(out / "env.json") as f:
        env = json.load(f)
    assert env["darshan"]["log"] == logs[0] and env["darshan"]["library"]
    ranks = []
    for r in range(2):
        with open(out / f"rank-{r}.json") as f:
            ranks.append(json.load(f)["reader_stats"])
    summary = darshanlog.log_summary(logs[0], None if parser is None else parser)
    if reader == "coordinated":
        mpiio = summary["bytes_read"]["MPI-IO"]
        assert sum(mpiio.values()) == sum(r["read_bytes"] for r in ranks) > 0


def test_traced_checkpoints_mpiio_bytes_are_hpcios(tmp_path, lib, parser):
    """The coordinated checkpoint writer traced with ``--darshan`` (the project's config,
    2 ranks): the log lands in the run's darshan/, and MPI-IO wrote and read exactly the
    checkpoint's bytes as hpcio counts them, every rank its own shard (its tensors, no
    padding, no metadata); the report reads the same bytes from it."""
    out = tmp_path / "run"
    p = launch([mpiexec(), "-n", "2", sys.executable, "-m", "hpcio.checkpoint", "run",
                "--model", "llama3_8b", "--scale", "0.0002", "--writer", "coordinated",
                "--dir", str(tmp_path / "ckpt"), "--out", str(out), "--checkpoints", "1",
                "--darshan", lib], timeout=180)
    assert p.returncode == 0, p.stderr
    with open(out / "summary.json") as f:
        want = json.load(f)["checkpoint_bytes"]
    with open(out / "env.json") as f:
        assert json.load(f)["darshan"]["log"] == str(out / "darshan" / "run.darshan")
    found = glob.glob(str(out / "darshan" / "*.darshan"))
    assert found == [str(out / "darshan" / "run.darshan")], found
    got = darshanlog.log_summary(found[0], parser)
    wrote, read = got["bytes_written"]["MPI-IO"], got["bytes_read"]["MPI-IO"]
    assert sum(wrote.values()) == sum(read.values()) == want > 0, (wrote, read, want)
    assert sorted(wrote) == [0, 1] and all(v > 0 for v in wrote.values()), wrote
    f = ckpt_figures(load_checkpoint_run(str(out)))
    assert f["darshan"]["mpiio_bytes_written"] == want
    assert f["darshan"]["mpiio_coll_writes"] > 0 and f["darshan"]["files_written"] >= 1
    assert "file-per-process metadata" not in {x.rule for x in ckpt_findings([f])}


def test_preloaded_without_the_config_is_said(tmp_path, lib):
    """A launcher that preloads Darshan itself, without the project's config: rank 0 says
    once, before training, that the log will miss the dataset's reads."""
    ds = make_dataset(tmp_path, "packed", "raw", records=64, shards=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DARSHAN_")}
    env.update(LD_PRELOAD=lib, DARSHAN_LOG_DIR_PATH=str(tmp_path))
    p = launch([mpiexec(), "-n", "2", sys.executable, "-m", "hpcio.train", "--data",
                        ds.root, "--model", "emulate", "--batch", "8", "--out",
                        str(tmp_path / "run")], timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    warn = [ln for ln in p.stderr.splitlines() if "warning" in ln]
    assert warn == ["hpcio.train: warning: the Darshan log will be incomplete: Darshan runs "
                    "without DARSHAN_CONFIG_PATH: Python's imports fill its record table "
                    "before the dataset is opened (use --darshan LIB)"]
    assert os.path.exists(tmp_path / "run" / "darshan" / "run.darshan")
