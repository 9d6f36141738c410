"""Cold reads through the single-machine GlusterFS testbed against the same file on local disk.

    scripts/pfs-local.sh start            # root; then
    python benchmarks/bench_pfs.py [--delays 0 500] [--repeats 3] [--size-mib 256]

A ``--size-mib`` file is written through the mount; the brick that holds it has the same
bytes in a plain file on the local disk, which is the local reference. For each repeat and
each per-request delay (``scripts/pfs-local.sh delay N``, interleaved: 0, 500, 0, 500, ...)
four cold reads, each in a fresh process after ``sync; echo 3 > /proc/sys/vm/drop_caches``
(which evicts both the FUSE client's and the brick's pages; the client's own caches are off):
sequential 8 MiB reads into a page-aligned buffer, through the mount and of the brick's
file, and ``--random`` 4 KiB preads at random page offsets (``POSIX_FADV_RANDOM``: no
readahead), through the mount and of the brick's file. Prints the median (min-max) per
delay. The VM's disk sits on the host's cache: local "cold" figures are upper bounds.

Measured here (2-core VM, other jobs running: load 4-5; median (min-max) of 5)::

    delay us   seq MB/s pfs   seq MB/s local   4K reads/s pfs   4K reads/s local
           0   366 (119-456)  1304 (537-2406)  1654 (1263-3660)  9961 (5542-16082)
         500   198 (76-237)   1756 (1122-2447)  787 (454-951)   10408 (3734-16720)

On a quiet moment of the same VM, before: 500-870 MB/s and ~5,000 reads/s without delay,
180-220 MB/s and ~1,350 reads/s with 500 us. A 4 KiB read through the mount is one READ at
a brick (~0.6 ms round trip here); the delay adds its 500 us and more (the sleep overshoots
on a busy machine). Checked with ``gluster volume profile``: a cold read of the file moves
exactly its size from the bricks, a warm re-read nothing.
"""

import argparse
import mmap
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "scripts", "pfs-local.sh")


def seq_mb_s(path):
    buf = mmap.mmap(-1, 8 << 20)               # page-aligned (BENCHMARKING.md)
    fd = os.open(path, os.O_RDONLY)
    t, n = time.perf_counter(), 0
    while True:
        k = os.readv(fd, [buf])
        if not k:
            break
        n += k
    os.close(fd)
    return n / (time.perf_counter() - t) / 1e6


def rand_per_s(path, n, seed=0):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    pages = os.fstat(fd).st_size // 4096
    rng = random.Random(seed)
    offs = [rng.randrange(pages) * 4096 for _ in range(n)]
    t = time.perf_counter()
    for o in offs:
        os.pread(fd, 4096, o)
    rate = n / (time.perf_counter() - t)
    os.close(fd)
    return rate


def cold(kind, path, n=0, seed=0):
    """Run one probe in a fresh process after dropping the page cache."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    p = subprocess.run([sys.executable, __file__, "--probe", kind, path, str(n), str(seed)],
                       capture_output=True, text=True, check=True)
    return float(p.stdout)


def state():
    with open("/run/hpcio-pfs/state") as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delays", type=int, nargs="+", default=[0, 500], help="microseconds")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--random", type=int, default=2000, help="4 KiB preads per probe")
    ap.add_argument("--probe", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.probe:
        kind, path, n, seed = a.probe
        print(seq_mb_s(path) if kind == "seq" else rand_per_s(path, int(n), int(seed)))
        return
    st = state()
    name = "bench-pfs-%dm" % a.size_mib
    path = os.path.join(st["MOUNT"], name)
    if not os.path.exists(path) or os.path.getsize(path) != a.size_mib << 20:
        with open(path, "wb") as f:
            for _ in range(a.size_mib):
                f.write(os.urandom(1 << 20))
    local = next(p for p in (os.path.join(st["DATA"], b, name) for b in ("brick0", "brick1"))
                 if os.path.exists(p))
    res = {}
    print("load before:", open("/proc/loadavg").read().split()[:3])
    for r in range(a.repeats):
        for d in a.delays:
            subprocess.run([SCRIPT, "delay", str(d)], check=True, capture_output=True)
            row = res.setdefault(d, {k: [] for k in ("seq_pfs", "seq_local", "rand_pfs",
                                                     "rand_local")})
            row["seq_pfs"].append(cold("seq", path))
            row["seq_local"].append(cold("seq", local))
            row["rand_pfs"].append(cold("rand", path, a.random, r))
            row["rand_local"].append(cold("rand", local, a.random, r))
            print(f"repeat {r} delay {d} us:", {k: round(v[-1]) for k, v in row.items()},
                  flush=True)
    print("load after:", open("/proc/loadavg").read().split()[:3])
    print(f"\n{a.size_mib} MiB file, cold, median (min-max) of {a.repeats}")
    print(f"{'delay us':>8}  {'seq MB/s pfs':>18}  {'seq MB/s local':>18}  "
          f"{'4K reads/s pfs':>18}  {'4K reads/s local':>18}")
    for d, row in res.items():
        cells = [f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})" for v in row.values()]
        print(f"{d:>8}  " + "  ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
