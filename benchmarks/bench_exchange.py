"""The emulated gradient exchange: what its barrier costs, and whether MPI-IO readers delay
it.

    python benchmarks/bench_exchange.py [--dir DIR] [--records 1024] [--repeats 3]
                                        [--exchange-model resnet50] [--compute-time 0.05]

Runs ``mpiexec -n 2 python -m hpcio.train --model emulate`` on raw ImageNet-sized LMDB
records (192 KiB), page cache warm, fixed compute time (ranks balanced: any straggler wait
beyond the barrier's floor is the harness's), for each reader (naive, coordinated) and
each ``--exchange-via`` (gloo, mpi), interleaved, ``--repeats`` times; and once with the
memory reader and ``--exchange-bytes 0`` (the barrier alone: its floor). Reported per
combination, from the ranks' step files (every step but each epoch's first, mean over
ranks and steps, median over repeats with min-max): own wait, straggler wait and exchange
per step in ms, and AU % (every step). The question: with MPICH's global lock, does the
coordinated reader's I/O thread, inside a blocking MPI-IO read, hold up an MPI exchange of
the training thread where a gloo one is not held up?
"""

import argparse
import os
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcio.data.dataset import is_dataset  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402

COLUMNS = ("stall", "straggler_wait", "exchange")


def train(a, data, reader, via, out, extra=()):
    cmd = [launcher(), "-n", "2", sys.executable, "-m", "hpcio.train", "--data", data,
           "--model", "emulate", "--compute-time", str(a.compute_time), "--reader", reader,
           "--batch", str(a.batch), "--epochs", str(a.epochs), "--exchange-via", via,
           "--cache", "warm", "--progress", "off", "--out", out, *extra]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=1800)
    per = {c: [] for c in COLUMNS + ("au",)}
    for r in range(2):
        z = np.load(os.path.join(out, f"rank-{r}.npz"))
        keep = z["step"] != 0
        per["stall"].append((z["fetch"] + z["prep"] + z["stall_other"])[keep].mean())
        per["straggler_wait"].append(z["straggler_wait"][keep].mean())
        per["exchange"].append(z["exchange"][keep].mean())
        per["au"].append(100 * z["compute"].sum() / z["wall"].sum())
    return {k: float(np.mean(v)) for k, v in per.items()}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python benchmarks/bench_exchange.py")
    p.add_argument("--dir", default=os.path.join(ROOT, "runs", "bench-exchange"))
    p.add_argument("--records", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--compute-time", type=float, default=0.05)
    p.add_argument("--exchange-model", default="resnet50")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    from hpcio.data.write import generate
    data = os.path.join(a.dir, f"imagenet-lmdb-raw-{a.records}")
    if not is_dataset(data):
        generate(data, preset="imagenet", records=a.records, format="lmdb", encoding="raw",
                 shards=2, seed=0, force=True)
    combos = [(r, v) for r in ("naive", "coordinated") for v in ("gloo", "mpi")]
    got = {c: [] for c in combos}
    floor = []
    for k in range(a.repeats):
        for reader, via in combos:
            out = os.path.join(a.dir, f"{reader}-{via}-{k}-{os.getpid()}")
            got[(reader, via)].append(train(a, data, reader, via, out,
                                            ["--exchange-model", a.exchange_model]))
        out = os.path.join(a.dir, f"floor-{k}-{os.getpid()}")
        floor.append(train(a, data, "memory", "gloo", out, ["--exchange-bytes", "0"]))
    print(f"2 ranks, {a.records} records of 192 KiB (LMDB, warm), batch {a.batch}, "
          f"compute {1000 * a.compute_time:g} ms, exchange {a.exchange_model}; ms per step "
          f"(median (min-max) of {a.repeats})")
    print(f"{'reader':<12}{'via':<6}{'own wait':>20}{'straggler wait':>20}{'exchange':>20}"
          f"{'AU %':>8}")

    def cell(xs, scale=1000.0):
        xs = [scale * x for x in xs]
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"
    for (reader, via), rows in list(got.items()) + [(("memory", "gloo"), floor)]:
        print(f"{reader:<12}{via:<6}" + "".join(cell([r[c] for r in rows]).rjust(20)
                                              for c in COLUMNS)
              + f"{statistics.median(r['au'] for r in rows):8.1f}")
    print("memory/gloo: --exchange-bytes 0, the barrier alone (its floor)")


if __name__ == "__main__":
    main()
