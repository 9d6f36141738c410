"""Page-cache control, proven with mincore: cold is cold, warm is warm, on one process and
under mpiexec (one eviction per file per node, split between the node's ranks)."""

import os

import pytest

from hpcio.cache import (CACHE_MODES, NETWORK_FS, cache_state, cold_scope, describe, evict,
                         resident_fraction, warm)
from hpcio.errors import HpcioError
from hpcio.fsutil import fs_type

from common.datasets import make_dataset
from common.mpi import run_mpi


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(tmp_path_factory.getbasetemp() / "cache-data", "packed", "raw",
                        records=2000, shards=3, seed=2)


def test_warm_then_cold_by_mincore(ds):
    info = warm(ds)
    assert info["bytes"] == int(ds.index.file_bytes.sum())
    assert resident_fraction(ds.paths) == 1.0
    info = evict(ds)
    assert info["files"] == len(ds.paths) and not info["drop_caches"]
    assert resident_fraction(ds.paths) < 0.05


def test_cache_state_modes(ds):
    assert set(CACHE_MODES) == {"cold", "warm", "asis"}
    assert cache_state("warm", ds)["resident"] == 1.0
    assert cache_state("asis", ds)["resident"] == 1.0
    assert cache_state("cold", ds)["resident"] < 0.05
    with pytest.raises(HpcioError, match="unknown cache mode 'hot'"):
        cache_state("hot", ds)


def test_missing_file(tmp_path, ds):
    class Fake:
        paths = [str(tmp_path / "nope")]
    with pytest.raises(HpcioError, match="shard file missing"):
        evict(Fake())


SCRIPT = """
import sys
from mpi4py import MPI
from hpcio.cache import cache_state
from hpcio.data.dataset import open_dataset
comm = MPI.COMM_WORLD
ds = open_dataset(sys.argv[1], comm)
w = cache_state("warm", ds, comm)
c = cache_state("cold", ds, comm)
w2 = cache_state("warm", ds, comm)
if comm.rank == 0:
    print("RES", w["resident"], c["resident"], w2["resident"], c["files"], w["bytes"])
"""


@pytest.mark.parametrize("n", [2, 3])
def test_under_mpi(tmp_path, ds, n):
    script = tmp_path / "cache_check.py"
    script.write_text(SCRIPT)
    p = run_mpi(n, [script, ds.root], timeout=60)
    assert p.returncode == 0, p.stderr
    _, w, c, w2, files, nbytes = p.stdout.split()
    assert float(w) == 1.0 and float(c) < 0.05 and float(w2) == 1.0
    assert int(files) == len(ds.paths) and int(nbytes) == int(ds.index.file_bytes.sum())


def test_cold_says_what_it_cleared_and_what_not(ds):
    info = evict(ds, drop=os.geteuid() != 0)        # asked for; refused unless root
    assert info["fs_type"] == fs_type(ds.root) and not info["testbed"]
    assert any("fadvise" in c for c in info["cleared"])
    if info["fs_type"] in ("tmpfs", "ramfs"):
        assert "in memory" in info["not_cleared"][0]
    else:
        assert any("disk's own cache" in c for c in info["not_cleared"])
    refused = [c for c in info["not_cleared"] if "drop_caches refused" in c]
    assert len(refused) == (os.geteuid() != 0)
    line = describe(info)
    assert line.startswith(f"cache cold on {info['fs_type']}: cleared ") and "\n" not in line
    assert describe(cache_state("warm", ds)) == "cache warm"


def test_cold_scope_of_a_network_file_system_names_the_servers(tmp_path):
    with open("/proc/self/mounts") as f:
        net = [(m, t) for _, m, t, *_ in map(str.split, f)
               if (t in NETWORK_FS or t.startswith("fuse")) and os.path.isdir(m)]
    if not net:
        pytest.skip("no network or FUSE file system mounted here (scripts/pfs-local.sh start "
                    "mounts the GlusterFS testbed; needs root)")
    mnt, kind = net[0]
    scope = cold_scope(os.path.join(mnt, "x"), asked=False, dropped=False)
    assert scope["fs_type"] == kind
    if not scope["testbed"]:
        assert any("servers' caches" in c for c in scope["not_cleared"])
