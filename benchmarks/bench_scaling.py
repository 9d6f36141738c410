"""Weak scaling on the GlusterFS testbed: naive (``get`` and Caffe's ``cursor``) against
coordinated reads, at 1, 2, 4 and 8 ranks, with the testbed's own sequential read measured in
the same run.

    python benchmarks/bench_scaling.py [--ranks 1,2,4,8] [--repeat 3] [--delay-us 500]
        [--darshan .darshan/lib/libdarshan.so] [--out sweeps/scaling]

Needs root (``scripts/pfs-local.sh``). Starts the testbed with ``--delay-us`` (or uses the
one that is up), writes an ImageNet-like LMDB on it (``--records`` JPEG records, 2 shards),
reads it once sequentially cold (``dd bs=8M``-like, the testbed's limit), then runs three
:mod:`hpcio.sweep` sweeps into ``--out``: ``naive,coordinated`` with global and none
shuffle, and ``naive`` with ``access=cursor`` (shuffle none: the cursor walks key order).
Every run: ``--model emulate --compute-time 0.02``, ``--batch`` records per rank per step
(weak scaling: the data each rank reads per step is fixed), ``--steps`` steps, cold cache with
``drop_caches`` (the FUSE client's and the bricks' pages). Ranks beyond the cores are
allowed: compute is emulated (sleeps), and the I/O is what is measured.

Prints per point the median (min-max over repeats) of stall % of the step and samples/s,
and the two targets: coordinated stall <= 5% everywhere; coordinated >= 2x naive samples/s
at the largest rank count. Writes ``scaling.json`` into ``--out``. With ``--darshan`` every
run is traced (its log in its run directory) for ``python -m hpcio.analyze``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PFS = os.path.join(ROOT, "scripts", "pfs-local.sh")


def sh(*cmd, check=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if check and p.returncode:
        sys.exit(f"bench_scaling: {' '.join(map(str, cmd[:3]))}: "
                 f"{(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return p


def testbed(mount, delay_us):
    """Start the testbed (or reuse the running one at ``delay_us``)."""
    if sh(PFS, "status", check=False).returncode == 0:
        sh(PFS, "delay", delay_us)
        return False
    sh(PFS, "start", "--mount", mount, "--delay-us", delay_us)
    return True


def seq_read_mb_s(paths):
    """One cold sequential stream over the files in 8 MiB reads (dd bs=8M)."""
    sh("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches")
    t, n = time.perf_counter(), 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(8 << 20)
                if not b:
                    break
                n += len(b)
    return n / (time.perf_counter() - t) / 1e6


def sweep(out, data, readers, ranks, repeat, train, darshan, option=None):
    cmd = [sys.executable, "-m", "hpcio.sweep", "--data", data, "--ranks", ranks,
           "--reader", readers, "--repeat", repeat, "--out", out]
    if option:
        cmd += ["--reader-option", option]
    if darshan:
        cmd += ["--darshan", darshan]
    subprocess.run([str(c) for c in cmd + ["--"] + train], check=False)
    with open(os.path.join(out, "sweep.json")) as f:
        return json.load(f)["runs"]


def med(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, None
    return statistics.median(xs), min(xs), max(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--delay-us", type=int, default=500)
    ap.add_argument("--records", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--compute-time", type=float, default=0.02)
    ap.add_argument("--mount", default="/mnt/pfs")
    ap.add_argument("--darshan", default=None, help="libdarshan.so: trace every run")
    ap.add_argument("--out", default="sweeps/scaling")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_scaling: needs root (the GlusterFS testbed, drop_caches)")
    started = testbed(a.mount, a.delay_us)
    try:
        data = os.path.join(a.mount, f"inet-{a.records}.lmdb")
        if not os.path.exists(os.path.join(data, "hpcio.json")):
            sh(sys.executable, "-m", "hpcio.datagen", "generate", data, "--preset",
               "imagenet", "--records", a.records, "--format", "lmdb", "--shards", 2)
        with open(os.path.join(data, "hpcio.json")) as f:
            shards = [os.path.join(data, s["path"], "data.mdb")
                      for s in json.load(f)["shards"]]
        seq = [seq_read_mb_s(shards) for _ in range(3)]
        train = ["--model", "emulate", "--compute-time", str(a.compute_time), "--batch",
                 str(a.batch), "--steps", str(a.steps), "--cache", "cold", "--drop-caches"]
        runs = []
        for shuffle in ("global", "none"):
            out = os.path.join(a.out, f"get-{shuffle}")
            for r in sweep(out, data, "naive,coordinated", a.ranks, a.repeat,
                           train + ["--shuffle", shuffle], a.darshan):
                runs.append(dict(r, shuffle=shuffle, access="get"))
        out = os.path.join(a.out, "cursor-none")
        for r in sweep(out, data, "naive", a.ranks, a.repeat, train + ["--shuffle", "none"],
                       a.darshan, option="access=cursor"):
            runs.append(dict(r, shuffle="none", access="cursor"))
    finally:
        if started:
            sh(PFS, "stop", check=False)
    rows = {}
    for r in runs:
        if r["status"] != "done":
            continue
        p = r["point"]
        name = p["reader"] + (" cursor" if r["access"] == "cursor" else "")
        rows.setdefault((r["shuffle"], name, p["ranks"]), []).append(r["figures"])
    seq_mb = statistics.median(seq)
    print(f"testbed: GlusterFS, {a.delay_us} us per request; cold sequential read "
          f"{seq_mb:.0f} MB/s (median of 3)")
    print(f"{'shuffle':<7} {'reader':<17} {'ranks':>5} {'stall % [min..max]':>22} "
          f"{'samples/s [min..max]':>24} {'MiB/s':>7}")
    table = []
    for (shuffle, name, ranks), figs in sorted(rows.items()):
        st = med([f["stall_percent"] for f in figs])
        sp = med([f["samples_per_s"] for f in figs])
        mb = med([f["mib_per_s"] for f in figs])[0]
        table.append({"shuffle": shuffle, "reader": name, "ranks": ranks, "stall_percent": st,
                      "samples_per_s": sp, "mib_per_s": mb, "repeats": len(figs)})
        print(f"{shuffle:<7} {name:<17} {ranks:>5} {st[0]:>7.1f} [{st[1]:.1f}..{st[2]:.1f}]"
              f"{'':>3} {sp[0]:>9.0f} [{sp[1]:.0f}..{sp[2]:.0f}] {mb:>7.1f}")
    top = max(int(x) for x in a.ranks.split(","))
    worst = max((t["stall_percent"][0] for t in table if t["reader"] == "coordinated"),
                default=None)
    print(f"coordinated stall, worst median: {worst:.1f}% of the step (target <= 5%)"
          if worst is not None else "coordinated: no run finished")
    for shuffle in ("global", "none"):
        c = rows.get((shuffle, "coordinated", top))
        n = rows.get((shuffle, "naive", top))
        if c and n:
            ratio = med([f["samples_per_s"] for f in c])[0] / \
                med([f["samples_per_s"] for f in n])[0]
            print(f"{shuffle}: coordinated / naive samples/s at {top} ranks = {ratio:.2f}x "
                  f"(target >= 2x)")
    failed = [r for r in runs if r["status"] != "done"]
    if failed:
        print(f"{len(failed)} run(s) failed, e.g.: {failed[0].get('error')}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "scaling.json"), "w") as f:
        json.dump({"seq_mb_s": seq, "delay_us": a.delay_us, "rows": table}, f, indent=2)


if __name__ == "__main__":
    main()
