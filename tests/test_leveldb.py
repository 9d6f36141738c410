"""LevelDB: Caffe's keys, values and options; an index parsed from the table files that is
LevelDB's own values byte for byte; a native reader that never writes the dataset (each
rank opens a private directory); LevelDBs made elsewhere; every reader under mpiexec -n 2;
training; and bad input (a database locked by another process, a corrupt one) is one line
with nothing written."""

import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile

import numpy as np
import plyvel
import pytest

from hpcio.data import pictures
from hpcio.data.dataset import open_dataset
from hpcio.datagen.importers import index_path
from hpcio.data.presets import PRESETS
from hpcio.datagen.write import generate
from hpcio.errors import HpcioError
from hpcio.formats import FORMATS, leveldb
from hpcio.formats.datum import make_datum, parse_datum
from hpcio.plan import make_plan
from hpcio.readers import make_reader

from common.datasets import make_dataset, records_of
from common import failure
from common.inproc import run_main
from common.mpi import run_mpi
from common.launch import PIPE, launch, spawn

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "mpi", "check_readers.py")
DG = ["-m", "hpcio.datagen"]
TRAIN = ["-m", "hpcio.train"]


# ---- helpers ---------------------------------------------------------------------------------

def snapshot(root):
    """Every file under ``root``: size, mtime and sha256 (to show nothing was written)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns,
                                                 hashlib.sha256(fh.read()).hexdigest())
    return out


def db_values(path):
    """{key: db.get(key)} of LevelDB ``path`` in key order, through plyvel on a copy (an
    open writes into the database)."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(path, os.path.join(tmp, "db"))
        db = plyvel.DB(os.path.join(tmp, "db"))
        try:
            return {k: db.get(k) for k in db.iterator(include_value=False)}
        finally:
            db.close()


def index_bytes(ds, i):
    idx = ds.index
    with open(ds.path(idx.file[i]), "rb") as f:
        f.seek(int(idx.offset[i]))
        return f.read(int(idx.length[i]))


def native_records(ds):
    nat = FORMATS["leveldb"].open_native(ds)
    try:
        return [bytes(memoryview(nat.get(i)).cast("B")) for i in range(ds.records)]
    finally:
        nat.close()


def one_line(p, *words):
    line = failure.one_line(p)
    for w in words:
        assert w in line, line
    return line


def draw(name, n, seed=0):
    p = PRESETS[name]
    return pictures.render(p.style, seed, np.arange(n), p.shape, p.classes)


def make_caffe_leveldb(path, n=40, compression="snappy", values="raw", keys="caffe",
                       reopen=True):
    """A LevelDB as Caffe's converters write one (Caffe's options; "%08d" keys, or
    convert_imageset's "%08d_<file>"; raw CHW Datums, encoded Datums or plain values),
    optionally opened once more afterwards as Caffe's training does (which moves the
    log into a table)."""
    x, y = draw("cifar10", n)
    opts = dict(leveldb.CAFFE_OPTIONS, compression=None if compression == "none" else "snappy")
    db = plyvel.DB(str(path), create_if_missing=True, **opts)
    with db.write_batch() as wb:
        for i in range(n):
            if values == "raw":
                v = make_datum(x[i].transpose(2, 0, 1).tobytes(), int(y[i]), 3, 32, 32)
            elif values == "encoded":
                data, _ = pictures.encode(x[i:i + 1], "png")
                v = make_datum(data.tobytes(), int(y[i]), encoded=True)
            else:
                v = bytes([i % 256]) * (500 + i)
            k = b"%08d" % i if keys == "caffe" else b"%08d_n01440764/img_%d.JPEG" % (i, i)
            wb.put(k, v)
    db.close()
    if reopen:
        plyvel.DB(str(path), **opts).close()
    return x, y


