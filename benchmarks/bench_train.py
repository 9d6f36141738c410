"""Accelerator utilisation of emulated training against the storage's own limit.

    python benchmarks/bench_train.py [--dir DIR] [--records 4096] [--format lmdb]
                                     [--fractions 0.5 0.8] [--repeats 3]

The DLIO / MLPerf Storage question: with compute that asks for a given share of what the
storage can deliver, does the reader keep the (emulated) accelerators busy? Steps:

1. A synthetic dataset of raw ImageNet-sized records (256x256x3, 192 KiB) in
   ``--format`` (default LMDB, the Caffe case). The emulated step gets the bytes as
   read, as in DLIO (``--preprocess off``, the emulate default): no decode competes with
   the readers for the 2 cores.
2. **Storage bandwidth** ``BW``: a cold sequential read of the dataset files (page cache
   evicted with fadvise DONTNEED first; 8 MiB ``readv`` into a page-aligned buffer),
   median of ``--repeats``. This is the ceiling a sequential reader could reach here.
3. For each fraction ``f``: compute time per step ``t = ranks x batch x record bytes /
   (f x BW)``, so the ranks together *demand* ``f x BW`` when never stalled.
4. ``mpiexec -n 2 python -m hpcio.train --model emulate --compute-time t --cache cold``
   with the naive and the coordinated reader, interleaved (naive, coordinated, naive, ...),
   ``--repeats`` times; each run's AU, MiB/s and stall come from its summary.json
   (definitions in :mod:`hpcio.metrics`: AU = compute / wall, first step of each epoch
   excluded, mean over ranks).

Reported per (fraction, reader): median AU % with the min-max spread, median MiB/s and
stall %. Target: AU >= 95% for the coordinated reader at both fractions. The VM's disk
sits on the host's page cache, so "cold" bandwidths are upper bounds (BENCHMARKING.md).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcio.cli import ArgumentParser  # noqa: E402
from hpcio.dataset import is_dataset, open_dataset  # noqa: E402
from hpcio.errors import HpcioError, guard  # noqa: E402
from hpcio.fsutil import aligned_empty, evict  # noqa: E402

PIECE = 8 << 20


def sequential_read(paths, cold=True):
    """Seconds and bytes of one sequential read of ``paths`` (evicted first if cold)."""
    if cold:
        for p in paths:
            evict(p)
    buf = aligned_empty(PIECE)
    view = memoryview(buf)
    total = 0
    t = time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            while True:
                n = os.readv(fd, [view])
                if n <= 0:
                    break
                total += n
        finally:
            os.close(fd)
    return time.perf_counter() - t, total


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return os.environ.get("MPIEXEC") or (here if os.path.exists(here) else "mpiexec")


def train(a, ds, reader, compute, out):
    cmd = [mpiexec(), "-n", str(a.ranks), sys.executable, "-m", "hpcio.train",
           "--data", ds.root, "--model", "emulate", "--compute-time", f"{compute:.6f}",
           "--reader", reader, "--cache", "cold", "--batch", str(a.batch),
           "--epochs", str(a.epochs), "--shuffle", a.shuffle, "--out", out,
           "--progress", "off"] + a.extra
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    l0 = loadavg()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode:
        raise HpcioError(f"{reader} run failed ({p.returncode}): "
                         f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    m = s["metrics"]
    return {"reader": reader, "au": m["au_percent"], "mib_s": m["mib_per_s"],
            "samples_s": m["samples_per_s"], "stall": m["stall_percent"],
            "fetch": m["fetch_percent"], "prep": m["prep_percent"],
            "disk_mib": s["disk_read_bytes"] / 2 ** 20, "train_s": s["train_s"],
            "load_before": l0, "load_after": loadavg(), "run": out}


def _med(xs):
    return statistics.median(xs), min(xs), max(xs)


def main(argv=None):
    p = ArgumentParser(prog="python benchmarks/bench_train.py",
                       description="AU of emulated training at 50% and 80% of the "
                                   "measured storage bandwidth, naive vs coordinated.")
    p.add_argument("--dir", default=os.path.join(ROOT, "runs", "bench-train"),
                   help="dataset and run directories go here")
    p.add_argument("--format", default="lmdb", choices=("lmdb", "hdf5", "images", "packed"))
    p.add_argument("--records", type=int, default=4096, help="records (192 KiB each)")
    p.add_argument("--batch", type=int, default=64, help="records per rank per step")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--shuffle", default="global", choices=("none", "global", "chunk"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.5, 0.8])
    p.add_argument("--readers", nargs="+", default=["naive", "coordinated"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None, help="write all figures here too")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="further hpcio.train flags for every run (e.g. --hint k=v)")
    a = p.parse_args(argv)

    from hpcio.datagen import generate
    os.makedirs(a.dir, exist_ok=True)
    data = os.path.join(a.dir, f"imagenet-{a.format}-raw-{a.records}")
    if not is_dataset(data):
        print(f"generating {data} ...", flush=True)
        generate(data, preset="imagenet", records=a.records, format=a.format,
                 encoding="raw", shards=2, seed=0, force=True)
    ds = open_dataset(data)
    rec = ds.nbytes() / ds.records

    bw = []
    for _ in range(a.repeats):
        t, n = sequential_read(ds.paths, cold=True)
        bw.append(n / t)
    warm_t, warm_n = sequential_read(ds.paths, cold=False)
    BW = statistics.median(bw)
    print(f"dataset: {ds.records} records x {rec / 1024:.0f} KiB = "
          f"{ds.nbytes() / 2 ** 20:.0f} MiB ({a.format}); files {sum(os.path.getsize(x) for x in ds.paths) / 2 ** 20:.0f} MiB")
    print(f"cold sequential read: {BW / 2 ** 20:.0f} MiB/s (median of {len(bw)}: "
          f"{', '.join(f'{b / 2 ** 20:.0f}' for b in bw)}); warm {warm_n / warm_t / 2 ** 20:.0f} MiB/s")

    step_bytes = a.ranks * a.batch * rec
    compute = {f: step_bytes / (f * BW) for f in a.fractions}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = []
    for rep in range(a.repeats):
        for f in a.fractions:
            readers = a.readers if rep % 2 == 0 else list(reversed(a.readers))
            for r in readers:
                out = os.path.join(a.dir, f"{stamp}-f{f}-{r}-{rep}")
                res = train(a, ds, r, compute[f], out)
                res.update(fraction=f, compute_s=compute[f], repeat=rep)
                results.append(res)
                print(f"  f={f:.2f} {r:<12} AU {res['au']:5.1f}%  {res['mib_s']:7.1f} MiB/s"
                      f"  stall {res['stall']:5.1f}%  load {res['load_before']:.1f}"
                      f"->{res['load_after']:.1f}", flush=True)

    lines = ["", f"emulated training, {a.ranks} ranks, batch {a.batch}/rank, "
             f"{a.epochs} epochs, cold cache before each, {a.format} raw 192 KiB records, "
             f"{a.shuffle} shuffle; storage BW (cold sequential) {BW / 2 ** 20:.0f} MiB/s",
             f"{'demand':>7} {'compute/step':>12} {'reader':<12} {'AU % (min-max)':>20} "
             f"{'MiB/s':>8} {'stall %':>8} {'fetch %':>8}"]
    table = []
    for f in a.fractions:
        for r in a.readers:
            rs = [x for x in results if x["fraction"] == f and x["reader"] == r]
            au, lo, hi = _med([x["au"] for x in rs])
            row = {"fraction": f, "compute_s": compute[f], "reader": r, "au_median": au,
                   "au_min": lo, "au_max": hi,
                   "mib_s_median": statistics.median(x["mib_s"] for x in rs),
                   "stall_median": statistics.median(x["stall"] for x in rs),
                   "fetch_median": statistics.median(x["fetch"] for x in rs)}
            table.append(row)
            lines.append(f"{f * 100:6.0f}% {compute[f] * 1e3:9.1f} ms {r:<12} "
                         f"{au:8.1f} ({lo:.1f}-{hi:.1f}) {row['mib_s_median']:8.1f} "
                         f"{row['stall_median']:8.1f} {row['fetch_median']:8.1f}")
    coord = [t for t in table if t["reader"] == "coordinated"]
    if coord:
        ok = all(t["au_median"] >= 95 for t in coord)
        lines.append(f"target AU >= 95% for coordinated at every demand: "
                     f"{'met' if ok else 'NOT met'}")
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"bandwidth_cold_bytes_s": bw, "bandwidth_bytes_s": BW,
                       "record_bytes": rec, "runs": results, "table": table}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="bench_train"))
