"""Run under mpiexec: the naive reader maps an LMDB dataset; rank 0 truncates shard
``--file`` to half its size, and every rank then touches its last record through the map,
past the new end, as a read racing the truncation does after the reader's size check
passed. The process dies of SIGBUS; the job must still end with one line naming the shard.

Usage: mapfault_naive.py --data DIR [--file 1]
"""

import argparse
import os
import sys

from hpcio.data.dataset import open_dataset
from hpcio.errors import guard
from hpcio.readers import make_reader


def main():
    from mpi4py import MPI
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--file", type=int, default=1)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    ds = open_dataset(a.data, comm)
    with make_reader("naive", ds, comm) as r:
        path = ds.path(a.file)
        last = int(max(i for i in range(ds.records) if ds.index.file[i] == a.file))
        comm.Barrier()
        if comm.rank == 0:
            os.truncate(path, os.path.getsize(path) // 2)
        comm.Barrier()
        rec = r.native.get(last)  # no check between: the map faults
        print("DELIVERED", len(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="mapfault_naive"))