class Holder:
    """A live process holding LevelDB ``path`` open (plyvel takes its LOCK)."""

    CODE = ("import plyvel, sys\ndb = plyvel.DB(sys.argv[1])\nprint('held', flush=True)\n"
            "sys.stdin.read()\ndb.close()\n")

    def __init__(self, path):
        self.p = spawn([sys.executable, "-c", self.CODE, str(path)],
                                  stdin=PIPE, stdout=PIPE, text=True)

    def __enter__(self):
        assert self.p.stdout.readline().strip() == "held"
        return self

    def __exit__(self, *exc):
        self.p.stdin.close()
        self.p.wait(timeout=30)
        self.p.stdout.close()


# ---- writing and the index ------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "snappy"])
@pytest.mark.parametrize("value", ["record", "datum"])
def test_index_is_what_leveldb_returns(tmp_path, compression, value):
    """Caffe's keys, in record order; every value LevelDB returns is the record (or a
    Datum around it, with its label); every indexed (file, offset, length) is db.get's
    bytes, or, in snappy blocks (raw MNIST compresses), counted as compressed."""
    ds = make_dataset(tmp_path, "leveldb", "raw", records=300, shards=2, seed=2,
                      compression=compression, value=value)
    ds = open_dataset(ds.root)
    m = ds.manifest
    assert m["leveldb"] == {"key": "%08d", "value": value, "compression": compression}
    assert (m.get("layout") == "chw") == (value == "datum")
    px, lab = draw("mnist", 300, seed=2)
    assert np.array_equal(ds.index.label, lab)
    packed, want = 0, []
    for shard in m["shards"]:
        lo, hi = shard["records"]
        db = os.path.join(ds.root, shard["path"])
        vals = db_values(db)
        assert list(vals) == [b"%08d" % i for i in range(lo, hi)]
        assert leveldb.owned(db) == sorted(os.listdir(db))  # --force replaces them all
        assert not any(f.endswith(".log") and os.path.getsize(os.path.join(db, f))
                       for f in os.listdir(db))  # every record lies in a table
        packed += shard.get("compressed_records", 0)
        for i in range(lo, hi):
            v = vals[b"%08d" % i]
            if value == "datum":
                o, n, label = parse_datum(v)
                assert label == lab[i]
                v = v[o:o + n]
            assert v == px[i].transpose(2, 0, 1).tobytes()
            want.append(v)
            if compression == "none":
                assert index_bytes(ds, i) == v
    assert packed == (0 if compression == "none" else 300)
    assert ds.index.length.tolist() == [784] * 300
    assert native_records(ds) == want
    ds.verify_checksums()


def test_snappy_blocks_that_do_not_compress_are_read_at_offsets(tmp_path):
    """LevelDB stores a block uncompressed where snappy saves less than 12.5% (JPEG
    records): there the index locates every record even in a snappy database, and its
    snappy-compressed index block is decoded."""
    ds = make_dataset(tmp_path, "leveldb", "jpeg", preset="imagenet", records=6, shards=1,
                      compression="snappy")
    assert "compressed_records" not in ds.manifest["shards"][0]
    vals = db_values(os.path.join(ds.root, ds.manifest["shards"][0]["path"]))
    assert [index_bytes(ds, i) for i in range(6)] == list(vals.values())
    for j in range(len(ds.index.files)):  # the footer's index block handle: its type byte
        with open(ds.path(j), "rb") as f:
            data = f.read()
        ioff, isize, _ = leveldb.handle(data[-48:], leveldb.handle(data[-48:])[2])
        assert data[ioff + isize] == 1  # snappy
    idx = index_path(os.path.join(ds.root, ds.manifest["shards"][0]["path"]),
                     out=str(tmp_path / "again"))
    assert idx.manifest["leveldb"]["compression"] == "snappy"
    assert records_of(idx)[1] == list(vals.values())


