"""Run under mpiexec: every reader variant executes the same plans on the given datasets;
check exactly-once delivery, bytes against the source, and identical per-rank sequences.

Usage: check_readers.py --data DIR [DIR...] [--readers naive,coordinated,...]
       [--shuffles none,chunk,global] [--batch 5] [--epochs 2] [--drop-last both]
       [--early-stop N] [--preload]

A reader variant is ``name[:key=value...]``, e.g. ``coordinated:mechanism=nonblocking``.
Prints ``DIGEST <dataset> <shuffle> <drop_last> <epoch> <sha>`` lines on rank 0 (the
sequence every rank received, the same for every reader) and ``OK <n> checks`` at the end.
``--preload``: before each epoch, every reader is told the plan after it (the next epoch's,
or after the last epoch the first epoch's, which then does not come: its reads are
dropped), and before an early stop the plan it will read next.
"""

import argparse
import hashlib
import os
import sys

import numpy as np
from mpi4py import MPI

from hpcio.data.dataset import compressed_records, open_dataset
from hpcio.datagen.write import Synthetic
from hpcio.errors import HpcioError, guard
from hpcio.plan import epoch_order, make_plan
from hpcio.readers import make_reader


def parse_variant(spec):
    name, *kvs = spec.split(":")
    opts = {}
    for kv in kvs:
        k, _, v = kv.partition("=")
        opts[k] = int(v) if v.lstrip("-").isdigit() else v
    return name, opts


def source_bytes(ds, i):
    """Record ``i`` read the plainest way: pread at the index offset; where records lie
    compressed in their files (a LevelDB's snappy blocks), drawn again from the preset."""
    m = ds.manifest
    if compressed_records(m):
        src = Synthetic(m["preset"], m["seed"], m["records"], m["shape"])
        return src.block(i, i + 1, m["encoding"], m.get("quality", 90)).record(0).tobytes()
    idx = ds.index
    with open(ds.path(idx.file[i]), "rb") as f:
        f.seek(int(idx.offset[i]))
        return f.read(int(idx.length[i]))


def fail(msg):
    raise AssertionError(f"rank {MPI.COMM_WORLD.rank}: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", required=True)
    ap.add_argument("--readers", default="naive,coordinated,memory")
    ap.add_argument("--shuffles", default="none,chunk,global")
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--drop-last", choices=["yes", "no", "both"], default="both")
    ap.add_argument("--early-stop", type=int, default=0,
                    help="also stop every reader after this many batches, then read on")
    ap.add_argument("--preload", action="store_true",
                    help="tell the readers the next plan before each epoch (reader.preload)")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    variants = [parse_variant(v) for v in a.readers.split(",")]
    drops = {"yes": [True], "no": [False], "both": [True, False]}[a.drop_last]
    checks = 0
    for root in a.data:
        ds = open_dataset(root, comm)
        src = {}  # record id -> bytes (read lazily, plain file reads)
        readers = [(f"{n}{opts}", make_reader(n, ds, comm, **opts)) for n, opts in variants]
        for shuffle in a.shuffles.split(","):
            for drop in drops:
                for epoch in range(a.epochs):
                    kw = dict(epoch=epoch, seed=a.seed, shuffle=shuffle, drop_last=drop,
                              block=4, window=16)
                    plan = make_plan(ds.records, comm.size, comm.rank, a.batch, **kw)
                    nxt = make_plan(ds.records, comm.size, comm.rank, a.batch,
                                    **dict(kw, epoch=(epoch + 1) % a.epochs))
                    ref = None
                    for label, r in readers:
                        if a.preload:
                            r.preload(nxt)
                        h = hashlib.sha256()
                        got_ids = []
                        for b in r.epoch(plan):
                            if not np.array_equal(b.ids, plan.step(b.step)):
                                fail(f"{label} step {b.step}: ids differ from the plan")
                            if len(b.offsets) != len(b.ids) + 1 or b.offsets[0] != 0:
                                fail(f"{label}: bad offsets")
                            if not np.array_equal(b.labels, ds.index.label[b.ids]):
                                fail(f"{label}: labels differ from the index")
                            for k, i in enumerate(b.ids.tolist()):
                                if i not in src:
                                    src[i] = source_bytes(ds, i)
                                if b.record(k).tobytes() != src[i]:
                                    fail(f"{label} {os.path.basename(root)} {shuffle} "
                                         f"epoch {epoch}: record {i} bytes differ")
                            h.update(b.ids.tobytes())
                            h.update(b.labels.tobytes())
                            h.update(b.data.tobytes())
                            got_ids.append(b.ids.copy())
                            checks += 1
                        d = h.hexdigest()
                        if ref is None:
                            ref = d
                        elif d != ref:
                            fail(f"{label} {shuffle} epoch {epoch}: sequence differs "
                                 f"from {readers[0][0]}")
                        ids = np.concatenate(got_ids) if got_ids else np.zeros(0, np.int64)
                        if not np.array_equal(ids, plan.ids):
                            fail(f"{label}: delivered ids differ from the plan")
                        every = comm.gather(ids, root=0)
                        if comm.rank == 0:
                            allids = np.concatenate(every)
                            order = epoch_order(ds.records, epoch, a.seed, shuffle, 4, 16)
                            if drop:
                                full = (ds.records // (comm.size * a.batch)) * comm.size * a.batch
                                want = np.sort(order[:full])
                                if not np.array_equal(np.sort(allids), want):
                                    fail(f"{label} {shuffle} epoch {epoch}: not every "
                                         f"record of the epoch exactly once")
                            else:
                                if set(allids.tolist()) != set(range(ds.records)):
                                    fail(f"{label} {shuffle}: a record is missing")
                                if len(allids) - ds.records != (-ds.records) % comm.size:
                                    fail(f"{label} {shuffle}: wrong padding")
                    digests = comm.gather(ref, root=0)
                    if comm.rank == 0:
                        print(f"DIGEST {os.path.basename(root)} {shuffle} {int(drop)} {epoch} "
                              f"{hashlib.sha256(''.join(digests).encode()).hexdigest()}")
                    if a.early_stop:
                        for label, r in readers:
                            if a.preload:
                                r.preload(plan)
                            it = r.epoch(plan)
                            for _, b in zip(range(a.early_stop), it):
                                pass
                            it.close()
                            n = sum(1 for _ in r.epoch(plan))
                            if n != plan.steps:
                                fail(f"{label}: after an early stop, {n} of {plan.steps} "
                                     f"batches")
        for label, r in readers:
            st = r.stats
            if st.records and st.bytes <= 0:
                fail(f"{label}: no bytes counted")
            r.close()
    total = comm.reduce(checks, root=0)
    if comm.rank == 0:
        print(f"OK {total} checks", flush=True)


if __name__ == "__main__":
    sys.exit(guard(main, prog="check_readers"))
