"""What the per-record CRC check costs: ``--verify records`` against ``--verify off``.

    python benchmarks/bench_verify.py [--dir DIR] [--readers naive coordinated]
                                      [--loads quiet busy] [--pairs 5] [--ranks 2]
                                      [--small-records 600000] [--large-records 16000]

LMDB datasets, made in ``--dir`` on the first run: small records (the mnist preset, raw,
784 B each), large ones (the imagenet preset, JPEG, ~108 KB each, of several lengths) and,
with ``--sizes png``, small records of several lengths (the mnist preset, PNG, ~290 B).
For each load, dataset and reader, one ``mpiexec -n RANKS python -m hpcio.bench
--readers R,R:verify=off --cache warm --shuffle global --limits "" --repeat PAIRS``: the
two runs of each repeat form a pair (the order alternates), both from the page cache, and
the coordinated reader is warmed up with a whole epoch first (so the figures are an
epoch's in a run of several, not the first one's). The ratio of a pair is MB/s with the
check / MB/s without it; the table gives the median and the range over the pairs, and
``verify`` is the share of the checked run's time spent in the check (``verify_s``, mean
over ranks, on the thread that checks: the coordinated reader's I/O thread, the
naive reader's as it reads, the consumer's for the others). ``CPU ratio``: the CPU
seconds of the ranks' processes with the check / without it, per pair (the bytes are the
same): what the check costs the cores, which other work on a shared machine changes less
than the time.

``--loads busy`` runs one busy loop per core (``python -c 'while 1: pass'``) beside
the benchmark, killed after it. ``load`` is the 1-minute load average before each
benchmark (this machine's other work included: nothing waits for a quiet machine).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcio.cli import ArgumentParser  # noqa: E402
from hpcio.data.dataset import is_dataset  # noqa: E402
from hpcio.errors import HpcioError, guard  # noqa: E402
from hpcio.measure.probes import loadavg  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402

#: name -> (preset, encoding, --records flag)
DATASETS = {"small": ("mnist", "raw", "small_records"),
            "large": ("imagenet", "jpeg", "large_records"),
            "png": ("mnist", "png", "png_records")}
NAMES = {"small": "784 B", "large": "~108 KB JPEG", "png": "~290 B PNG"}


def busy_loops(n):
    """``n`` processes spinning beside the benchmark (other work on a shared node)."""
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


def dataset(a, which):
    preset, encoding, key = DATASETS[which]
    records = getattr(a, key)
    path = os.path.join(a.dir, f"{preset}-lmdb-{encoding}-{records}")
    if not is_dataset(path):
        from hpcio.datagen.write import generate
        print(f"generating {path} ...", file=sys.stderr, flush=True)
        generate(path, preset=preset, records=records, format="lmdb", encoding=encoding,
                 force=True)
    return path


def pairs(a, data, reader, load):
    """Run the pairs of one reader on one dataset; the bench's runs and the load average."""
    fd, out = tempfile.mkstemp(suffix=".json", prefix="bench-verify-", dir=a.dir)
    os.close(fd)
    cmd = [launcher(), "-n", str(a.ranks), sys.executable, "-m", "hpcio.bench",
           "--data", data, "--readers", f"{reader},{reader}:verify=off", "--cache", "warm",
           "--shuffle", "global", "--limits", "", "--repeat", str(a.pairs),
           "--batch", str(a.batch), "--warmup-steps", str(10 ** 9), "--out", out,
           "--force", "--quiet"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    l0 = loadavg()
    hogs = busy_loops(os.cpu_count() or 1) if load == "busy" else []
    try:
        # from ROOT: ``-m`` puts the working directory first on the path
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=3600)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    try:
        if p.returncode:
            raise HpcioError(f"{reader} on {data} failed ({p.returncode}): "
                             f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
        with open(out) as f:
            runs = json.load(f)["runs"]
    finally:
        os.unlink(out)
    return runs, l0


def summary(runs, reader):
    """Median and range of the pairs' ratios, and the check's share of the checked runs."""
    on = {r["repeat"]: r for r in runs if r["what"] == reader}
    off = {r["repeat"]: r for r in runs if r["what"] == f"{reader}:verify=off"}
    ratios = [on[k]["mb_s"] / off[k]["mb_s"] for k in sorted(on) if k in off]
    # CPU per byte: bytes are the same in both runs of a pair
    cpu = [on[k]["cpu_s"] / off[k]["cpu_s"] for k in sorted(on) if k in off]
    share = [on[k]["verify_s"] / on[k]["seconds"] for k in on]
    return {"ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "ratios": ratios, "cpu": statistics.median(cpu), "cpu_min": min(cpu),
            "cpu_max": max(cpu), "cpu_ratios": cpu,
            "mb_s": statistics.median(r["mb_s"] for r in on.values()),
            "mb_s_off": statistics.median(r["mb_s"] for r in off.values()),
            "verify_share": statistics.median(share)}


def main(argv=None):
    p = ArgumentParser(prog="python benchmarks/bench_verify.py",
                       description="The per-record CRC check's cost: hpcio.bench with "
                                   "--verify records against --verify off, in pairs.")
    p.add_argument("--dir", default=os.path.join(ROOT, "runs", "bench-verify"),
                   help="the datasets go here")
    p.add_argument("--readers", nargs="+", default=["naive", "coordinated"])
    p.add_argument("--loads", nargs="+", default=["quiet", "busy"], choices=("quiet", "busy"),
                   help="busy: one busy loop per core beside the benchmark")
    p.add_argument("--sizes", nargs="+", default=["small", "large"], choices=tuple(DATASETS),
                   help="small: 784 B records; large: ~108 KB JPEGs; png: ~290 B PNGs "
                        "(small records of several lengths)")
    p.add_argument("--pairs", type=int, default=5, help="interleaved pairs per point")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="records per rank per step")
    p.add_argument("--small-records", type=int, default=600000,
                   help="records of the small dataset (784 B each)")
    p.add_argument("--large-records", type=int, default=16000,
                   help="records of the large dataset (~108 KB each)")
    p.add_argument("--png-records", type=int, default=600000,
                   help="records of the PNG dataset (~290 B each)")
    p.add_argument("--json", default=None, help="write every run here too")
    a = p.parse_args(argv)
    if a.pairs < 1:
        raise HpcioError("--pairs must be at least 1")
    os.makedirs(a.dir, exist_ok=True)
    data = {s: dataset(a, s) for s in a.sizes}
    rows, every = [], []
    for load in a.loads:
        for s in a.sizes:
            for reader in a.readers:
                runs, l0 = pairs(a, data[s], reader, load)
                row = {"load": load, "loadavg": l0, "size": s, "reader": reader,
                       **summary(runs, reader)}
                rows.append(row)
                every.append({**row, "runs": runs})
                print(f"{load:<5} load {l0:4.1f}  {s:<5} {reader:<12} {row['ratio']:.2f} "
                      f"[{row['min']:.2f}..{row['max']:.2f}]  CPU {row['cpu']:.2f} "
                      f"[{row['cpu_min']:.2f}..{row['cpu_max']:.2f}]", file=sys.stderr,
                      flush=True)
    print(f"\nverify records / verify off, MB/s, {a.ranks} ranks, warm, global shuffle, "
          f"batch {a.batch}: median [min..max] of {a.pairs} interleaved pairs; load: "
          f"1-minute load average before; busy: {os.cpu_count()} busy loops beside")
    print(f"{'load':<5} {'avg':>4} {'records':<14} {'reader':<12} {'checked MB/s':>12} "
          f"{'off MB/s':>9} {'ratio [min..max]':>18} {'cost':>5} {'verify':>6} "
          f"{'CPU ratio [min..max]':>22}")
    for r in rows:
        name = NAMES[r["size"]]
        print(f"{r['load']:<5} {r['loadavg']:4.1f} {name:<14} {r['reader']:<12} "
              f"{r['mb_s']:12,.0f} {r['mb_s_off']:9,.0f} "
              f"{r['ratio']:6.2f} [{r['min']:.2f}..{r['max']:.2f}] "
              f"{(1 - r['ratio']) * 100:4.0f}% {r['verify_share'] * 100:5.0f}% "
              f"{r['cpu']:10.2f} [{r['cpu_min']:.2f}..{r['cpu_max']:.2f}]")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"argv": sys.argv[1:] if argv is None else argv, "time": time.time(),
                       "rows": every}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="bench_verify"))
