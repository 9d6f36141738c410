"""Stores compared on one dataset (hpcio.explain.stores): ratios to the best store, the
refusal of stores that hold different record counts, and footprints as du counts them."""

import os

import pytest

from common.datasets import make_dataset
from common.launch import launch
from hpcio.explain.stores import footprint, relative, same_records
from hpcio.errors import HpcioError


def test_relative_is_each_store_over_the_best():
    rows = [{"store": "images", "records": 600, "t": 30.0},
            {"store": "lmdb", "records": 600, "t": 10.0},
            {"store": "hdf5", "records": 600, "t": None}]
    out = relative(rows, "t")
    assert [r["ratio"] for r in out] == [3.0, 1.0, None]
    assert [r["ratio"] for r in relative(rows, "t", best=max)] == [1.0, 1 / 3, None]
    assert "ratio" not in rows[0]  # the input is left as it was


def test_stores_of_different_record_counts_are_refused_in_one_line():
    rows = [{"store": "images", "records": 60000, "t": 30.0},
            {"store": "lmdb", "records": 6000, "t": 10.0}]
    with pytest.raises(HpcioError) as e:
        relative(rows, "t")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == ("stores of different record counts in one table (images 60,000, lmdb "
                   "6,000 records): compare stores of the same records")
    with pytest.raises(HpcioError):
        same_records(rows)
    same_records(rows[:1])


def test_footprint_counts_allocated_blocks_without_the_manifest_and_index(tmp_path):
    ds = make_dataset(tmp_path, "images", "png", records=40, shards=1)
    total, files = footprint(ds.root)
    assert files == 40
    du = launch(["du", "-s", "-B1", ds.root], check=True)
    hpcio = sum(os.stat(os.path.join(ds.root, f)).st_blocks * 512
                for f in ("hpcio.json", "index.npz"))
    assert total == int(du.stdout.split()[0]) - hpcio
    assert total >= 40 * 512  # every small file takes at least a block
