"""The coordinated reader's request planning (pure numpy, no MPI) and the buffer pool its
rings draw from."""

import numpy as np
import pytest

from hpcio.plan import make_plan
from hpcio.readers.base import BufferPool, BufferRing, POOL
from hpcio.readers.requests import MAX_SPAN, SMALL_READ, advise_ranges, collective_pays, \
    cut, extents, request_bounds, steady_steps, touched


@pytest.mark.parametrize("step, want, steps", [
    (1.73e6, 4 << 20, 2),      # the demo: 16 JPEGs of ~108 KB per step
    (12.6e6, 4 << 20, 1),      # 64 raw 192 KiB pictures: one step is already large
    (16 * 784, 4 << 20, 334),  # MNIST records: many steps per request
    (0, 4 << 20, 4 << 20),     # empty steps do not divide by zero
])
def test_steady_request_is_a_few_megabytes_and_at_least_a_step(step, want, steps):
    assert steady_steps(step, want) == steps


def test_requests_cover_the_plan_in_order_and_ramp_from_one_step():
    records, batch = 1000, 7
    plan = make_plan(records, 2, 1, batch, epoch=3, seed=5, shuffle="global")
    lengths = np.arange(records, dtype=np.int64) % 97 + 1
    reqs = cut(plan.ids, plan.batch, plan.steps, lengths, steady=8)
    assert [r.hi - r.lo for r in reqs[:5]] == [1, 2, 4, 8, 8]
    assert np.array_equal(np.concatenate([r.ids for r in reqs]), plan.ids)
    assert reqs[-1].hi == plan.steps and all(a.hi == b.lo for a, b in zip(reqs, reqs[1:]))
    for r in reqs:  # records end to end in the request's buffer
        assert np.array_equal(np.diff(r.off), lengths[r.ids]) and r.off[0] == 0
    flat = cut(plan.ids, plan.batch, plan.steps, lengths, steady=8, ramp=False)
    assert {r.hi - r.lo for r in flat[:-1]} == {8}
    assert list(request_bounds(plan.steps, 8)) == [0] + [r.hi for r in reqs]


def test_touched_files_per_request():
    rec_file = np.array([0, 0, 1, 2, 2, 1], dtype=np.int64)
    reqs = cut(np.arange(6, dtype=np.int64), 2, 3, np.ones(6, np.int64), steady=1,
               ramp=False)
    assert touched(reqs, rec_file, 4).tolist() == [[1, 0, 0, 0], [0, 1, 1, 0],
                                                  [0, 1, 1, 0]]


def test_extents_per_request_and_file():
    """Per request and file: the span, bytes and pieces of this rank's independent reads
    (neighbours merged; holes up to ``sieve_gap`` read through when that reads at most
    ``sieve_ratio`` times the bytes)."""
    rec_file = np.array([0, 0, 1, 1, 0, 0], dtype=np.int64)
    offset = np.array([0, 300, 0, 100, 100, 900], dtype=np.int64)
    length = np.array([100, 50, 100, 20, 100, 100], dtype=np.int64)
    reqs = cut(np.arange(6, dtype=np.int64), 2, 3, length, steady=1, ramp=False)
    start, end, nbytes, reads = extents(reqs, rec_file, offset, length, 3)
    big = np.iinfo(np.int64).max
    assert start.tolist() == [[0, big, big], [big, 0, big], [100, big, big]]
    assert end.tolist() == [[350, 0, 0], [0, 120, 0], [1000, 0, 0]]
    assert nbytes.tolist() == [[150, 0, 0], [0, 120, 0], [200, 0, 0]]
    assert reads.tolist() == [[2, 0, 0], [0, 1, 0], [2, 0, 0]]  # neighbours: one read
    # sieving: the first request's 200-byte hole is read through, the third's 700 not
    start, end, nbytes, reads = extents(reqs, rec_file, offset, length, 3, sieve_gap=200)
    assert nbytes[0].tolist() == [350, 0, 0] and reads[0].tolist() == [1, 0, 0]
    assert nbytes[2].tolist() == [200, 0, 0] and reads[2].tolist() == [2, 0, 0]


def test_collective_pays_for_small_reads_in_a_span_not_too_wide():
    # (start, end, nbytes, reads): 4 pieces of 250 bytes on average in a span 4x their
    # bytes; the same in a span 17x; one piece of 1000 bytes (nothing to merge); two of
    # 500; nothing read
    start = np.array([[0, 0, 0, 0, 0]])
    end = np.array([[4000, 17000, 4000, 4000, 0]])
    nbytes = np.array([[1000, 1000, 1000, 1000, 0]])
    reads = np.array([[4, 4, 1, 2, 0]])
    assert collective_pays(start, end, nbytes, reads, small=250).tolist() == [
        [False] * 5]
    assert collective_pays(start, end, nbytes, reads, small=1001).tolist() == [
        [True, False, False, True, False]]
    assert SMALL_READ == 16 << 10 and MAX_SPAN == 16


