"""Synchronous steps across nodes: each rank's own wait for its batch against the straggler
wait (the time it then waits in the gradient exchange for the slowest rank), naive against
coordinated, at 1 to 8 ranks over 1 to 4 nodes of the virtual cluster.

    python benchmarks/bench_sync.py [--points 1x1,2x1,2x2,4x2,4x4,8x4] [--repeat 3]
        [--delay-us 500] [--compute-time 0.1] [--out sweeps/sync]

Needs root: starts the GlusterFS testbed with ``--delay-us`` per request
(``scripts/pfs-local.sh``; or sets the delay of the one that is up) and a virtual cluster of
4 nodes on it (``scripts/cluster-local.sh``: each node its own FUSE client and page cache,
Slurm across them; or uses the one that is up), writes an ImageNet-like LMDB on the volume
(``--records`` JPEGs, 2 shards; kept for the next time), and runs every point ``PxN`` (P
ranks over N nodes, ``srun -N N -n P``) with each reader, interleaved (point, reader,
repeat), each run ``--model emulate --exchange-model resnet50`` (an allreduce of ResNet-50's
102 MB of gradients over gloo every step; ``--exchange barrier``: a zero-byte barrier, as
DLIO's), ``--compute-time`` per step, cold on every node (``--cache cold --drop-caches``).

Prints per point and reader the median (min-max over repeats) of: own wait (stall %: fetch,
preprocessing and the rest of the wait for the rank's own batch), straggler wait %, exchange
% (the transfer after the slowest rank arrived), AU % and samples/s. The nodes share this
machine's cores: the exchange's cost grows with the ranks on them, which is this machine's,
not a cluster's. Writes ``sync.json`` into ``--out``.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from hpcio.measure.rundir import RunDir  # noqa: E402
from hpcio.sweep import error_line, keep_stderr  # noqa: E402
PFS = os.path.join(ROOT, "scripts", "pfs-local.sh")
CLUSTER = os.path.join(ROOT, "scripts", "cluster-local.sh")
FIGURES = ("stall_percent", "straggler_wait_percent", "exchange_percent", "au_percent",
           "samples_per_s")


def sh(*cmd, check=True, env=None):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if check and p.returncode:
        sys.exit(f"bench_sync: {' '.join(map(str, cmd[:3]))}: "
                 f"{(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return p


def platform(mount, delay_us, nodes):
    """The testbed at ``delay_us`` and a cluster of ``nodes``: started, or the ones up.
    Returns (what to stop at the end, the environment srun needs)."""
    started = []
    if sh(PFS, "status", check=False).returncode == 0:
        sh(PFS, "delay", delay_us)
    else:
        sh(PFS, "start", "--mount", mount, "--delay-us", delay_us)
        started.append(PFS)
    up = sh(CLUSTER, "status", check=False)
    if up.returncode != 0 or len(up.stdout.splitlines()) < nodes:
        if up.returncode == 0:
            sys.exit(f"bench_sync: a cluster of {len(up.stdout.splitlines())} node(s) is up; "
                     f"{nodes} are needed (scripts/cluster-local.sh stop)")
        sh(CLUSTER, "start", "--nodes", nodes)
        started.insert(0, CLUSTER)
    env = dict(os.environ, PYTHONPATH=ROOT, UCX_TLS="tcp,self", UCX_NET_DEVICES="eth0",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for word in sh(CLUSTER, "env").stdout.split():
        if "=" in word and not word.startswith("export"):
            k, v = word.split("=", 1)
            env[k] = v
    return started, env


def dataset(mount, records):
    data = os.path.join(mount, f"inet-{records}.lmdb")
    if not os.path.exists(os.path.join(data, "hpcio.json")):
        sh(sys.executable, "-m", "hpcio.datagen", "generate", data, "--preset", "imagenet",
           "--records", records, "--format", "lmdb", "--shards", 2)
    return data


def run(a, env, data, reader, ranks, nodes, out):
    """One training run; its summary's metrics, or None (with the error's last line)."""
    cmd = ["srun", "-N", nodes, "-n", ranks, f"--ntasks-per-node={math.ceil(ranks / nodes)}",
           "--mpi=pmi2", "--kill-on-bad-exit=1", sys.executable, "-m", "hpcio.train",
           "--data", data, "--reader", reader, "--model", "emulate",
           *(["--exchange-bytes", "0"] if a.exchange == "barrier"
             else ["--exchange-model", a.exchange]), "--compute-time", a.compute_time,
           "--batch", a.batch, "--steps", a.steps, "--cache", "cold", "--drop-caches",
           "--out", out]
    p = sh(*cmd, check=False, env=env)
    if p.returncode:
        kept = keep_stderr(os.path.dirname(out), out, p.stderr)
        print(f"  {reader} {ranks}x{nodes}: failed: {error_line(p.stderr)} ({kept})",
              flush=True)
        return None
    return RunDir(out).summary()[0]["metrics"]


def med(xs):
    return statistics.median(xs), min(xs), max(xs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", default="1x1,2x1,2x2,4x2,4x4,8x4",
                    help="RANKSxNODES, comma-separated")
    ap.add_argument("--readers", default="naive,coordinated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--delay-us", type=int, default=500)
    ap.add_argument("--records", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--compute-time", type=float, default=0.1)
    ap.add_argument("--exchange", default="resnet50",
                    help="the gradients exchanged every step: a model's (--exchange-model) or "
                         "'barrier' (a zero-byte barrier, as DLIO's)")
    ap.add_argument("--mount", default="/mnt/pfs")
    ap.add_argument("--out", default="sweeps/sync")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench_sync: needs root (the GlusterFS testbed, the virtual cluster)")
    points = [tuple(int(x) for x in p.split("x")) for p in a.points.split(",")]
    if os.path.exists(a.out):
        sys.exit(f"bench_sync: --out {a.out} exists; name a new directory")
    started, env = platform(a.mount, a.delay_us, max(n for _, n in points))
    rows = {}
    try:
        data = dataset(a.mount, a.records)
        t = time.monotonic()
        for k in range(a.repeat):
            for ranks, nodes in points:
                for reader in a.readers.split(","):
                    out = os.path.join(a.out, f"{reader}-n{ranks}-N{nodes}-r{k}")
                    m = run(a, env, data, reader, ranks, nodes, out)
                    if m:
                        rows.setdefault((reader, ranks, nodes), []).append(
                            {f: m[f] for f in FIGURES})
            print(f"repeat {k + 1} of {a.repeat} done ({time.monotonic() - t:.0f} s)",
                  flush=True)
    finally:
        for script in started:
            sh(script, "stop", check=False)
    print(f"testbed: GlusterFS, {a.delay_us} us per request; ImageNet-like LMDB "
          f"({a.records} JPEGs); emulate, {a.compute_time} s compute, {a.exchange} exchange "
          f"over gloo; batch {a.batch}, {a.steps} steps, cold; median (min-max) of "
          f"{a.repeat}; load average {os.getloadavg()[0]:.1f}")
    head = ("reader", "ranks", "nodes", "own wait %", "straggler wait %", "exchange %",
            "AU %", "samples/s")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    table = []
    for (reader, ranks, nodes), figs in sorted(rows.items()):
        m = {f: med([x[f] for x in figs]) for f in FIGURES}
        table.append({"reader": reader, "ranks": ranks, "nodes": nodes, "repeats": len(figs),
                      **m})
        cells = [f"{m[f][0]:.1f} ({m[f][1]:.1f}-{m[f][2]:.1f})" if f != "samples_per_s"
                 else f"{m[f][0]:.0f} ({m[f][1]:.0f}-{m[f][2]:.0f})" for f in FIGURES]
        print(f"| {reader} | {ranks} | {nodes} | " + " | ".join(cells) + " |")
    missing = len(points) * len(a.readers.split(",")) * a.repeat - \
        sum(len(v) for v in rows.values())
    if missing:
        print(f"{missing} run(s) failed")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sync.json"), "w") as f:
        json.dump({"delay_us": a.delay_us, "compute_time": a.compute_time,
                   "records": a.records, "batch": a.batch, "steps": a.steps,
                   "rows": table}, f, indent=2)


if __name__ == "__main__":
    main()
