import numpy as np
import pytest

from hpcio.errors import HpcioError
from hpcio.plan import SHUFFLES, all_plans, epoch_order, make_plan


@pytest.mark.parametrize("shuffle", list(SHUFFLES))
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_drop_last_every_full_step_once(shuffle, ranks):
    n, b = 1003, 7
    plans = all_plans(n, ranks, b, shuffle=shuffle, epoch=2, seed=5, block=16, window=64)
    ids = np.concatenate([p.ids for p in plans])
    steps = n // (ranks * b)
    assert len(ids) == steps * ranks * b == len(np.unique(ids))
    assert {p.steps for p in plans} == {steps}
    assert all(len(s) == b for p in plans for s in p)
    # the dropped records are exactly the tail of the epoch order
    order = epoch_order(n, 2, 5, shuffle, 16, 64)
    assert set(ids) == set(order[:len(ids)])


@pytest.mark.parametrize("shuffle", list(SHUFFLES))
def test_no_drop_last_covers_all_with_at_most_ranks_minus_one_repeats(shuffle):
    n, ranks, b = 1003, 3, 8
    plans = all_plans(n, ranks, b, shuffle=shuffle, drop_last=False)
    ids = np.concatenate([p.ids for p in plans])
    assert set(ids) == set(range(n))
    assert len(ids) - n == (-n) % ranks
    assert len({len(p.ids) for p in plans}) == 1  # same number of samples on every rank
    assert len({p.steps for p in plans}) == 1


def test_none_is_contiguous_per_batch_and_step():
    plans = all_plans(100, 2, 5, shuffle="none")
    assert list(plans[0].step(0)) == [0, 1, 2, 3, 4]
    assert list(plans[1].step(0)) == [5, 6, 7, 8, 9]
    assert list(plans[0].step(1)) == [10, 11, 12, 13, 14]


def test_deterministic_and_epochs_differ():
    a = make_plan(5000, 2, 1, 32, epoch=0, seed=1)
    b = make_plan(5000, 2, 1, 32, epoch=0, seed=1)
    c = make_plan(5000, 2, 1, 32, epoch=1, seed=1)
    d = make_plan(5000, 2, 1, 32, epoch=0, seed=2)
    assert np.array_equal(a.ids, b.ids)
    assert not np.array_equal(a.ids, c.ids)
    assert not np.array_equal(a.ids, d.ids)


def test_chunk_keeps_runs_of_neighbours():
    order = epoch_order(100_000, 0, 0, "chunk", block=64, window=1)
    runs = np.count_nonzero(np.diff(order) != 1) + 1
    assert runs <= -(-100_000 // 64)
    mixed = epoch_order(100_000, 0, 0, "chunk", block=64, window=512)
    assert sorted(mixed) == list(range(100_000))
    # within a window, records of a block are spread out, but stay in the window
    assert not np.array_equal(mixed, order)
    assert np.array_equal(np.sort(mixed[:512]), np.sort(order[:512]))


def test_global_is_a_permutation_far_from_identity():
    order = epoch_order(10_000, 0, 0, "global")
    assert sorted(order) == list(range(10_000))
    assert np.count_nonzero(np.diff(order) == 1) < 50


@pytest.mark.parametrize("kw,msg", [
    (dict(records=100, ranks=2, batch=51), "larger than the 50 records per rank"),
    (dict(records=0, ranks=2, batch=1), "no records"),
    (dict(records=10, ranks=2, batch=0), "batch size must be positive"),
    (dict(records=10, ranks=2, batch=1, shuffle="weird"), "unknown shuffle mode"),
])
def test_bad_plans(kw, msg):
    with pytest.raises(HpcioError, match=msg):
        make_plan(rank=0, **kw)
