"""Generation: parallel under real MPI gives the serial records, the command line works,
and every bad input ends every rank with one line naming the problem."""

import os
import shlex
import shutil
import sys

import pytest

from hpcio.data.dataset import open_dataset
from hpcio.datagen.write import generate
from hpcio.formats import get_format

from common.datasets import records_of
from common.failure import one_line
from common.fs import private_mount
from common.inproc import run_main
from common.mpi import mpiexec, run_mpi
from common.launch import launch

GEN = ["-m", "hpcio.datagen", "generate"]


def same_records(a, b):
    la, ra = records_of(a)
    lb, rb = records_of(b)
    assert a.records == b.records
    assert (la == lb).all()
    assert ra == rb


@pytest.mark.parametrize("n,fmt,enc,shards", [
    (2, "packed", "png", 3), (2, "lmdb", "png", 3), (2, "hdf5", "raw", 3),
    (2, "images", "png", 3), (3, "lmdb", "jpeg", 4), (3, "hdf5", "png", 5),
    (3, "packed", "raw", 1)])
def test_parallel_generation_matches_serial(tmp_path, n, fmt, enc, shards):
    """Records depend on (seed, id) only: P ranks and K shards give the 1-rank records."""
    preset = "cifar10" if enc == "jpeg" else "mnist"
    serial = generate(tmp_path / "serial", preset, 45, fmt, enc, shards=2, seed=3)
    out = tmp_path / "par"
    p = run_mpi(n, GEN + [out, "--preset", preset, "--records", 45, "--format", fmt,
                          "--encoding", enc, "--shards", shards, "--seed", 3, "--progress"])
    assert p.returncode == 0, p.stderr
    assert "45/45" in p.stderr  # rank 0's bar counted every rank's records
    par = open_dataset(out)
    par.verify_checksums()
    assert len(par.manifest["shards"]) == shards
    same_records(serial, par)
    assert f"records 45, shape" in p.stdout and p.stdout.count("format ") == 1


def test_default_command_and_info(tmp_path):
    out = tmp_path / "d"
    p = run_main(["-m", "hpcio.datagen", out, "--records", 20, "--format", "lmdb"])
    assert p.returncode == 0 and "format lmdb, encoding png, records 20" in p.stdout
    p = run_main(["-m", "hpcio.datagen", "info", out, "--verify"])
    assert p.returncode == 0
    assert "checksums: ok" in p.stdout and "preset mnist, seed 0" in p.stdout
    p = run_main(["-m", "hpcio.datagen", "--help"])
    assert p.returncode == 0
    for cmd in ("generate", "import", "index", "info"):
        assert cmd in p.stdout


def fails(p, *words):
    """Non-zero exit and one line that names the problem."""
    line = one_line(p)
    for w in words:
        assert w in line, line
    return line


