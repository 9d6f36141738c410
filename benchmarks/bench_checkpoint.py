"""Checkpoints on local disk: the naive writers (torch.distributed.checkpoint, torch.save per
rank) against the coordinated one (shared file, MPI-IO), at 2 and 4 processes, beside the
disk's own sequential write and read bandwidth measured in the same run.

    python benchmarks/bench_checkpoint.py [--dir /var/tmp/hpcio-ckpt] [--ranks 2 4]
        [--scale 0.01] [--checkpoints 3] [--repeat 2] [--out bench-checkpoint.json]

Per rank count, ``repeat`` rounds; each round first measures the disk (one process writes
as many bytes as a checkpoint holds in 8 MiB writes and fsyncs: bytes / (writes + fsync);
then evicts the file and reads it back: the "dd" rows), then runs ``python -m
hpcio.checkpoint run`` once per writer (writers in a rotated order from round to round;
``coordinated-fpr`` is the coordinated writer with a file per rank, ``--files`` = ranks),
``--checkpoints`` checkpoints each, MLPerf's sequence (write all, evict, read all; each
figure the mean of the per-checkpoint rates, GiB/s = checkpoint bytes over the slowest
rank's time). A writer's figure is the median over rounds; ``dd`` likewise. Printed: the
table, then coordinated over DCP (the target: >= 1.3 at 4 processes) and coordinated over
the disk's sequential write (target: >= 0.8), with the 1-minute load average before and
after each run (this machine's 2 cores are shared: a loaded machine makes every figure
noisy). Checkpoints are removed after each run.

DLIO 2.0's own checkpoints beside hpcio's writers, on the same bytes per rank:
``benchmarks/bench_checkpoint_dlio.py``.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from hpcio.checkpoint.layout import GIB, Layout, load_model  # noqa: E402
from hpcio.fsutil import evict  # noqa: E402
from hpcio.measure.probes import loadavg  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402

#: the rows: name -> (--writer, more flags given the rank count); "coordinated-fpr" is the
#: coordinated writer with a file per rank (--files = ranks), its better setting on a local
#: disk (docs/checkpoints.md: ext4 serialises the writers of one file)
WRITERS = {"dcp": ("dcp", lambda n: []), "torch_save": ("torch_save", lambda n: []),
           "coordinated": ("coordinated", lambda n: []),
           "coordinated-fpr": ("coordinated", lambda n: ["--files", str(n)])}
BLOCK = 8 << 20


def disk(path, nbytes):
    """(write GiB/s, read GiB/s) of one process: ``nbytes`` in 8 MiB writes + fsync; then
    the file evicted from the page cache and read back in 8 MiB reads."""
    buf = os.urandom(BLOCK)
    n = -(-nbytes // BLOCK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    try:
        for _ in range(n):
            os.write(fd, buf)
        os.fsync(fd)
    finally:
        os.close(fd)
    w = n * BLOCK / GIB / (time.perf_counter() - t0)
    evict(path)
    fd = os.open(path, os.O_RDONLY)
    t0 = time.perf_counter()
    try:
        while os.read(fd, BLOCK):
            pass
    finally:
        os.close(fd)
    r = n * BLOCK / GIB / (time.perf_counter() - t0)
    os.unlink(path)
    return w, r


def one(a, ranks, writer):
    """One ``hpcio.checkpoint run`` of row ``writer``: its metric, and the fraction of the
    files left in the page cache after the eviction."""
    flag, more = WRITERS[writer]
    d = os.path.join(a.dir, f"ckpt-{writer}-n{ranks}")
    out = os.path.join(a.dir, f"run-{writer}-n{ranks}")
    for p in (d, out):
        shutil.rmtree(p, ignore_errors=True)
    cmd = [launcher(), "-n", str(ranks), sys.executable, "-m", "hpcio.checkpoint", "run",
           "--model", a.model, "--scale", str(a.scale), "--writer", flag, "--dir", d,
           "--out", out, "--checkpoints", str(a.checkpoints), *more(ranks)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        sys.exit(f"bench_checkpoint: {writer} at {ranks} ranks failed: "
                 f"{(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    nodes = (s.get("cache") or {}).get("nodes") or [{}]
    return dict(s["metric"], resident=max(n.get("resident_after", 0) for n in nodes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/var/tmp/hpcio-ckpt",
                    help="a directory on the disk to measure (made; emptied of what this "
                         "script writes)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--model", default="llama3_8b")
    ap.add_argument("--scale", type=float, default=0.01,
                    help="tensor-size factor: 0.01 is 1.05 GiB per llama3_8b checkpoint")
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", help="write the figures as JSON here")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rows = {}
    for ranks in a.ranks:
        size = Layout(load_model(a.model), ranks, a.scale).total_bytes
        for r in range(a.repeat):
            l0 = loadavg()
            w, rd = disk(os.path.join(a.dir, "dd.bin"), size)
            rows.setdefault((ranks, "dd"), []).append({"write": w, "read": rd, "load": l0})
            print(f"  n={ranks} round {r + 1} dd              write {w:.3f} read {rd:.3f} GiB/s "
                  f"(load {l0:.2f})", flush=True)
            names = list(WRITERS)
            order = names[r % len(names):] + names[:r % len(names)]
            for writer in order:
                l0 = loadavg()
                m = one(a, ranks, writer)
                rows.setdefault((ranks, writer), []).append({
                    "write": m["save_checkpoint_io_mean_GB_per_second"],
                    "read": m["load_checkpoint_io_mean_GB_per_second"],
                    "resident_before_read": m["resident"], "load": l0,
                    "load_after": loadavg()})
                last = rows[(ranks, writer)][-1]
                print(f"  n={ranks} round {r + 1} {writer:<15} write {last['write']:.3f}"
                      f" read {last['read']:.3f} GiB/s  (load {l0:.2f} -> "
                      f"{loadavg():.2f}; {100 * m['resident']:.1f}% of the files in the page "
                      f"cache after eviction)", flush=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in ("write", "read")}
           for k, v in rows.items()}
    print(f"\n{a.model} scale {a.scale:g}: {size / GIB:.3f} GiB per checkpoint, "
          f"{a.checkpoints} checkpoints per run, median of {a.repeat} rounds (GiB/s)")
    print(f"{'ranks':>5} {'writer':<15} {'write':>8} {'read':>8}")
    for (ranks, writer), m in sorted(med.items()):
        print(f"{ranks:>5} {writer:<15} {m['write']:>8.3f} {m['read']:>8.3f}")
    for ranks in a.ranks:
        d, s = med[(ranks, "dcp")], med[(ranks, "dd")]
        for name in ("coordinated", "coordinated-fpr"):
            c = med[(ranks, name)]
            print(f"n={ranks}: {name} / dcp: write {c['write'] / d['write']:.2f}x, read "
                  f"{c['read'] / d['read']:.2f}x (target 1.3x at 4); {name} / disk: write "
                  f"{c['write'] / s['write']:.2f}, read {c['read'] / s['read']:.2f} (target 0.8)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": a.model, "scale": a.scale, "checkpoints": a.checkpoints,
                       "rounds": {f"{k[0]}:{k[1]}": v for k, v in rows.items()},
                       "median": {f"{k[0]}:{k[1]}": v for k, v in med.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
