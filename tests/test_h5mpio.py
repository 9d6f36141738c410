"""Parallel HDF5 (``--reader-option hdf5=mpio``): the coordinated reader through h5py's
``mpio`` driver delivers exactly what the other readers deliver, and where it cannot read
(h5py without MPI, a dataset that is not HDF5 rows) every command says so in one line.

The refusals run everywhere (``make test``'s h5py has no MPI). The reads need h5py built
against a parallel HDF5: they are marked ``lane`` and run in ``.ci/lane-parallel-hdf5``,
which builds it (skipped where ``h5py.get_config().mpi`` is false).
"""

import json
import os
import re
import shutil

import h5py
import pytest

from hpcio.errors import HpcioError
from hpcio.readers import check_options

from common.datasets import make_dataset
from common.failure import one_line
from common.mpi import run_mpi
from test_train import check_run

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "mpi", "check_readers.py")
CHANGE = os.path.join(HERE, "mpi", "check_integrity.py")
TRAIN = ["-m", "hpcio.train"]
BENCH = ["-m", "hpcio.bench"]
MPIO = "coordinated:hdf5=mpio"
parallel = pytest.mark.skipif(not h5py.get_config().mpi,
                              reason="h5py without MPI (.ci/lane-parallel-hdf5 builds one)")


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """61 records in 2 shards (neither 2 nor 3 ranks x batch 3 divides them): contiguous,
    chunked by 4 rows, contiguous with rows too large for one union (96x96x3), Caffe's
    float32 (N, C, H, W) contiguous and chunked, and PNG records in a blob; a packed set."""
    root = tmp_path_factory.getbasetemp() / "h5mpio-data"
    return {"contiguous": make_dataset(root, "hdf5", "raw", records=61, seed=2),
            "chunked": make_dataset(root, "hdf5", "raw", records=61, seed=2,
                                    chunk_records=4),
            "wide": make_dataset(root, "hdf5", "raw", preset="cifar10", records=61, seed=2,
                                 shape=[96, 96, 3]),
            "f32": make_dataset(root, "hdf5", "raw", records=61, seed=2, dtype="float32"),
            "f32-chunked": make_dataset(root, "hdf5", "raw", records=61, seed=2,
                                        dtype="float32", chunk_records=4),
            "blob": make_dataset(root, "hdf5", "png", records=61, seed=2),
            "packed": make_dataset(root, "packed", "raw", records=61, seed=2)}


# ---- refusals: one line, exit 2, nothing written, no abort banner ------------------------
def _refused(p, prog):
    """The job's whole stderr is one line of ``prog`` (no traceback, no launcher banner)."""
    return one_line(p, f"{prog}: error: reader option hdf5=mpio: ", rc=2, raw=True)


def _both(tmp_path, ds):
    """``hpcio.train`` and ``hpcio.bench`` at 2 ranks with hdf5=mpio: each one line."""
    out, js = tmp_path / "run", tmp_path / "bench.json"
    t = run_mpi(2, TRAIN + ["--data", ds.root, "--model", "emulate", "--batch", 3,
                            "--reader-option", "hdf5=mpio", "--out", out], timeout=90)
    b = run_mpi(2, BENCH + ["--data", ds.root, "--readers", f"naive,{MPIO}", "--cache",
                            "asis", "--shuffle", "none", "--repeat", 1, "--limits", "seq",
                            "--out", js], timeout=90)
    lines = [_refused(t, "hpcio.train"), _refused(b, "hpcio.bench")]
    assert not out.exists() and not js.exists()
    return [ln.split(": error: ", 1)[1] for ln in lines]


@pytest.mark.skipif(h5py.get_config().mpi, reason="this h5py has MPI")
def test_mpio_without_parallel_h5py_is_one_line(tmp_path, sets):
    for msg in _both(tmp_path, sets["contiguous"]):
        assert msg == (f"reader option hdf5=mpio: h5py {h5py.version.version} is built "
                       f"without MPI; build it against a parallel HDF5: CC=mpicc "
                       f"HDF5_MPI=ON HDF5_DIR=<parallel HDF5, e.g. "
                       f"/usr/lib/x86_64-linux-gnu/hdf5/mpich> pip install --no-deps "
                       f"--force-reinstall --no-binary=h5py --no-build-isolation h5py (with Cython and "
                       f"pkgconfig installed; docs/setup.md: Parallel HDF5)")


@pytest.mark.parametrize("name, says", [
    ("packed", "is a packed dataset, not HDF5"),
    ("blob", "holds encoded records in one byte blob (hdf5 layout blob), not rows of an "
             "images dataset; the default hdf5=offsets reads it"),
])
def test_mpio_on_data_it_cannot_read_is_one_line(tmp_path, sets, name, says):
    """Checked before h5py's build: the dataset is what is wrong, whatever the h5py."""
    ds = sets[name]
    for msg in _both(tmp_path, ds):
        assert msg == f"reader option hdf5=mpio: {ds.root} {says}"


