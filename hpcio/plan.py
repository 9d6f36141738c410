"""The sample plan: which records each rank trains on at each step of an epoch.

A pure function of (records, ranks, batch, epoch, seed, shuffle, drop_last). Every rank
computes its own plan from the shared seed (nothing is broadcast), and every reader executes
the same plan, so naive and coordinated runs deliver the same samples to the same ranks in
the same order.

Assignment: global step ``s`` takes the next ``ranks * batch`` records of the epoch order;
rank ``r`` gets the ``r``-th block of ``batch`` of them. With ``shuffle='none'`` every
batch is a contiguous run of records and a step's batches tile one contiguous range —
what collective I/O aggregates best.

Uneven splits: ``drop_last=True`` (default) drops the last ``records % (ranks*batch)``
records of each epoch's order (different ones each epoch when shuffled), so every step has
full batches. ``drop_last=False`` pads the order by wrapping around to a multiple of
``ranks`` (as PyTorch's DistributedSampler does: at most ``ranks - 1`` records appear twice)
and the last step has a shorter batch, the same length on every rank.
"""

from dataclasses import dataclass

import numpy as np

from .errors import HpcioError, lookup

__all__ = ["SHUFFLES", "BLOCK", "WINDOW", "epoch_order", "Plan", "make_plan", "all_plans"]


def _none(n, rng, block, window):
    return np.arange(n, dtype=np.int64)


def _global(n, rng, block, window):
    return rng.permutation(n).astype(np.int64)


def _chunk(n, rng, block, window):
    """Permute blocks of ``block`` neighbouring records, then shuffle records within
    consecutive windows of ``window`` records. Reads stay runs of up to ``block``
    neighbours (near-sequential I/O); a record moves anywhere in the epoch at block
    granularity and anywhere within its window. Larger blocks: faster I/O, more
    correlation between neighbouring samples in a batch; a window of several blocks
    breaks that correlation up."""
    block = max(1, int(block))
    nblocks = -(-n // block)
    starts = rng.permutation(nblocks).astype(np.int64) * block
    sizes = np.minimum(block, n - starts)
    order = np.repeat(starts, sizes) + (np.arange(sizes.sum()) -
                                        np.repeat(np.cumsum(sizes) - sizes, sizes))
    window = max(1, int(window))
    if window > 1:
        key = np.arange(n) // window + rng.random(n)
        order = order[np.argsort(key, kind="stable")]
    return order


SHUFFLES = {"none": _none, "global": _global, "chunk": _chunk}
#: the chunk shuffle's default block and window (records)
BLOCK, WINDOW = 64, 1024


def epoch_order(records, epoch=0, seed=0, shuffle="global", block=BLOCK, window=WINDOW):
    """The order in which an epoch visits all ``records`` record ids."""
    fn = lookup(SHUFFLES, shuffle, "shuffle mode")
    rng = np.random.default_rng([int(seed), int(epoch)])
    return fn(int(records), rng, block, window)


@dataclass(frozen=True)
class Plan:
    """One rank's epoch: ``ids`` in delivery order, cut into ``steps`` batches."""

    ids: np.ndarray  # int64 record ids
    batch: int
    rank: int
    ranks: int
    epoch: int

    @property
    def steps(self) -> int:
        return -(-len(self.ids) // self.batch)

    def step(self, s):
        return self.ids[s * self.batch:(s + 1) * self.batch]

    def __iter__(self):
        return (self.step(s) for s in range(self.steps))

    def __len__(self):
        return self.steps

    def head(self, steps: "int | None") -> "Plan":
        """The plan cut to its first ``steps`` steps (all of it for None), so that a reader
        never reads past the steps a run will take."""
        if steps is None or steps >= self.steps:
            return self
        return Plan(self.ids[:steps * self.batch], self.batch, self.rank, self.ranks,
                    self.epoch)


def make_plan(records, ranks, rank, batch, epoch=0, seed=0, shuffle="global",
              drop_last=True, block=BLOCK, window=WINDOW):
    """This rank's plan for one epoch (see the module docstring for the rules)."""
    records, ranks, rank, batch = int(records), int(ranks), int(rank), int(batch)
    if records <= 0:
        raise HpcioError("the dataset has no records", everywhere=True)
    if batch <= 0:
        raise HpcioError("batch size must be positive", everywhere=True)
    if not 0 <= rank < ranks:
        raise HpcioError(f"rank {rank} outside 0..{ranks - 1}", everywhere=True)
    per_rank = records // ranks if drop_last else -(-records // ranks)
    if batch > per_rank:
        raise HpcioError(f"batch size {batch} is larger than the {per_rank} records per "
                         f"rank ({records} records over {ranks} ranks)", everywhere=True)
    order = epoch_order(records, epoch, seed, shuffle, block, window)
    g = ranks * batch
    if drop_last:
        full = (records // g) * g
        ids = order[:full].reshape(-1, ranks, batch)[:, rank, :].ravel()
    else:
        padded = per_rank * ranks
        if padded > records:
            order = np.concatenate([order, order[:padded - records]])
        full = (padded // g) * g
        head = order[:full].reshape(-1, ranks, batch)[:, rank, :].ravel()
        tail = order[full:]
        short = len(tail) // ranks
        ids = np.concatenate([head, tail[rank * short:(rank + 1) * short]])
    return Plan(np.ascontiguousarray(ids, dtype=np.int64), batch, rank, ranks, int(epoch))


def all_plans(records, ranks, batch, **kw):
    """Every rank's plan (for checks and tests; a run computes only its own)."""
    return [make_plan(records, ranks, r, batch, **kw) for r in range(ranks)]
