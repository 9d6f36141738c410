"""Readers: every format and shuffle mode delivers every record exactly once across real
MPI ranks, with the source bytes, and naive / coordinated / memory (one buffer and pymem)
give identical per-rank sequences; bad input ends every rank with one line."""

import os
import re
import shutil
import sys
import tempfile

import numpy as np
import pytest

from hpcio.data.dataset import RecordIndex, open_dataset
from hpcio.errors import HpcioError
from hpcio.plan import make_plan
from hpcio.readers import READERS, check_options, make_reader
from hpcio.readers.assemble import clusters, copy_records, gather, layout, merge_runs
from hpcio.readers.coordinated import request_bounds
from hpcio.readers.nodeshare import union_reads
from hpcio.readers.routes import direct_refusal

from common.datasets import make_dataset
from common.failure import one_line
from common.mpi import run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "mpi", "check_readers.py")
BENCH = ["-m", "hpcio.bench"]

# one dataset per format (odd record counts: drop_last and padding both matter), and
# Caffe's float32 HDF5 (4-byte elements) contiguous and chunked
SETS = [("lmdb", "raw", 61, {}), ("hdf5", "png", 61, {}), ("images", "jpeg", 47, {}),
        ("packed", "raw", 61, {}), ("packed", "jpeg", 53, {}),
        ("hdf5", "raw", 61, {"dtype": "float32"}),
        ("hdf5", "raw", 53, {"dtype": "float32", "chunk_records": 8}),
        ("parquet", "raw", 61, {"row_group": "8"})]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "readers-data"
    return [make_dataset(root, f, e, records=n, shards=2, seed=1, **kw).root
            for f, e, n, kw in SETS]


def digests(stdout):
    return re.findall(r"^DIGEST .*$", stdout, flags=re.M)