def _layout(length, files=2):
    """Records end to end, an equal share in each file (as datagen writes shards)."""
    rec_file = np.repeat(np.arange(files), len(length) // files).astype(np.int64)
    offset = np.zeros(len(length), np.int64)
    for f in range(files):
        sel = rec_file == f
        offset[sel] = np.concatenate([[0], np.cumsum(length[sel])[:-1]])
    return rec_file, offset


def _decide(length, shuffle, ranks, batch, steps, sieve_gap):
    """Every rank's decision from the reduced extents (as the reader's Allreduces make
    them), and which (request, file) some rank reads."""
    rec_file, offset = _layout(length)
    steady = steady_steps(batch * length.mean(), 4 << 20)
    ex, used = [], []
    for r in range(ranks):
        plan = make_plan(len(length), ranks, r, batch, shuffle=shuffle)
        reqs = cut(plan.ids[:steps * batch], batch, steps, length, steady)
        ex.append(extents(reqs, rec_file, offset, length, 2, sieve_gap))
        used.append(touched(reqs, rec_file, 2))
    got = collective_pays(np.minimum.reduce([e[0] for e in ex]),
                          np.maximum.reduce([e[1] for e in ex]),
                          *(np.add.reduce([e[k] for e in ex]) for k in (2, 3)))
    return got, np.logical_or.reduce(used)


def test_collective_pays_where_measured_on_four_nodes():
    """The virtual cluster's cases (8 ranks, 2 files; benchmarks/design.md): ~110 KB
    JPEGs, batch 16, 12 steps, are read independently whatever the shuffle; 784-byte
    records, batch 64, 100 steps, collectively under a global shuffle once a request
    spans at most 16x its bytes (the ramp's first requests are sparser), and
    independently unshuffled (each rank's records are runs of 50 KB)."""
    jpeg = np.random.default_rng(0).integers(95_000, 125_000, 2048).astype(np.int64)
    for shuffle in ("global", "chunk", "none"):
        got, used = _decide(jpeg, shuffle, 8, 16, 12, 0)
        assert used.any() and not got.any(), shuffle
    mnist = np.full(60_000, 784, np.int64)
    got, used = _decide(mnist, "global", 8, 64, 100, 32 << 10)
    assert used.all() and got.tolist() == [[False] * 2] * 3 + [[True] * 2] * 4
    got, used = _decide(mnist, "none", 8, 64, 100, 32 << 10)
    assert used.any() and not got.any()


def test_advise_ranges_merge_neighbours_and_skip_small_ones():
    f = np.array([1, 0, 0, 0, 1], dtype=np.int64)
    o = np.array([0, 200_000, 0, 100_000, 500_000], dtype=np.int64)
    n = np.array([70_000, 100_000, 90_000, 90_000, 1000], dtype=np.int64)
    fr, start, length = advise_ranges(f, o, n, gap=10_000)
    # file 0: [0, 90k) and [100k, 190k) merge (10 KB apart) with [200k, 300k); file 1:
    # [0, 70k) alone; 1000 bytes at 500k are below min_bytes
    assert fr.tolist() == [0, 1] and start.tolist() == [0, 0]
    assert length.tolist() == [300_000, 70_000]
    fr, start, length = advise_ranges(f, o, n, gap=0)
    assert fr.tolist() == [0, 0, 0, 1] and length.tolist() == [90_000, 90_000, 100_000,
                                                               70_000]


def test_pool_hands_buffers_back_by_size():
    pool = BufferPool(keep=2)
    a, b = pool.get(10_000), pool.get(50_000)
    pool.put(a)
    pool.put(b)
    assert pool.get(20_000) is b  # the smallest that fits
    assert pool.get(5_000) is a
    assert pool.get(1) is not a
    pool.put(np.zeros(1, np.uint8))
    pool.put(a)
    pool.put(b)  # over keep: the smallest goes
    assert sorted(len(x) for x in pool._free) == [10_000, 50_000]


def test_a_ring_made_again_reuses_the_buffers_of_the_last():
    """A reader re-made each cold epoch gets the pages its predecessor faulted in."""
    POOL.clear()
    ring = BufferRing(3, slack=1.25, least=4096)
    first = [ring.take(k, 3 << 20) for k in range(3)]
    first[0][:] = 7
    ring.clear()
    again = BufferRing(3, slack=1.25, least=4096)
    second = [again.take(k, 3 << 20) for k in range(3)]
    assert {id(x) for x in first} == {id(x) for x in second}
    assert all(x.ctypes.data % 4096 == 0 for x in second)
    again.clear()
    POOL.clear()


def test_a_ring_frees_what_it_outgrows():
    """Batches of growing size leave no outgrown buffer resident in the pool: it would
    stay there to the end of the run."""
    POOL.clear()
    ring = BufferRing(2, slack=1.25)
    for n in (10_000, 20_000, 40_000, 80_000):
        ring.take(0, n)
    assert POOL._free == []
    ring.clear()
    assert [len(b) for b in POOL._free] == [100_000]
    POOL.clear()
