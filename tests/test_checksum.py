"""Never a wrong byte delivered silently: every record's CRC32C is in the index, checked on
delivery by every reader; the index's own sha256 is in the manifest, checked on open.

Datasets are changed for real: an index edited (offsets swapped, shifted, shortened,
overlapping), a shard or image file replaced by one of the same size with other bytes.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest

from hpcio.data.checksum import MANY, batch_ok, crc32c, mismatch, record_crcs
from hpcio.data.dataset import INDEX, MANIFEST, RecordIndex, open_dataset
from hpcio.errors import HpcioError
from hpcio.plan import make_plan
from hpcio.readers import make_reader

from common.datasets import error_lines, make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi

FORMATS = ["packed", "lmdb", "hdf5", "leveldb", "images", "npz", "tfrecord", "parquet"]
READERS = ["naive", "coordinated", "memory"]
BENCH = ["-m", "hpcio.bench"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "checksum-data"
    sets = {f: make_dataset(root, f, "raw", records=64, shards=2, seed=7)
            for f in FORMATS if f != "images"}
    sets["images"] = make_dataset(root, "images", "png", records=32, shards=2, seed=7)
    return sets


def copy(ds, dst):
    shutil.copytree(ds.root, dst)
    return open_dataset(str(dst))


# ---- the check itself -------------------------------------------------------------------
@pytest.mark.parametrize("length", [1, 7, 784, 20000])
def test_batch_check_is_the_record_crcs(length):
    rng = np.random.default_rng(length)
    n = 9
    data = rng.integers(0, 256, n * length, dtype=np.uint8)
    off = np.arange(n + 1, dtype=np.int64) * length
    want = record_crcs(data, off)
    assert want[2] == crc32c(data[2 * length:3 * length].tobytes())
    for m in (1, 2, n):
        assert batch_ok(data, off[:m + 1], want[:m])
    bad = data.copy()
    bad[5 * length] ^= 1
    assert not batch_ok(bad, off, want) and mismatch(bad, off, want).tolist() == [5]
    swapped = want[[1, 0] + list(range(2, n))]
    assert not batch_ok(data, off, swapped)
    for var in ([0, 3, 3, 40, 41], [0, 5, 8, 15]):  # several lengths (the second: as
        var = np.array(var, np.int64)               # many bytes as 3 records of 5)
        assert batch_ok(data, var, record_crcs(data, var))


@pytest.mark.parametrize("lengths", ["one", "several"])
def test_batch_check_of_many_records(lengths):
    """Batches of thousands of records (a coordinated reader's request): the shifts in
    several levels (one length: 64 records a level; several: a byte of the distance a
    level); a flipped bit anywhere, two CRCs swapped, a batch that starts inside the
    buffer."""
    rng = np.random.default_rng(11)
    for n in ((2, 63, 65, 4097, 4200) if lengths == "one" else (MANY, MANY + 1, 3000)):
        if lengths == "one":
            off = np.arange(n + 1, dtype=np.int64) * 37
        else:
            off = np.concatenate([[0], np.cumsum(rng.integers(0, 400, n))]).astype(np.int64)
        data = rng.integers(0, 256, int(off[-1]) + 9, dtype=np.uint8)
        want = record_crcs(data, off)
        assert batch_ok(data, off, want)
        for at in rng.integers(0, int(off[-1]), 6).tolist():
            bad = data.copy()
            bad[at] ^= 1 << int(rng.integers(0, 8))
            assert not batch_ok(bad, off, want)
            k = int(np.searchsorted(off, at, "right")) - 1
            assert mismatch(bad, off, want).tolist() == [k]
        k = int(np.flatnonzero(want[:-1] != want[1:])[0])
        swapped = want.copy()
        swapped[[k, k + 1]] = swapped[[k + 1, k]]
        assert not batch_ok(data, off, swapped)
        assert batch_ok(data, off + 9, record_crcs(data, off + 9))


def test_every_format_indexes_the_same_crcs(base):
    # image files are PNG, a TFRecord's records are Examples around the pixels
    crcs = {f: base[f].index.crc for f in FORMATS if f not in ("images", "tfrecord")}
    assert all(c is not None and c.dtype == np.uint32 for c in crcs.values())
    assert len({c.tobytes() for c in crcs.values()}) == 1  # same records, same CRCs
    for ds in base.values():
        ds.verify_records()


# ---- an edited index is refused on open --------------------------------------------------
def _edit(idx, how):
    o = idx.offset
    if how == "swapped":
        o[[0, 1]] = o[[1, 0]]
    elif how == "shifted":
        o += 1
        idx.length -= 1
    elif how == "shortened":
        idx.length[3] -= 10
    elif how == "overlapping":
        o[1] = o[0] + idx.length[0] // 2


@pytest.mark.parametrize("how", ["swapped", "shifted", "shortened", "overlapping"])
def test_edited_index_refused_by_its_hash(tmp_path, base, how):
    ds = copy(base["packed"], tmp_path / "d")
    path = os.path.join(ds.root, INDEX)
    idx = RecordIndex.load(path)
    _edit(idx, how)
    idx.save(path)
    with pytest.raises(HpcioError, match=r"index.npz: its sha256 is not the one in the "
                                         r"manifest \(the index was edited") as e:
        open_dataset(ds.root)
    assert "\n" not in str(e.value)
    p = run_main(["-m", "hpcio.datagen", "info", "--verify", ds.root])
    assert p.returncode != 0 and len(error_lines(p.stderr)) == 1
    assert "sha256 is not the one in the manifest" in p.stderr


# ---- a file replaced before the run by one of the same size ------------------------------
def _replace_record(ds, i):
    """Put another file of the same size in place of record ``i``'s, its bytes changed."""
    idx = ds.index
    path = ds.path(idx.file[i])
    tmp = path + ".new"
    shutil.copyfile(path, tmp)
    with open(tmp, "r+b") as f:
        at = int(idx.offset[i]) + int(idx.length[i]) // 2
        f.seek(at)
        b = f.read(4)
        f.seek(at)
        f.write(bytes(x ^ 0x5A for x in b))
    os.replace(tmp, path)
    return path


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_same_size_file_with_other_bytes_is_caught(tmp_path, base, fmt, reader):
    ds = copy(base[fmt], tmp_path / "d")
    plan = make_plan(ds.records, 1, 0, 8, epoch=0, seed=3, shuffle="global")
    i = int(plan.step(1)[3])  # delivered in the second batch
    path = _replace_record(ds, i)
    ds = open_dataset(ds.root)  # the sizes are right: the files pass every stat
    with make_reader(reader, ds) as r:
        it = r.epoch(plan)
        assert len(next(it)) == 8
        with pytest.raises(HpcioError) as e:
            next(it)
        it.close()
    msg = str(e.value)
    if (fmt, reader) == ("tfrecord", "naive"):  # the format's own CRC, checked first
        assert msg.startswith(f"{path}: corrupt record at byte "
                              f"{int(ds.index.offset[i]) - 12}: the CRC of its"), msg
        return
    if (fmt, reader) == ("npz", "naive"):  # the zip member's CRC-32, checked by np.load
        assert msg.startswith(f"{path}: unreadable .npz (Bad CRC-32 for file 'x.npy')"), msg
        return
    assert msg.startswith(f"{path}: record {i} at byte {int(ds.index.offset[i])} "
                          f"({int(ds.index.length[i])} bytes) is not the record indexed"), msg
    assert re.search(r"CRC32C [0-9a-f]{8}, the index says [0-9a-f]{8}", msg)
    p = run_main(["-m", "hpcio.datagen", "info", "--verify", ds.root])
    assert p.returncode != 0 and len(error_lines(p.stderr)) == 1, p.stderr


@pytest.fixture(scope="module")
def checked_apart(tmp_path_factory):
    """Records each reader checks another way: ~108 KB JPEGs (the naive reader hashes
    each as it copies it in) and ~290 B PNGs, more to a batch than MANY (one hash of the
    batch, records of several lengths)."""
    root = tmp_path_factory.getbasetemp() / "checksum-apart"
    return {"jpeg": (make_dataset(root, "lmdb", "jpeg", preset="imagenet", records=24,
                                  shards=1, seed=5), 8),
            "png": (make_dataset(root, "lmdb", "png", records=3 * MANY, shards=2, seed=5),
                    MANY)}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", ["jpeg", "png"])
def test_changed_record_is_caught_however_it_is_checked(tmp_path, checked_apart, kind,
                                                         reader):
    ds, batch = checked_apart[kind]
    ds = copy(ds, tmp_path / "d")
    plan = make_plan(ds.records, 1, 0, batch, epoch=0, seed=3, shuffle="global")
    i = int(plan.step(1)[batch // 2])
    path = _replace_record(ds, i)
    ds = open_dataset(ds.root)
    with make_reader(reader, ds) as r:
        it = r.epoch(plan)
        assert len(next(it)) == batch
        with pytest.raises(HpcioError) as e:
            next(it)
        it.close()
    assert str(e.value).startswith(f"{path}: record {i} at byte {int(ds.index.offset[i])} "
                                   f"({int(ds.index.length[i])} bytes) is not the record "
                                   f"indexed"), str(e.value)


def test_verify_size_and_off_deliver_what_is_there(tmp_path, base):
    ds = copy(base["packed"], tmp_path / "d")
    plan = make_plan(ds.records, 1, 0, 8, shuffle="none")
    _replace_record(ds, 5)
    ds = open_dataset(ds.root)
    for mode in ("size", "off"):
        with make_reader("coordinated", ds, verify=mode) as r:
            assert sum(len(b) for b in r.epoch(plan)) == 64
            assert r.stats.extra["verify"] == mode and r.stats.verify_s == 0
    with pytest.raises(HpcioError, match="verify='bogus' is not one of records, size, off"):
        make_reader("memory", ds, verify="bogus")


def test_bench_catches_a_replaced_shard_and_marks_unverified_figures(tmp_path, base):
    ds = copy(base["packed"], tmp_path / "d")
    _replace_record(ds, 10)
    args = BENCH + ["--data", ds.root, "--readers", "coordinated", "--cache", "asis",
                    "--shuffle", "none", "--repeat", "1", "--batch", "4", "--limits", "seq",
                    "--out", str(tmp_path / "b.json")]
    p = run_mpi(2, args, timeout=120)
    assert re.search(rf"shard-00000.rec: record 10 at byte {int(ds.index.offset[10])} ",
                     one_line(p))
    p = run_mpi(2, args + ["--verify", "off"], timeout=120, check=True)
    with open(tmp_path / "b.json") as f:
        out = json.load(f)
    runs = [r for r in out["runs"] if r["what"].startswith("coordinated")]
    assert runs and all(r["what"] == "coordinated:verify=off" and r["verify"] == "off"
                        for r in runs)
    assert "coordinated:verify=off" in p.stdout
    assert out["meta"]["verify"] == {"coordinated:verify=off": "off"}


# ---- datasets indexed before CRCs -----------------------------------------------------------
def test_old_index_note_and_update(tmp_path, base):
    ds = copy(base["lmdb"], tmp_path / "d")
    idx = ds.index
    idx.crc = None
    idx.save(os.path.join(ds.root, INDEX))
    mpath = os.path.join(ds.root, MANIFEST)
    with open(mpath) as f:
        m = json.load(f)
    del m["index_sha256"], m["contract"]  # as hpcio wrote it before CRCs
    with open(mpath, "w") as f:
        json.dump(m, f)
    old = open_dataset(ds.root)
    assert old.index.crc is None
    with make_reader("naive", old) as r:
        assert r.verify == "size"  # by size only, as before
    p = run_main(["-m", "hpcio.datagen", "info", "--verify", ds.root])
    assert p.returncode == 0, p.stderr
    note = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert len(note) == 1 and f"index --update {ds.root}" in note[0]
    assert run_main(["-m", "hpcio.datagen", "index", "--update", ds.root]).returncode == 0
    new = open_dataset(ds.root)
    assert np.array_equal(new.index.crc, base["lmdb"].index.crc)
    assert new.manifest["index_sha256"] and new.manifest["contract"] == 2
    assert "history" not in new.manifest  # nothing on disk had changed
    p = run_main(["-m", "hpcio.datagen", "info", "--verify", ds.root])
    assert p.returncode == 0, p.stderr
    assert "64 records' CRC32C" in p.stdout and "note:" not in p.stderr


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _strip(ds, contract):
    """The index without its CRC column and the manifest without the index's sha256
    (and, with ``contract=None``, without its contract: a dataset made before CRCs)."""
    ds.index.crc = None
    ds.index.save(os.path.join(ds.root, INDEX))
    mpath = os.path.join(ds.root, MANIFEST)
    with open(mpath) as f:
        m = json.load(f)
    del m["index_sha256"]
    if contract is None:
        del m["contract"]
    else:
        m["contract"] = contract
    with open(mpath, "w") as f:
        json.dump(m, f)
    return mpath


@pytest.mark.hostile
def test_stripped_checksums_are_not_an_old_dataset(tmp_path, base):
    ds = copy(base["packed"], tmp_path / "d")
    mpath = _strip(ds, 2)
    with pytest.raises(HpcioError, match=r"index.npz: no record checksums, but the "
                                         r"manifest's contract \(2\) says"):
        open_dataset(ds.root)
    m = json.loads(_read(mpath))
    m["index_sha256"] = "0" * 64
    _write(mpath, json.dumps(m))
    with pytest.raises(HpcioError, match="its sha256 is not the one in the manifest"):
        open_dataset(ds.root)
    del m["index_sha256"]
    m["contract"] = 3
    _write(mpath, json.dumps(m))
    p = run_main(["-m", "hpcio.datagen", "info", ds.root])
    assert one_line(p, "hpcio.datagen") == (f"hpcio.datagen: error: {mpath}: field "
                                            f"'contract' is 3, not 1 or 2 (made by a newer "
                                            f"hpcio?)")


@pytest.mark.hostile
@pytest.mark.parametrize("fmt", ["packed", "lmdb"])
def test_update_never_blesses_changed_bytes(tmp_path, base, fmt):
    """The user who has just seen a CRC error runs ``index --update``: refused, naming
    the shard and record, unless ``--accept-changed``; then recorded in the history."""
    ds = copy(base[fmt], tmp_path / "d")
    i = 37
    path = _replace_record(ds, i)
    before = _read(os.path.join(ds.root, INDEX), "rb")
    update = ["-m", "hpcio.datagen", "index", "--update", ds.root]
    p = run_main(update)
    msg = one_line(p, "hpcio.datagen")
    assert msg.startswith(f"hpcio.datagen: error: {path}: record {i} at byte ") and \
        msg.endswith("refused (pass --accept-changed if the change is wanted)"), msg
    assert _read(os.path.join(ds.root, INDEX), "rb") == before
    with make_reader("memory", open_dataset(ds.root)) as r, pytest.raises(
            HpcioError, match=f"record {i} at byte"):
        list(r.epoch(make_plan(ds.records, 1, 0, 8, shuffle="none")))
    p = run_main(["-m", "hpcio.datagen", "index", ds.root, "--accept-changed"])
    assert one_line(p, "hpcio.datagen").endswith("--accept-changed goes with --update")
    assert run_main(update + ["--accept-changed"]).returncode == 0
    new = open_dataset(ds.root)
    (h,) = new.manifest["history"]
    assert h["what"] == "index --update --accept-changed" and h["by"].startswith("hpcio ")
    assert [(c["shard"], c["records"]) for c in h["changed"]] == \
        [(new.manifest["shards"][1]["path"], 1)]
    assert h["changed"][0].get("was") in (None, base[fmt].manifest["shards"][1]["sha256"])
    new.verify_checksums()  # the shard's new sha256 recorded too
    assert np.flatnonzero(new.index.crc != base[fmt].index.crc).tolist() == [i]


@pytest.mark.hostile
def test_update_of_an_old_dataset_compares_the_shards_sha256(tmp_path, base):
    ds = copy(base["lmdb"], tmp_path / "d")
    _strip(ds, None)
    path = _replace_record(ds, 3)
    p = run_main(["-m", "hpcio.datagen", "index", "--update", ds.root])
    msg = one_line(p, "hpcio.datagen")
    shard = os.path.dirname(path)  # an LMDB shard is its directory
    assert msg.startswith(f"hpcio.datagen: error: {shard}: its bytes changed since it was "
                          f"written") and "--accept-changed" in msg, msg
    assert open_dataset(ds.root).index.crc is None  # nothing written