def test_refuses_a_directory_that_is_not_a_dataset(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    p = run_main(GEN + [out, "--records", 10])
    fails(p, "not an hpcio dataset", "--force")
    p = run_main(GEN + [out, "--records", 10, "--force"])
    assert p.returncode == 0, p.stderr
    assert (out / "thesis.tex").read_text() == "precious"
    assert open_dataset(out).records == 10


def test_existing_dataset_needs_force_and_force_removes_only_hpcio_files(tmp_path):
    out = tmp_path / "d"
    generate(out, records=12, format="images", encoding="png", shards=2)
    fails(run_main(GEN + [out, "--records", 5]), "already holds an hpcio dataset")
    # a user's file inside hpcio's shard folders, and one beside them
    (out / "shard-00000" / "0001" / "notes.txt").parent.mkdir(parents=True, exist_ok=True)
    (out / "shard-00000" / "0001" / "notes.txt").write_text("mine")
    (out / "README").write_text("mine too")
    p = run_main(GEN + [out, "--records", 5, "--format", "packed", "--force"])
    assert p.returncode == 0, p.stderr
    ds = open_dataset(out)
    assert ds.format == "packed" and ds.records == 5
    left = sorted(str(q.relative_to(out)) for q in out.rglob("*") if q.is_file())
    assert left == ["README", "hpcio.json", "index.npz", "shard-00000.rec",
                    "shard-00000/0001/notes.txt"]


def test_never_overwrites_a_file_hpcio_did_not_write(tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    (out / "shard-00000.rec").write_bytes(b"somebody else's shard")
    fails(run_main(GEN + [out, "--records", 5, "--force"]), "shard-00000.rec",
          "not written by hpcio")
    assert (out / "shard-00000.rec").read_bytes() == b"somebody else's shard"


@pytest.mark.parametrize("args,words", [
    (["--preset", "svhn"], ["--preset", "invalid choice", "svhn"]),
    (["--format", "petastorm"], ["--format", "invalid choice"]),
    (["--encoding", "webp"], ["--encoding", "invalid choice"]),
    (["--records", "0"], ["--records", "'0' must be an integer >= 1"]),
    (["--records", "3", "--shards", "4"], ["--shards must be between 1 and"]),
    (["--encoding", "png", "--format", "hdf5", "--chunk-records", "4"],
     ["chunk_records needs raw"]),
    (["--shape", "100000x100000x3"], ["shape 100000x100000x3", "GiB of memory available"]),
    (["--format", "hdf5", "--encoding", "png", "--dtype", "float32"],
     ["hdf5 --dtype float32", "needs raw encoding", "png records are encoded"]),
    (["--format", "hdf5", "--encoding", "jpeg", "--dtype", "float32", "--chunk-records", "4"],
     ["hdf5 --dtype float32", "needs raw encoding", "jpeg records are encoded"]),
    (["--format", "lmdb", "--dtype", "float32"],
     ["--dtype float32: the lmdb format stores uint8 records only", "--format hdf5"]),
    (["--format", "packed", "--encoding", "raw", "--dtype", "float32"],
     ["the packed format stores uint8 records only"]),
    (["--format", "hdf5", "--dtype", "float16"], ["--dtype", "invalid choice"]),
])
def test_bad_arguments(tmp_path, args, words):
    p = run_main(GEN + [tmp_path / "d"] + args)
    fails(p, *words)
    assert not (tmp_path / "d").exists()  # refused before anything is written


def test_a_bad_argument_on_two_ranks_is_one_line(tmp_path):
    """Each rank refuses it, rank 0 alone says so (the ranks end together, no abort)."""
    p = run_mpi(2, GEN + [tmp_path / "d", "--records", "3", "--shards", "4"], timeout=60)
    fails(p, "--shards must be between 1 and")
    assert p.returncode == 2 and not (tmp_path / "d").exists()


def test_output_under_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("")
    fails(run_main(GEN + [tmp_path / "f" / "d", "--records", 5]), "Not a directory")
    fails(run_main(GEN + [tmp_path / "f", "--records", 5]), "exists and is not a directory")


def _launch(prefix, n, args, timeout=120):
    env = dict(os.environ)
    return launch(prefix + [mpiexec(), "-n", str(n), sys.executable] + GEN +
                          [str(a) for a in args], timeout=timeout, env=env)


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5", "images"])
def test_force_replaces_the_leftovers_of_a_failed_run(tmp_path, fmt):
    """A run that died of a full disk leaves its marker: without --force a rerun says what
    is there; with --force the leftovers (and nothing else) are replaced."""
    prefix, mnt = private_mount(tmp_path, "size=4m")  # HDF5 wants 1 MiB to spare
    d = mnt / "d"
    gen = " ".join(shlex.quote(str(a)) for a in [mpiexec(), "-n", 2, sys.executable] + GEN +
                   [d, "--preset", "cifar10", "--encoding", "raw", "--format", fmt,
                    "--shards", 2])
    # the records' bytes (4.0 MB, 4.18 MB) pass the space check; with the format's
    # overhead (LMDB pages, file blocks, HDF5's labels and headers) they do not fit
    n = {"hdf5": 1360}.get(fmt, 1300)
    script = (f"{gen} --records {n} 2>/dev/null; echo rc=$?; touch {d}/mine.txt; "
              f"{gen} --records 20 2>&1 | grep -v Abort; {gen} --records 20 --force "
              f">/dev/null 2>&1; echo rc=$?; ls -A {d}")
    p = launch(prefix + ["sh", "-c", script], timeout=240)
    out = p.stdout.splitlines()
    assert out[0] == "rc=2", p.stdout + p.stderr
    assert any("holds the leftovers of an hpcio run that did not finish" in ln
               for ln in out), p.stdout
    k = out.index("rc=0")
    assert sorted(out[k + 1:]) == sorted(["hpcio.json", "index.npz", "mine.txt"] + [
        t for i in range(2) for t in get_format(fmt).targets(i, None) if
        not t.startswith(".")]), p.stdout


@pytest.mark.parametrize("fmt,enc", [("packed", "raw"), ("lmdb", "raw"), ("hdf5", "raw"),
                                     ("hdf5", "png"), ("images", "raw")])
def test_disk_full_on_two_ranks(tmp_path, fmt, enc):
    """A 1 MiB tmpfs in a private mount namespace: 1500 records are refused before any
    write, 300 (whose bytes fit, not with the format's overhead) fail in the writing, by
    ENOSPC from any library: each is one line."""
    prefix, mnt = private_mount(tmp_path, "size=1m")
    p = _launch(prefix, 2, [mnt / "d", "--preset", "cifar10", "--records", 1500,
                            "--format", fmt, "--encoding", enc, "--shards", 2])
    fails(p, "no space for 1,500 records")
    p = _launch(prefix, 2, [mnt / "d2", "--preset", "cifar10", "--records", 340,
                            "--format", fmt, "--encoding", enc, "--shards", 2])
    fails(p, "no space")


def test_read_only_file_system(tmp_path):
    prefix, mnt = private_mount(tmp_path, "size=1m,ro")
    fails(_launch(prefix, 2, [mnt / "d", "--records", 5]), "read-only file system")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_unwritable_directory(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        fails(run_mpi(2, GEN + [d / "x", "--records", 5]), "ermission denied")
    finally:
        d.chmod(0o755)


def test_float32_hdf5_on_two_ranks_matches_serial(tmp_path):
    """--dtype float32 (raw implied) written by 2 ranks: the serial records, Caffe's
    layout in the manifest and the summary."""
    serial = generate(tmp_path / "serial", "cifar10", 13, "hdf5", "raw", shards=2, seed=3,
                      dtype="float32")
    out = tmp_path / "par"
    p = run_mpi(2, GEN + [out, "--preset", "cifar10", "--records", 13, "--format", "hdf5",
                          "--dtype", "float32", "--shards", 3, "--seed", 3])
    assert p.returncode == 0, p.stderr
    assert "encoding raw" in p.stdout and \
        "32x32x3 float32 (stored chw, pixel x 0.00390625)" in p.stdout
    par = open_dataset(out)
    par.verify_checksums()
    assert par.manifest["dtype"] == "float32" and par.manifest["layout"] == "chw"
    same_records(serial, par)


def test_shape_override_for_offline_preprocessing(tmp_path):
    """Raw records drawn at a model's input size (227 is not a multiple of the drawing
    resolution divisor) for runs without decode/resize."""
    from hpcio.datagen.write import generate
    ds = generate(str(tmp_path / "off"), "imagenet", records=3, format="packed",
                  encoding="raw", shape=(227, 227, 3))
    assert ds.manifest["shape"] == [227, 227, 3]
    assert set(ds.index.length.tolist()) == {227 * 227 * 3}