def check(n, data, readers, *extra):
    # a hang guard, not a speed test: Debian's MPICH (the system-MPI lane) busy-polls, so 3
    # ranks on 2 cores take ~135 s where 2 take 7
    p = run_mpi(n, [CHECK, "--data", *data, "--readers", readers, *extra], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^OK \d+ checks$", p.stdout, flags=re.M), p.stdout
    return digests(p.stdout)


def test_registry():
    assert {"naive", "coordinated", "memory"} <= set(READERS)
    with pytest.raises(HpcioError, match="unknown reader 'bogus'"):
        make_reader("bogus", None, None)


@pytest.mark.parametrize("n", [2, 3])
def test_every_format_exactly_once_same_bytes_same_sequence(data, n):
    """check_readers.py asserts, on every rank: ids = the plan, labels and bytes = the
    source records, every reader's sequence identical; on rank 0: each epoch covers the
    epoch order exactly once (drop_last) or every record with the stated padding."""
    d = check(n, data, "naive,coordinated,memory,memory:hold=pymem,"
                       "coordinated:mechanism=nonblocking,"
                       "coordinated:collective=true:sieve_gap=0,coordinated:prefetch=0,"
                       "coordinated:collective=small,"
                       "coordinated:shared=false,coordinated:shared=true:request_bytes=1:"
                       "mechanism=sync",
              "--batch", "3", "--early-stop", "2")
    assert len(d) == len(SETS) * 3 * 2 * 2  # datasets x shuffles x drop_last x epochs
    by = {tuple(x.split()[1:5]): x.split()[5] for x in d}
    for name in {k[0] for k in by}:
        # different epochs differ when shuffled, and not when not
        assert by[(name, "none", "1", "0")] == by[(name, "none", "1", "1")]
        for sh in ("chunk", "global"):
            assert by[(name, sh, "1", "0")] != by[(name, sh, "1", "1")]


def test_same_seed_same_order_across_runs(data):
    """Two separate jobs (other reader variants, tiny requests, requests without the
    epoch-start ramp, nonblocking reads collective only where that pays) deliver the same
    sequences."""
    a = check(2, data[:2], "coordinated,memory", "--batch", "3", "--drop-last", "yes")
    b = check(2, data[:2], "coordinated:request_bytes=1:collective=true,naive,"
                           "coordinated:ramp=false,"
                           "coordinated:collective=small:mechanism=nonblocking",
              "--batch", "3", "--drop-last", "yes")
    assert a == b and len(a) == 2 * 3 * 2


def test_preload_delivers_the_same_batches(data):
    """Readers told the next plan before each epoch (the coordinated reader reads its first
    requests while the epoch before ends) deliver what readers without it do: the next
    epoch's preloaded reads are used when it comes and dropped when another plan comes
    (after the last epoch), also around early stops and with collective reads, the same
    way on every rank. One variant reads collectively: two readers with collective reads
    in flight at once can deadlock in MPICH (see CoordinatedReader.preload)."""
    variants = ("coordinated,coordinated:collective=true,coordinated:prefetch=0,"
                "coordinated:mechanism=sync,naive")
    plain = check(2, data[:4], variants, "--batch", "3")
    assert check(2, data[:4], variants, "--batch", "3", "--preload") == plain
    assert check(2, data[:4], variants, "--batch", "3", "--preload",
                 "--early-stop", "2") == plain


def test_request_sizes_ramp_up_to_the_steady_size():
    """An epoch's requests: one step first, each next one twice the last, up to the steady
    size, then steady; the last one what is left; every step in exactly one request."""
    assert request_bounds(62, 8).tolist() == [0, 1, 3, 7, 15, 23, 31, 39, 47, 55, 62]
    assert np.diff(request_bounds(62, 5)).tolist() == [1, 2, 4] + [5] * 11
    assert request_bounds(62, 8, first=8).tolist() == list(range(0, 62, 8)) + [62]
    assert request_bounds(2, 8).tolist() == [0, 1, 2]
    assert request_bounds(1, 1).tolist() == [0, 1] and request_bounds(0, 4).tolist() == [0]
    for steps in range(1, 40):
        for steady in (1, 2, 3, 7, 16, 64):
            b = request_bounds(steps, steady)
            n = np.diff(b)
            assert b[0] == 0 and b[-1] == steps and (n >= 1).all() and (n <= steady).all()
            assert n[0] == 1
            grow = n[:-1]  # all but the last: doubling, capped at the steady size
            assert (grow[1:] == np.minimum(2 * grow[:-1], steady)).all()


def test_reader_requests_ramp_up_then_stay_steady(data):
    """The coordinated reader cuts an epoch as request_bounds says: one step first,
    doubling to the steady size (here 8 steps of 2 x 784-byte records), every record of
    the plan in one request, in plan order; ``ramp=False`` keeps every request steady."""
    ds = open_dataset(data[3])  # packed raw, 61 records
    plan = make_plan(ds.records, 1, 0, 2, shuffle="none")  # 30 steps
    for ramp, sizes in ((True, [1, 2, 4, 8, 8, 7]), (False, [8, 8, 8, 6])):
        with make_reader("coordinated", ds, None, request_bytes=8 * 2 * 784,
                         ramp=ramp) as r:
            reqs, touched = r._prepare(plan)
        assert [q.hi - q.lo for q in reqs] == sizes
        assert [q.lo for q in reqs] == np.cumsum([0] + sizes[:-1]).tolist()
        assert np.array_equal(np.concatenate([q.ids for q in reqs]), plan.ids)
        assert touched.shape == (len(sizes), 2) and touched.any(axis=1).all()


def test_collective_small_reads_collectively_where_the_pieces_are_small(tmp_path):
    """``collective="small"`` reads a request's file collectively only where the
    independent reads would be several small pieces in a span at most 16x their bytes:
    under a global shuffle, the requests of 128 to 512 of the 2,000 784-byte records
    (smaller ones are sparser; 1,024 records are read through the holes in one piece),
    none of an unshuffled plan's (one piece per file); the same bytes either way.
    ``"auto"`` reads independently; the option takes small, nothing else."""
    ds = open_dataset(make_dataset(tmp_path, "packed", "raw", records=2000, shards=2,
                                   seed=1).root)
    got = {}
    for shuffle, how in (("global", "small"), ("none", "small"), ("global", "auto"),
                         ("global", True)):
        plan = make_plan(ds.records, 1, 0, 4, shuffle=shuffle)
        with make_reader("coordinated", ds, None, collective=how) as r:
            reqs, files = r._prepare(plan)
            got[shuffle, how] = b"".join(bytes(b.data) for b in r.batches(plan))
            st = r.stats
            assert r.collective == {"small": "small", "auto": False, True: True}[how]
            assert r.hints.get("romio_ds_read") == (None if how is True else "disable")
        if how == "small":
            assert st.collective_calls == files.sum() < st.calls
            pays = [len(q.ids) for q, f in zip(reqs, files) if f.any()]
            assert pays == ([128, 256, 512] if shuffle == "global" else []), pays
        else:
            assert st.collective_calls == (st.calls if how is True else 0) and st.calls
    assert got["global", "small"] == got["global", "auto"] == got["global", True]
    assert check_options("coordinated", {"collective": "Small"}) == {"collective": "small"}
    for bad in ({"collective": "some"}, {"collective": 2}):
        with pytest.raises(HpcioError, match=r"collective=('some'|2) is not true, false, "
                                             r"small or auto"):
            make_reader("coordinated", ds, None, **bad)


def test_memory_pymem_holds_one_bytes_object_per_record(data):
    """hold=pymem: a list with one ``bytes`` per record (the loaded buffer freed), the
    same batches as the one buffer, and what the objects occupy in ``held_bytes``."""
    ds = open_dataset(data[5])  # Caffe's float32 HDF5: records of 3136 bytes
    plan = make_plan(ds.records, 1, 0, 8, shuffle="global")
    with make_reader("memory", ds) as one, make_reader("memory", ds, hold="pymem") as py:
        assert py.mem is None and len(py.records) == ds.records
        assert all(type(r) is bytes and len(r) == 3136 for r in py.records)
        for a, b in zip(one.epoch(plan), py.epoch(plan)):
            assert np.array_equal(a.ids, b.ids) and np.array_equal(a.offsets, b.offsets)
            assert a.data.tobytes() == b.data.tobytes()
        assert py.stats.extra["held_bytes"] == \
            sum(sys.getsizeof(r) for r in py.records) + sys.getsizeof(py.records)
        assert one.stats.extra["held_bytes"] == int(ds.index.file_bytes.sum())
        assert (one.stats.extra["hold"], py.stats.extra["hold"]) == ("buffer", "pymem")
        assert py.stats.bytes == one.stats.bytes == len(plan.ids) * 3136
    with pytest.raises(HpcioError, match="hold='cppmem' is not one of buffer, pymem"):
        make_reader("memory", ds, hold="cppmem")


# ---- assembly helpers (pure) ------------------------------------------------------------
@pytest.mark.parametrize("lengths", [[784] * 50, list(range(0, 5000, 97)),
                                     [20000, 30000, 17000, 40000, 16384, 25000]])
def test_gather_and_copy_records(lengths):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, 600_000, dtype=np.uint8)
    lengths = np.array(lengths, dtype=np.int64)
    starts = rng.integers(0, 300_000, len(lengths))
    starts[3:6] = starts[2] + np.cumsum(lengths[2:5])  # some neighbours: runs get merged
    out = np.zeros(int(lengths.sum()) + 7, np.uint8)
    off = gather(src, starts, lengths, out)
    want = b"".join(src[s:s + n].tobytes() for s, n in zip(starts, lengths))
    assert out[:off[-1]].tobytes() == want
    # arbitrary destinations
    perm = rng.permutation(len(lengths))
    dst = layout(lengths[perm])[:-1][np.argsort(perm)]
    out2 = np.zeros_like(out)
    copy_records(src, starts, dst, lengths, out2)
    want2 = b"".join(src[starts[k]:starts[k] + lengths[k]].tobytes() for k in perm)
    assert out2[:len(want2)].tobytes() == want2


