"""A barrier's time on the training thread while another thread of the same rank sits in
blocking MPI-IO reads, over MPI and over gloo: MPICH's global lock (MPI_THREAD_MULTIPLE)
makes the MPI barrier wait for the reads; gloo takes no MPI lock.

    mpiexec -n 2 python benchmarks/mpi_lock.py FILE   # FILE: 100 MB or more, page cache warm

Each barrier follows a 5 ms sleep (a step's compute); 200 of them, median and p90 per rank,
the mean over ranks.
"""

import os
import sys
import threading
import time

import numpy as np
import torch.distributed as td
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hpcio.train.dist import init_process_group, init_world  # noqa: E402

READ = 16 << 20


def reads_beside(fh, stop, took):
    """Blocking 16 MiB reads until ``stop``, 2 ms apart (a reader that waits for its
    consumer now and then; back to back, two ranks' copies would fill two cores, and the
    barrier would wait for a core, not for the lock)."""
    buf = np.empty(READ, np.uint8)
    size, off = fh.Get_size(), 0
    while not stop.is_set():
        t = time.perf_counter()
        fh.Read_at(off, buf)
        took.append(time.perf_counter() - t)
        off = (off + READ) % (size - READ)
        time.sleep(0.002)


def timed(comm, barrier, n=200):
    comm.Barrier()
    ts = []
    for _ in range(n):
        time.sleep(0.005)
        t = time.perf_counter()
        barrier()
        ts.append(time.perf_counter() - t)
    return np.median(ts), np.percentile(ts, 90)


def main(path):
    world = init_world()
    init_process_group(world, "gloo")
    comm = MPI.COMM_WORLD.Dup()
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_RDONLY)
    for via, barrier in (("mpi", comm.Barrier), ("gloo", td.barrier)):
        for beside in (False, True):
            stop, took = threading.Event(), []
            io = threading.Thread(target=reads_beside, args=(fh, stop, took), daemon=True)
            if beside:
                io.start()
                time.sleep(0.2)
            got = comm.gather(timed(comm, barrier) + (np.median(took) if took else 0.0,))
            stop.set()
            if beside:
                io.join()
            if world.rank == 0:
                med, p90, read = 1e3 * np.mean(got, axis=0)
                what = f"{READ >> 20} MiB MPI-IO reads beside ({read:.2f} ms each)" \
                    if beside else "nothing beside"
                print(f"{via:5s} barrier, {what:40s} median {med:6.3f} ms, p90 {p90:6.3f} ms")
    fh.Close()
    td.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
