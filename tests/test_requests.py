"""The coordinated reader's request planning (pure numpy, no MPI) and the buffer pool its
rings draw from."""

import numpy as np
import pytest

from hpcio.plan import make_plan
from hpcio.readers.base import BufferPool, BufferRing, POOL
from hpcio.readers.requests import advise_ranges, cut, request_bounds, steady_steps, touched


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