def test_native_reader_never_writes_the_dataset(tmp_path, monkeypatch):
    """Two readers at once (as two ranks): each opens a private directory of its own with
    links to the tables; LevelDB writes only there (no table of its own: no compaction),
    the directories go on close, and the dataset is unchanged, byte for byte."""
    ds = make_dataset(tmp_path, "leveldb", "png", records=200, shards=2)
    before = snapshot(ds.root)
    private = tmp_path / "private"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    a, b = leveldb.Native(ds), leveldb.Native(ds)
    try:
        assert len(os.listdir(private)) == 4  # 2 readers x 2 shards
        want = [index_bytes(ds, i) for i in range(ds.records)]
        for _ in range(3):
            assert [bytes(a.get(i)) for i in range(ds.records)] == want
        skipped = [0]
        assert [bytes(r) for r in b.walk(list(range(0, 200, 3)), skipped)] == want[::3]
        assert skipped[0] == 200 - 67 - 1
        for p in a.dbs + b.dbs:
            tables = [f for f in os.listdir(p.tmp) if f.endswith(".ldb")]
            assert tables and all(os.path.islink(os.path.join(p.tmp, f)) for f in tables)
    finally:
        a.close()
        b.close()
    assert os.listdir(private) == []
    assert snapshot(ds.root) == before


def test_directories_of_ranks_that_died_are_removed(tmp_path, monkeypatch):
    """An MPI abort ends ranks before they close their readers: the next open on the host
    removes the private directories of processes that are gone, and no other."""
    ds = make_dataset(tmp_path, "leveldb", "raw", records=20, shards=1)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = launch([sys.executable, "-c", "import os; print(os.getpid())"],
                          check=True).stdout.strip()
    host = socket.gethostname()
    for pid in (gone, str(os.getpid())):
        (tmp_path / f"hpcio-leveldb-{host}-{pid}-x").mkdir()
    (tmp_path / f"hpcio-leveldb-otherhost-{gone}-x").mkdir()
    native = leveldb.Native(ds)
    try:
        left = sorted(n for n in os.listdir(tmp_path) if n.startswith("hpcio-leveldb-"))
        assert f"hpcio-leveldb-{host}-{gone}-x" not in left
        assert f"hpcio-leveldb-{host}-{os.getpid()}-x" in left
        assert f"hpcio-leveldb-otherhost-{gone}-x" in left
        assert len(left) == 3  # and this reader's own
    finally:
        native.close()


def test_cursor_walks_key_order_like_caffe(tmp_path):
    """access=cursor: the same bytes as one get per record; the records stepped over are
    the other ranks' (a new pass starts at a shard's first key)."""
    ds = make_dataset(tmp_path, "leveldb", "raw", records=96, shards=3, value="datum")
    for rank in range(2):
        plan = make_plan(ds.records, 2, rank, 8, shuffle="none")
        got = {}
        for access in ("get", "cursor"):
            with make_reader("naive", ds, access=access) as r:
                got[access] = [bytes(b.data) for b in r.epoch(plan)]
                stats = r.stats
        assert got["cursor"] == got["get"]
        ids = plan.ids
        shard = ids // 32
        assert stats.skipped == sum(int(ids[shard == s].max()) - 32 * s + 1 -
                                    int((shard == s).sum()) for s in np.unique(shard))


def test_memory_reader_loads_compressed_records_through_leveldb(tmp_path):
    ds = make_dataset(tmp_path, "leveldb", "raw", records=50, shards=2,
                      compression="snappy")
    px, _ = draw("mnist", 50)
    with make_reader("memory", ds) as r:
        batch = next(iter(r.epoch(make_plan(ds.records, 1, 0, 50, shuffle="none"))))
        assert bytes(batch.data) == px.tobytes()
        assert r.stats.opens == 2 and r.stats.load_s > 0


@pytest.mark.parametrize("compression", ["none", "snappy"])
@pytest.mark.parametrize("values, keys", [("raw", "caffe"), ("encoded", "imageset"),
                                          ("plain", "caffe")])