def test_union_reads_cover_every_record_once():
    """The node's union: sorted reads, duplicates read once, gaps read through only while
    that stays within the ratio; every record's position points at its bytes."""
    rng = np.random.default_rng(1)
    sizes = [200_000, 150_000]
    files = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    fil = np.array([1, 0, 0, 1, 0, 0], dtype=np.int64)
    off = np.array([5000, 100, 30000, 0, 100, 60000], dtype=np.int64)
    ln = np.array([700, 900, 800, 5000, 900, 400], dtype=np.int64)
    for gap, ratio, nreads in ((0, 3.0, 4), (40000, 100.0, 2), (40000, 1.5, 4)):
        rf, rs, rl, pos = union_reads(fil, off, ln, gap, ratio)
        assert len(rf) == nreads and np.all(np.diff(rf) >= 0)
        buf = np.concatenate([files[j][s:s + n] for j, s, n in zip(rf, rs, rl)])
        for k in range(len(fil)):
            assert buf[pos[k]:pos[k] + ln[k]].tobytes() == \
                files[fil[k]][off[k]:off[k] + ln[k]].tobytes()
        assert pos[1] == pos[4]  # a duplicate is read once


def test_merge_runs_and_clusters():
    s, d, n = merge_runs(np.array([0, 10, 20, 50]), np.array([0, 10, 20, 30]),
                         np.array([10, 10, 10, 5]))
    assert s.tolist() == [0, 50] and d.tolist() == [0, 30] and n.tolist() == [30, 5]
    start, length, pos = clusters(np.array([0, 10, 100, 1000]), np.array([5, 5, 5, 5]), 90)
    assert start.tolist() == [0, 1000] and length.tolist() == [105, 5]
    assert pos.tolist() == [0, 10, 100, 105]


