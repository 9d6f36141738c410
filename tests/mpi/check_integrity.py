"""Run under mpiexec: a reader reads an epoch; after step ``--at`` rank 0 changes a shard
(every rank waits for it), then the reader reads on. The reader must stop with one line
naming the file; a run that gets to the end prints ``DELIVERED`` and exits 0 (a failure
of the test that launched it).

Usage: check_integrity.py --data DIR --reader coordinated[:key=value...] --change truncate
       [--file 1] [--at 1] [--shuffle global] [--batch 4]
"""

import argparse
import os
import shutil
import sys

from hpcio.data.dataset import open_dataset
from hpcio.errors import guard
from hpcio.plan import make_plan
from hpcio.readers import make_reader


def change(path, how):
    """Change the file as a user might during a run."""
    if how == "truncate":
        os.truncate(path, os.path.getsize(path) // 2)
    elif how == "grow":
        with open(path, "ab") as f:
            f.write(b"\0" * 4096)
    elif how == "vanish":
        os.unlink(path)
    elif how == "replace":  # same size, other bytes, another file
        tmp = path + ".new"
        shutil.copyfile(path, tmp)
        with open(tmp, "r+b") as f:
            f.write(b"\xff" * 64)
        os.replace(tmp, path)
    elif how == "modify":  # same file, same size, rewritten in place
        with open(path, "r+b") as f:
            b = f.read(64)
            f.seek(0)
            f.write(bytes(x ^ 0xFF for x in b))
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    elif how == "rewrite":  # rewritten in place, its modification time set back (touch -d)
        st = os.stat(path)
        with open(path, "r+b") as f:
            b = f.read(64)
            f.seek(0)
            f.write(bytes(x ^ 0xFF for x in b))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--reader", default="coordinated")
    ap.add_argument("--change", default="truncate")
    ap.add_argument("--file", type=int, default=1, help="index file number to change")
    ap.add_argument("--at", type=int, default=1, help="change it after this step")
    ap.add_argument("--shuffle", default="global")
    ap.add_argument("--batch", type=int, default=4)
    a = ap.parse_args()
    from mpi4py import MPI  # here: tests import change() without starting MPI
    comm = MPI.COMM_WORLD
    ds = open_dataset(a.data, comm)
    name, *kvs = a.reader.split(":")
    opts = dict(kv.split("=", 1) for kv in kvs)  # text, as --reader-option gives it
    reader = make_reader(name, ds, comm, **opts)
    plan = make_plan(ds.records, comm.size, comm.rank, a.batch, epoch=0, seed=1,
                     shuffle=a.shuffle, drop_last=True)
    for b in reader.epoch(plan):
        if b.step == a.at:
            comm.Barrier()
            if comm.rank == 0:
                change(ds.path(a.file), a.change)
            comm.Barrier()
    reader.close()
    comm.Barrier()  # every rank got to the end
    print(f"DELIVERED rank {comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(guard(main, prog="check_integrity"))