def test_index_a_leveldb_made_elsewhere(tmp_path, compression, values, keys):
    """Written with plyvel as Caffe's converters do, then opened once as Caffe's training
    does: the index's records are the values' Datum data (or the whole values), with their
    labels; keys other than Caffe's "%08d" go to keys.npy; the data is only read."""
    db = tmp_path / "train_leveldb"
    x, y = make_caffe_leveldb(db, compression=compression, values=values, keys=keys)
    before = snapshot(db)
    p = run_main(DG + ["index", db])
    assert p.returncode == 0 and "format leveldb" in p.stdout, p.stderr
    after = snapshot(db)
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == {"hpcio.json", "index.npz"} | \
        ({"keys.npy"} if keys != "caffe" else set())
    ds = open_dataset(db)
    m = ds.manifest
    assert m["leveldb"]["value"] == ("record" if values == "plain" else "datum")
    assert (m["leveldb"]["key"], m["leveldb"].get("keys")) == \
        (("%08d", None) if keys == "caffe" else (None, "keys.npy"))
    vals = list(db_values(db).values())
    if values == "plain":
        assert (ds.index.label == -1).all()
        want = vals
    else:
        assert np.array_equal(ds.index.label, y) and ds.shape == (32, 32, 3)
        want = [v[o:o + n] for v in vals for o, n, _ in [parse_datum(v)]]
        assert ds.encoding == ("raw" if values == "raw" else "png")
    packed = m["shards"][0].get("compressed_records", 0)
    # repeated bytes compress, these pictures do not (LevelDB then keeps the block raw)
    assert packed == (40 if (compression, values) == ("snappy", "plain") else 0)
    if not packed:
        assert records_of(ds)[1] == want
    assert native_records(ds) == want
    with make_reader("memory", ds) as r:
        b = next(iter(r.epoch(make_plan(ds.records, 1, 0, 40, shuffle="none"))))
        assert [bytes(b.record(k)) for k in range(40)] == want
    ds.verify_checksums()


def test_compaction_rule_is_leveldbs():
    """When LevelDB compacts as soon as it opens a database (VersionSet::Finalize): 4
    tables in level 0, or level L over 10^L MiB; such a database is refused."""
    mib = 1 << 20
    assert leveldb.compaction_due([(0, 5, mib)] * 3) is None
    assert "level 0 holds 4 tables" in leveldb.compaction_due([(0, 5, mib)] * 4)
    assert leveldb.compaction_due([(1, 7, 9 * mib), (2, 8, 99 * mib), (6, 9, 10 ** 6 * mib)]) is None
    assert "level 1 holds 10 MiB" in leveldb.compaction_due([(1, 7, 10 * mib)])
    assert "level 3 holds 1200 MiB" in leveldb.compaction_due([(3, 7, 1200 * mib)])


# ---- bad input: one line, nothing written -------------------------------------------------

def test_log_with_records_is_refused_until_leveldb_moves_them(tmp_path):
    """A LevelDB closed by its writer keeps its last writes in the log (Caffe's converters
    leave every record there): refused with what to do, nothing written; once opened
    again (as Caffe's training opens it), indexed."""
    db = tmp_path / "fresh"
    make_caffe_leveldb(db, reopen=False)
    before = snapshot(db)
    line = one_line(run_main(DG + ["index", db]), "bytes of writes lie in its log",
                    "compact(")
    assert line.startswith("hpcio.datagen: error: ")
    assert snapshot(db) == before
    leveldb.compact(str(db))
    assert run_main(DG + ["index", db]).returncode == 0
    assert open_dataset(db).records == 40