# ---- bad input: one line, non-zero exit, every rank ends ---------------------------------
def broken_copy(tmp_path, data, how):
    src = data[3]  # packed raw, 2 shards
    dst = tmp_path / f"broken-{how}"
    shutil.copytree(src, dst)
    idx = RecordIndex.load(os.path.join(dst, "index.npz"))
    shard = os.path.join(dst, idx.files[1])
    if how == "truncated":
        with open(shard, "r+b") as f:
            f.truncate(os.path.getsize(shard) - 100)
    elif how == "missing":
        os.unlink(shard)
    elif how == "offset":
        idx.offset[-1] = idx.file_bytes[idx.file[-1]] + 4096
        idx.save(os.path.join(dst, "index.npz"))
    elif how == "checksum":
        with open(shard, "r+b") as f:
            f.seek(10)
            b = f.read(1)
            f.seek(10)
            f.write(bytes([b[0] ^ 0xFF]))
    return str(dst)


@pytest.mark.parametrize("how,args,msg", [
    ("truncated", [], r"bytes on disk, the index says"),
    ("missing", [], r"shard file missing"),
    ("offset", [], r"index.npz: its sha256 is not the one in the manifest"),
    ("checksum", ["--check-shards"], r"checksum mismatch"),
    ("checksum", [], r"record \d+ at byte \d+ \(\d+ bytes\) is not the record indexed"),
    (None, ["--batch", "40"], r"batch size 40 is larger than the 30 records per rank"),
    (None, ["--readers", "bogus"], r"unknown reader 'bogus'"),
])
def test_bad_input_one_line_every_rank_ends(tmp_path, data, how, args, msg):
    root = broken_copy(tmp_path, data, how) if how else data[3]
    base = ["--data", root, "--readers", "coordinated", "--cache", "asis", "--shuffle",
            "none", "--repeat", "1", "--batch", "4", "--limits", "seq",
            "--out", str(tmp_path / "b.json")]
    p = run_mpi(2, BENCH + base + args, timeout=60)
    line = one_line(p, "hpcio.bench: error")
    assert re.search(msg, line), line
    assert not os.path.exists(tmp_path / "b.json")


