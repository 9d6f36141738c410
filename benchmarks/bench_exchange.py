"""The emulated gradient exchange: what its barrier costs, and whether MPI-IO readers delay
it.

    python benchmarks/bench_exchange.py [--dir DIR] [--records 1024] [--repeats 3]
                                        [--exchange-model resnet50] [--compute-time 0.05]
                                        [--cache warm]

Runs ``mpiexec -n 2 python -m hpcio.train --model emulate`` on raw ImageNet-sized LMDB
records (192 KiB), page cache ``--cache``, fixed compute time (ranks balanced: any
straggler wait beyond the barrier's floor is the harness's), for each reader (naive,
coordinated) and each ``--exchange-via`` (gloo, mpi), interleaved, ``--repeats`` times;
and with the memory reader and ``--exchange-bytes 0`` (the barrier alone: its floor), each
run started after a quiet second (``--wait-quiet``: other jobs' load would show as
straggler wait). Reported per combination, from the ranks' step files (every step but each
epoch's first, mean over ranks and steps, median over repeats with min-max): own wait,
straggler wait and exchange per step in ms, and AU % (every step). The question: with
MPICH's global lock, does the coordinated reader's I/O thread, inside a blocking MPI-IO
read, hold up an MPI exchange of the training thread where a gloo one is not held up?
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
from hpcio.measure.probes import wait_quiet  # noqa: E402
from hpcio.measure.rundir import RunDir  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402

COLUMNS = ("stall", "straggler_wait", "exchange")


def train(a, data, reader, via, out, extra=()):
    cmd = [launcher(), "-n", "2", sys.executable, "-m", "hpcio.train", "--data", data,
           "--model", "emulate", "--compute-time", str(a.compute_time), "--reader", reader,
           "--batch", str(a.batch), "--epochs", str(a.epochs), "--exchange-via", via,
           "--cache", a.cache, "--progress", "off", "--out", out, *extra]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    quiet = wait_quiet(a.wait_quiet, cpu=0.25)["quiet"] if a.wait_quiet else True
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=1800)
    per = {c: [] for c in COLUMNS + ("au",)}
    for r in range(2):
        z = np.load(RunDir(out).rank_steps_file(r))
        keep = z["step"] != 0
        per["stall"].append((z["fetch"] + z["prep"] + z["stall_other"])[keep].mean())
        per["straggler_wait"].append(z["straggler_wait"][keep].mean())
        per["exchange"].append(z["exchange"][keep].mean())
        per["au"].append(100 * z["compute"].sum() / z["wall"].sum())
    return dict({k: float(np.mean(v)) for k, v in per.items()}, quiet=quiet)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python benchmarks/bench_exchange.py")
    p.add_argument("--dir", default=os.path.join(ROOT, "runs", "bench-exchange"))
    p.add_argument("--records", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--compute-time", type=float, default=0.05)
    p.add_argument("--exchange-model", default="resnet50")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cache", default="warm", choices=("warm", "cold"))
    p.add_argument("--wait-quiet", type=float, default=60.0, metavar="S",
                   help="before each run wait up to S s for idle CPUs (other jobs' load "
                        "would be measured as straggler wait; 0: no)")
    a = p.parse_args(argv)
    from hpcio.datagen.write import generate
    data = os.path.join(a.dir, f"imagenet-lmdb-raw-{a.records}")
    if not is_dataset(data):
        generate(data, preset="imagenet", records=a.records, format="lmdb", encoding="raw",
                 shards=2, seed=0, force=True)
    combos = [(r, v) for r in ("naive", "coordinated", "memory") for v in ("gloo", "mpi")]
    got = {c: [] for c in combos}
    for k in range(a.repeats):
        for reader, via in combos:
            out = os.path.join(a.dir, f"{reader}-{via}-{k}-{os.getpid()}")
            size = (["--exchange-bytes", "0"] if reader == "memory" else
                    ["--exchange-model", a.exchange_model])
            got[(reader, via)].append(train(a, data, reader, via, out, size))
    print(f"2 ranks, {a.records} records of 192 KiB (LMDB, {a.cache}), batch {a.batch}, "
          f"compute {1000 * a.compute_time:g} ms, exchange {a.exchange_model}; ms per step "
          f"(median (min-max) of {a.repeats})")
    print(f"{'reader':<12}{'via':<6}{'own wait':>22}{'straggler wait':>22}{'exchange':>22}"
          f"{'AU %':>8}")

    def cell(xs, scale=1000.0):
        xs = [scale * x for x in xs]
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"
    for (reader, via), rows in got.items():
        print(f"{reader:<12}{via:<6}" + "".join(cell([r[c] for r in rows]).rjust(22)
                                              for c in COLUMNS)
              + f"{statistics.median(r['au'] for r in rows):8.1f}")
    print("memory: --exchange-bytes 0, the barrier alone (its floor)")
    loud = sum(not r["quiet"] for rows in got.values() for r in rows)
    if loud:
        print(f"{loud} run(s) started on a busy machine (no quiet second in "
              f"--wait-quiet {a.wait_quiet:g} s)")


if __name__ == "__main__":
    main()
