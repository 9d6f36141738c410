"""The coordinated reader's read jobs, executed here with numpy in place of MPI-IO: every
record lands at its place, whatever the order, gaps, duplicates and sieving."""

import numpy as np
import pytest

from hpcio.readers.assemble import copy_records, layout
from hpcio.readers.reads import plan_reads


def execute(jobs, staged, files, nbytes):
    """Do what one MPI-IO read per job does: the file view's pieces, back to back, land
    in the memory type's blocks (or the staging buffer); then the copies."""
    buf = np.zeros(nbytes, np.uint8)
    stage = np.zeros(staged, np.uint8)
    for job in jobs:
        data = np.concatenate([files[job.file][a:a + n] for a, n in
                               zip(job.fstart.tolist(), job.flen.tolist())] or
                              [np.zeros(0, np.uint8)])
        assert len(data) == job.want
        if job.staged:
            stage[job.stage:job.stage + job.want] = data
            copy_records(stage, job.stage + job.pos, job.dst, job.length, buf)
        else:
            assert job.mlen.sum() == job.want
            pos = 0
            for d, n in zip(job.mdst.tolist(), job.mlen.tolist()):
                buf[d:d + n] = data[pos:pos + n]
                pos += n
        if job.dups is not None:
            for a, b, n in zip(*(x.tolist() for x in job.dups)):
                buf[b:b + n] = buf[a:a + n]
    return buf


def records_of(rng, nfiles=3, per_file=200, sizes=(16, 4000)):
    files, fil, off, ln = [], [], [], []
    for j in range(nfiles):
        n = rng.integers(*sizes, per_file)
        gaps = rng.integers(0, 3000, per_file)
        o = np.cumsum(gaps + n) - n
        files.append(rng.integers(0, 256, int(o[-1] + n[-1]) + 7, dtype=np.uint8))
        fil.append(np.full(per_file, j))
        off.append(o)
        ln.append(n)
    return files, np.concatenate(fil), np.concatenate(off), np.concatenate(ln)


@pytest.mark.parametrize("gap", [0, 32 << 10])
def test_every_record_in_place(gap):
    rng = np.random.default_rng(1)
    files, fil, off, ln = records_of(rng)
    ids = rng.permutation(len(fil))[:500]
    ids = np.concatenate([ids, ids[:5]])  # padding repeats records within a request
    dst = layout(ln[ids])
    jobs, staged = plan_reads(fil[ids], off[ids], ln[ids], dst[:-1], sieve_gap=gap)
    assert (staged > 0) == (gap > 0)
    got = execute(jobs, staged, files, int(dst[-1]))
    want = np.concatenate([files[f][o:o + n] for f, o, n in zip(fil[ids], off[ids], ln[ids])])
    assert np.array_equal(got, want)
    # duplicates are read once
    assert sum(j.want for j in jobs if not j.staged) + sum(
        int(j.length.sum()) for j in jobs if j.staged) == int(ln[np.unique(ids)].sum())


def test_neighbours_merge_and_collective_files():
    files = [np.arange(100, dtype=np.uint8), np.arange(50, dtype=np.uint8)]
    fil = np.array([0, 0, 0])
    off = np.array([10, 20, 30])
    ln = np.array([10, 10, 5])
    dst = layout(ln)
    # collective: file 1 is joined with nothing to read
    jobs, staged = plan_reads(fil, off, ln, dst[:-1], files=np.array([0, 1]))
    assert [j.file for j in jobs] == [0, 1] and staged == 0
    assert jobs[0].fstart.tolist() == [10] and jobs[0].flen.tolist() == [25]
    assert jobs[0].mdst.tolist() == [0] and jobs[0].mlen.tolist() == [25]
    assert jobs[1].want == 0
    # collective in file 1 only: this rank's file 0 is still read (independently)
    jobs, _ = plan_reads(fil, off, ln, dst[:-1], files=np.array([1]))
    assert [(j.file, j.want) for j in jobs] == [(0, 25), (1, 0)]
    # shuffled order: one file run, memory blocks where neighbours differ
    order = np.array([2, 0, 1])
    dst = layout(ln[order])
    jobs, _ = plan_reads(fil[order], off[order], ln[order], dst[:-1])
    assert jobs[0].flen.tolist() == [25] and jobs[0].mlen.tolist() == [20, 5]
    assert np.array_equal(execute(jobs, 0, files, 25), np.concatenate(
        [files[0][30:35], files[0][10:30]]))


def test_sieving_bounded_by_ratio():
    # two records far apart: reading the hole would cost far more than ratio x the bytes
    fil, off, ln = np.array([0, 0]), np.array([0, 30000]), np.array([8, 8])
    jobs, staged = plan_reads(fil, off, ln, layout(ln)[:-1], sieve_gap=32 << 10,
                              sieve_ratio=3.0)
    assert staged == 0 and jobs[0].flen.tolist() == [8, 8]


def test_block_ranges_widen_merge_and_place():
    """Records widened to whole blocks, overlapping or touching ranges merged (per file),
    and each record found at its place in the ranges laid end to end."""
    from hpcio.readers.routes import block_ranges
    rng = np.random.default_rng(3)
    sizes = [50_000, 70_000]
    files = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    n = 300
    fil = rng.integers(0, 2, n)
    ln = rng.integers(1, 3000, n)
    off = np.array([rng.integers(0, sizes[f] - k) for f, k in zip(fil, ln)])
    rf, ra, re_, which, pos, total = block_ranges(fil, off, ln, span=1 << 20, block=512)
    assert (ra % 512 == 0).all() and (re_ % 512 == 0).all() and total == (re_ - ra).sum()
    for j in (0, 1):  # apart within a file
        a, e = ra[rf == j], re_[rf == j]
        assert (a[1:] > e[:-1]).all()
    stage = np.concatenate([np.pad(files[f], (0, 512))[a:e] for f, a, e in zip(rf, ra, re_)])
    for k in range(n):
        assert rf[which[k]] == fil[k] and ra[which[k]] <= off[k]
        assert off[k] + ln[k] <= re_[which[k]]
        assert (stage[pos[k]:pos[k] + ln[k]] == files[fil[k]][off[k]:off[k] + ln[k]]).all()