@pytest.mark.parametrize("reader, opts, says", [
    ("coordinated", {"hdf5": "posix"}, "reader option hdf5='posix' is not one of "
                                       "offsets, mpio"),
    ("naive", {"hdf5": "mpio"}, "reader 'naive' has no option hdf5"),
])
def test_bad_hdf5_option_is_one_line(reader, opts, says):
    with pytest.raises(HpcioError) as e:
        check_options(reader, opts)
    assert str(e.value) == says and e.value.everywhere


# ---- the reads (lane: parallel h5py) ----------------------------------------------------
def _check(n, data, readers, *extra):
    p = run_mpi(n, [CHECK, "--data", *data, "--readers", readers, "--batch", 3, *extra],
                timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^OK \d+ checks$", p.stdout, flags=re.M), p.stdout
    return re.findall(r"^DIGEST .*$", p.stdout, flags=re.M)


@parallel
@pytest.mark.lane
@pytest.mark.parametrize("n, readers, shuffles, epochs", [
    (2, f"naive,coordinated,{MPIO},{MPIO}:mechanism=sync:request_bytes=1,"
        f"{MPIO}:collective=false:request_bytes=1:prefetch=0", "none,chunk,global", 2),
    # 3 ranks on a 2-core runner: every collective waits for a descheduled rank
    (3, f"naive,coordinated,{MPIO}:request_bytes=1", "none,global", 1),
])
def test_mpio_exactly_once_same_bytes_as_the_other_readers(sets, n, readers, shuffles,
                                                           epochs):
    """check_readers.py on contiguous (rows read as one union), chunked and wide-row HDF5
    (one read per run of rows, the calls matched across ranks), and float32 (4-byte
    elements, Caffe's layout) contiguous and chunked, with and without drop_last: every
    record of an epoch exactly once, the bytes of the source, every reader's per-rank
    sequence identical, also after an early stop. Requests of one step (request_bytes=1)
    leave ranks with nothing to read in a file some other rank reads: they join its
    collective read with an empty selection."""
    layouts = ["contiguous", "chunked", "wide", "f32", "f32-chunked"][:5 if n == 2 else 2]
    d = _check(n, [sets[k].root for k in layouts], readers, "--early-stop", 2,
               "--shuffles", shuffles, "--epochs", epochs)
    assert len(d) == len(layouts) * len(shuffles.split(",")) * 2 * epochs  # x drop_last


@parallel
@pytest.mark.lane
def test_mpio_preload_delivers_the_same_batches(sets):
    """The next epoch's requests read while the current one ends, one collective reader
    (two with collective reads in flight at once can deadlock: CoordinatedReader.preload)."""
    data = [sets["chunked"].root]
    plain = _check(2, data, f"naive,{MPIO}", "--shuffles", "global")
    assert _check(2, data, f"naive,{MPIO}", "--shuffles", "global", "--preload") == plain


@parallel
@pytest.mark.lane
@pytest.mark.parametrize("change, says", [("truncate", "shrank during the run"),
                                          ("replace", "replaced by another file")])
def test_mpio_shard_changed_mid_epoch_is_one_line(tmp_path, sets, change, says):
    ds_root = tmp_path / "d"
    shutil.copytree(sets["contiguous"].root, ds_root)
    p = run_mpi(2, [CHANGE, "--data", ds_root, "--reader",
                    f"{MPIO}:request_bytes=1", "--change", change,
                    "--file", 1, "--at", 1, "--batch", 3], timeout=120)
    assert p.returncode != 0 and "DELIVERED" not in p.stdout, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    msgs = set(re.findall(r"check_integrity: error(?: \(rank \d+\))?: ([^\n]+)", p.stderr))
    assert len(msgs) == 1, p.stderr
    msg = msgs.pop()
    assert msg.startswith(f"{ds_root}/shard-00001.h5: ") and says in msg, msg


@parallel
@pytest.mark.lane
@pytest.mark.parametrize("layout", ["contiguous", "chunked"])
def test_training_with_mpio_adds_up(tmp_path, sets, layout):
    """2 ranks, 2 epochs: the run directory is whole, each step's parts sum to its wall
    time, the reader delivered what the trainer consumed (test_train.check_run)."""
    out = tmp_path / "run"
    p = run_mpi(2, TRAIN + ["--data", sets[layout].root, "--model", "emulate",
                            "--compute-time", "0.002", "--batch", 3, "--epochs", 2,
                            "--reader", "coordinated", "--reader-option", "hdf5=mpio",
                            "--out", out], timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    check_run(out, 2, 61 // 6, 2, 3)
    with open(out / "rank-1.json") as f:
        rj = json.load(f)
    assert rj["reader_stats"]["hdf5"] == "mpio" and rj["reader_stats"]["collective"] is True
