"""Run under a launcher (or alone): re-execute traced by Darshan, as ``hpcio.train --darshan``
does, then read DATA: a file through MPI-IO, each rank its own slice with ``Read_at``, or a
folder's files with plain reads, rank r the files r, r+size, ...; every rank writes what it
read to OUT/rank-<r>.json for tests/test_darshan.py, rank 0's log goes to OUT/darshan/.

    darshan_read.py LIB CONFIG DATA OUT
"""

import json
import os
import sys

from hpcio.errors import guard
from hpcio.measure import darshan

CHUNK = 1 << 20


def read_mpiio(comm, path):
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    f = MPI.File.Open(comm, path, MPI.MODE_RDONLY)
    total = f.Get_size()
    start, end = total * rank // size, total * (rank + 1) // size
    buf = bytearray(CHUNK)
    got = 0
    for off in range(start, end, CHUNK):
        status = MPI.Status()
        f.Read_at(off, memoryview(buf)[:min(CHUNK, end - off)], status)
        got += status.Get_count(MPI.BYTE)
    f.Close()
    return got


def read_files(folder, rank, size):
    got = 0
    for name in sorted(os.listdir(folder))[rank::size]:
        with open(os.path.join(folder, name), "rb") as f:
            got += len(f.read())
    return got


def main():
    lib, config, data, out = sys.argv[1:5]
    os.environ.setdefault("PID_BEFORE_EXEC", str(os.getpid()))  # survives the exec
    darshan.reexec_traced(lib, config_path=config, log_dir=os.path.join(out, "fallback"))
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        darshan.set_logfile(darshan.log_path(out, "read"))
    got = read_files(data, rank, size) if os.path.isdir(data) else read_mpiio(comm, data)
    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if "/lib" in line}
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as fo:
        json.dump({"rank": rank, "size": size, "read": got, "pid": os.getpid(),
                   "pid_before_exec": int(os.environ["PID_BEFORE_EXEC"]),
                   "libmpi": sorted(p for p in mapped if "/libmpi" in p),
                   "libdarshan": sorted(p for p in mapped if "/libdarshan" in p)}, fo)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="darshan_read"))