def test_locked_database_is_refused(tmp_path):
    """A LevelDB another process holds open: index and generate --force into it refuse
    with one line, and neither writes nor deletes anything."""
    db = tmp_path / "held"
    make_caffe_leveldb(db)
    with Holder(db):
        before = snapshot(db)
        one_line(run_main(DG + ["index", db]), "locked by another process")
        assert snapshot(db) == before
    out = tmp_path / "ds"
    assert run_main(DG + ["generate", out, "--format", "leveldb", "--records", "30",
                          "--shards", "2"]).returncode == 0
    with Holder(out / "shard-00001.leveldb"):
        before = snapshot(out)
        p = run_main(DG + ["generate", out, "--format", "leveldb", "--records", "20",
                           "--force"])
        one_line(p, "shard-00001.leveldb: locked by another process")
        assert snapshot(out) == before
    p = run_main(DG + ["generate", out, "--format", "leveldb", "--records", "20", "--force"])
    assert p.returncode == 0, p.stderr  # released: replaced, every file of the old ones gone
    assert sorted(os.listdir(out)) == ["hpcio.json", "index.npz", "shard-00000.leveldb"]


def _corrupt(db, how):
    tables = sorted(f for f in os.listdir(db) if f.endswith(".ldb"))
    t = os.path.join(db, tables[0])
    size = os.path.getsize(t)
    if how == "truncated":
        os.truncate(t, size - 1000)
    elif how == "footer":  # the table's magic number
        with open(t, "r+b") as f:
            f.seek(size - 8)
            f.write(b"\0" * 8)
    elif how == "values":  # bytes inside a data block: LevelDB's checksum says so
        with open(t, "r+b") as f:
            f.seek(size // 3)
            f.write(os.urandom(64))
    elif how == "no-current":
        os.unlink(os.path.join(db, "CURRENT"))
    elif how == "no-table":
        os.unlink(t)


@pytest.mark.parametrize("how, says", [
    ("truncated", "corrupt LevelDB database"),
    ("footer", "bad magic number"),
    ("values", "checksum mismatch"),
    ("no-current", "no CURRENT file"),
    ("no-table", "missing files"),
])
def test_corrupt_database_to_index(tmp_path, how, says):
    db = tmp_path / "db"
    make_caffe_leveldb(db, compression="none", n=200)
    _corrupt(db, how)
    before = snapshot(db)
    line = one_line(run_main(DG + ["index", db]), says)
    assert str(db) in line and "/tmp/hpcio-leveldb-" not in line
    assert snapshot(db) == before


def test_bad_format_options_are_one_line(tmp_path):
    base = DG + ["generate", tmp_path / "x", "--records", "8"]
    one_line(run_main(base + ["--format", "leveldb", "--format-option", "compression=zlib"]),
             "leveldb compression=zlib: choose from none|snappy")
    one_line(run_main(base + ["--format", "leveldb", "--format-option", "level=3"]),
             "the leveldb format has no such option (it has value, compression)")
    one_line(run_main(base + ["--format", "lmdb", "--format-option", "value=datum"]),
             "the lmdb format has no such option")
    assert not (tmp_path / "x").exists()
    with pytest.raises(HpcioError, match="has no option chunk_records"):
        generate(tmp_path / "y", records=8, format="leveldb", chunk_records=4)


# ---- under mpiexec -n 2 ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "leveldb-sets"
    return {"raw": make_dataset(root, "leveldb", "raw", records=61, shards=2, seed=1).root,
            "datum": make_dataset(root, "leveldb", "png", records=53, shards=2, seed=1,
                                  value="datum").root,
            "snappy": make_dataset(root, "leveldb", "raw", records=59, shards=2, seed=1,
                                   compression="snappy").root}


def _check(data, readers, *extra):
    p = run_mpi(2, [CHECK, "--data", *data, "--readers", readers, "--batch", "3", *extra],
                timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK " in p.stdout


def test_every_reader_round_trips_byte_exact(sets):
    """check_readers.py: every record exactly once per epoch across the ranks, the source
    bytes, every reader the same sequence; snappy through the naive and memory readers."""
    _check([sets["raw"], sets["datum"]],
           "naive,coordinated,memory,coordinated:collective=true:sieve_gap=0")
    _check([sets["raw"], sets["datum"], sets["snappy"]], "naive:access=cursor,naive,memory",
           "--shuffles", "none", "--drop-last", "yes")
    _check([sets["snappy"]], "naive,memory", "--shuffles", "chunk,global")


def test_parallel_generation_matches_serial(tmp_path):
    serial = generate(tmp_path / "serial", "mnist", 45, "leveldb", "png", shards=2, seed=3,
                      value="datum")
    run_mpi(2, DG + ["generate", tmp_path / "par", "--records", "45", "--format", "leveldb",
                     "--encoding", "png", "--shards", "3", "--seed", "3", "--format-option",
                     "value=datum"], check=True)
    par = open_dataset(tmp_path / "par")
    assert records_of(par)[1] == records_of(serial)[1]
    assert np.array_equal(records_of(par)[0], records_of(serial)[0])


@pytest.mark.parametrize("reader", ["naive:access=cursor", "coordinated"])
def test_training_on_leveldb(tmp_path, sets, reader):
    """LeNet on Caffe Datums of PNGs, 2 ranks: the naive reader as Caffe reads a LevelDB
    (an iterator stepping over the other rank's records), and the coordinated reader.
    (tests/test_train.py trains on LevelDB through every reader as well.)"""
    name, _, opt = reader.partition(":")
    extra = ["--reader-option", opt, "--shuffle", "none"] if opt else []
    p = run_mpi(2, TRAIN + ["--data", sets["datum"], "--model", "lenet", "--reader", name,
                            "--batch", 4, "--steps", 3, "--epochs", 2, "--out",
                            tmp_path / "run"] + extra, timeout=240,
                env={"TMPDIR": str(tmp_path)})
    assert p.returncode == 0, p.stdout + p.stderr
    with open(tmp_path / "run" / "summary.json") as f:
        assert json.load(f)["metrics"]["records"] == 2 * 4 * 3 * 2


@pytest.mark.parametrize("how, reader, says", [
    ("truncated", "memory", "bytes on disk, the index says"),
    ("footer", "naive", "bad magic number"),
    ("no-current", "naive", "no CURRENT file"),
    ("compressed", "coordinated", "make it again with --format-option compression=none"),
])
def test_bad_data_to_train_is_one_line(tmp_path, sets, how, reader, says):
    """A table shorter than the index says (found before training, for every reader), a
    table LevelDB cannot read and a database without CURRENT (the naive reader opens it
    through LevelDB; the others read the tables' bytes at the index's offsets), and
    snappy blocks given to the coordinated reader: one line, the data untouched."""
    root = tmp_path / "d"
    shutil.copytree(sets["snappy" if how == "compressed" else "raw"], root)
    if how != "compressed":
        _corrupt(root / "shard-00001.leveldb", how)
    before = snapshot(root)
    p = run_mpi(2, TRAIN + ["--data", root, "--model", "emulate", "--reader", reader,
                            "--batch", 4, "--compute-time", 0, "--out", tmp_path / "run"],
                timeout=120, env={"TMPDIR": str(tmp_path)})
    line = one_line(p, says)
    assert "/tmp/hpcio-leveldb-" not in line
    assert snapshot(root) == before


def test_raw_datums_decode_to_the_pictures(tmp_path):
    """value=datum stores raw pictures plane after plane, as Caffe does: the manifest says
    so and the pipeline gives back the pictures drawn, not CHW bytes read as HWC."""
    from hpcio.train.decode import decode_records
    ds = make_dataset(tmp_path, "leveldb", "raw", preset="cifar10", records=8, shards=1,
                      value="datum")
    assert ds.manifest["layout"] == "chw" and ds.shape == (32, 32, 3)
    with make_reader("memory", ds) as r:
        batch = next(iter(r.epoch(make_plan(ds.records, 1, 0, 8, shuffle="none"))))
        assert np.array_equal(decode_records(batch, ds.manifest), draw("cifar10", 8)[0])