def test_naive_cursor_walks_key_order_like_caffe(tmp_path):
    """access=cursor: the same bytes as one get per record; the records stepped over are
    the other ranks' (and a new pass starts at a shard's first key)."""
    ds = make_dataset(tmp_path, "lmdb", "raw", records=96, shards=3)
    for rank in range(2):
        plan = make_plan(ds.records, 2, rank, 8, shuffle="none")
        got = {}
        for access in ("get", "cursor"):
            r = make_reader("naive", ds, access=access)
            got[access] = [bytes(b.data) for b in r.epoch(plan)]
            stats = r.stats
            r.close()
        assert got["cursor"] == got["get"]
        ids = plan.ids
        shard = ids // 32  # 3 shards of 32 records
        expect = sum(int(ids[shard == s].max()) - 32 * s + 1 - int((shard == s).sum())
                     for s in np.unique(shard))
        assert stats.skipped == expect and stats.extra["access"] == "cursor"
    with pytest.raises(HpcioError, match="needs --shuffle none"):
        r = make_reader("naive", ds, access="cursor")
        try:
            next(iter(r.epoch(make_plan(ds.records, 2, 0, 8, shuffle="global"))))
        finally:
            r.close()
    h5 = make_dataset(tmp_path, "hdf5", "raw", records=16, shards=1)
    with pytest.raises(HpcioError, match="a hdf5 dataset has none"):
        make_reader("naive", h5, access="cursor")


def test_odirect_same_bytes_and_refusals_in_one_line(tmp_path):
    """O_DIRECT reads (records widened to whole blocks, merged, gathered into place)
    deliver the page-cache path's bytes in any order; odirect=true refuses in one line what
    auto passes over: records below odirect_min, and a file system without O_DIRECT."""
    ds = open_dataset(make_dataset(tmp_path, "packed", "raw", records=600, shards=2,
                                   seed=1).root)
    for shuffle in ("global", "none"):
        plan = make_plan(ds.records, 1, 0, 7, shuffle=shuffle, drop_last=False)
        got = []
        for opts in ({"odirect": False}, {"odirect": True, "odirect_min": 0, "threads": 3}):
            with make_reader("coordinated", ds, None, **opts) as r:
                got.append(b"".join(bytes(b.data) for b in r.batches(plan)))
                assert r.route.name == ("direct" if opts["odirect"] else "views")
                assert r.stats.extra["odirect"].startswith("on" if opts["odirect"]
                                                           else "off")
        assert got[0] == got[1] and len(got[0]) == ds.records * 784
    with make_reader("coordinated", ds, None) as r:  # auto: 784-byte records
        assert r.route.name == "views" and "below odirect_min" in r.stats.extra["odirect"]
    with pytest.raises(HpcioError) as e:
        make_reader("coordinated", ds, None, odirect=True)
    assert "odirect=true" in str(e.value) and "below odirect_min" in str(e.value)
    assert "\n" not in str(e.value)
    if not os.path.isdir("/dev/shm"):
        return
    # tmpfs refused O_DIRECT before Linux 6.6 (and takes it since): either way in one line
    shm = tempfile.mkdtemp(dir="/dev/shm")
    try:
        tiny = open_dataset(make_dataset(shm, "packed", "raw", records=8, seed=1).root)
        refused = direct_refusal(tiny.paths[0])
        if refused is None:
            with make_reader("coordinated", tiny, None, odirect=True, odirect_min=0) as r:
                assert r.route.name == "direct"
            return
        with pytest.raises(HpcioError) as e:
            make_reader("coordinated", tiny, None, odirect=True, odirect_min=0)
        assert "refuses O_DIRECT" in str(e.value) and "\n" not in str(e.value)
        with make_reader("coordinated", tiny, None, odirect="auto", odirect_min=0) as r:
            assert r.route.name == "views" and "refuses O_DIRECT" in r.stats.extra["odirect"]
    finally:
        shutil.rmtree(shm)
