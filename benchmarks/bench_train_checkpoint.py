"""The stall a checkpoint puts into a training step, synchronous against asynchronous: an
emulated ``hpcio.train`` run that checkpoints a llama3 layout's per-rank state every N steps
(``--checkpoint-workload``), once per mode, in alternated rounds.

    python benchmarks/bench_train_checkpoint.py [--ranks 2] [--scale 0.0015] [--every 10]
        [--steps 60] [--compute 0.05] [--writer coordinated] [--repeat 2] [--dir DIR]

Per run, from its summary.json: each checkpoint's stall (the slowest rank's step ``ckpt``
component), its write wall (slowest rank) and GiB/s. Printed per round: the mean stall per
checkpoint of each mode, and async over sync (the target: under 0.10), with the 1-minute
load average before each run (a loaded machine makes every figure noisy). The runs'
directories stay in ``--dir`` (a new temporary directory by default).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from hpcio.measure.probes import loadavg  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402

MODES = ("sync", "async")


def run(a, data, out, mode):
    cmd = [launcher(), "-n", str(a.ranks), sys.executable, "-m", "hpcio.train", "--data", data,
           "--model", "emulate", "--reader", "naive", "--batch", "4", "--steps",
           str(a.steps), "--compute-time", str(a.compute), "--checkpoint-every",
           str(a.every), "--checkpoint-workload", "llama3_8b", "--checkpoint-scale",
           str(a.scale), "--checkpoint-writer", a.writer, "--checkpoint-mode", mode,
           "--progress", "off", "--out", out]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["checkpoints"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--scale", type=float, default=0.0015,
                   help="llama3_8b's tensors times this (0.0015: 0.157 GiB per checkpoint)")
    p.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--compute", type=float, default=0.05, help="emulated compute per step, s")
    p.add_argument("--writer", default="coordinated")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dir", default=None, help="where data and runs go (default: a new "
                                                "temporary directory)")
    a = p.parse_args()
    top = a.dir or tempfile.mkdtemp(prefix="hpcio-bench-train-ckpt-")
    data = os.path.join(top, "data")
    if not os.path.exists(data):
        subprocess.run([sys.executable, "-m", "hpcio.datagen", "generate", data, "--preset",
                        "mnist", "--records", str(a.ranks * a.steps * 4 + 64), "--format",
                        "packed"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    for r in range(a.repeat):
        got = {}
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            load = loadavg()
            c = run(a, data, os.path.join(top, f"{mode}-{r}"), mode)
            got[mode] = c
            stalls = " ".join(f"{x['stall_s']:.3f}" for x in c["per_checkpoint"])
            print(f"round {r} {mode:<5} load {load if load is not None else '-'}: {c['count']} x "
                  f"{c['size_GiB']:.3f} GiB, stall per checkpoint [{stalls}] s, mean "
                  f"{c['stall_s_mean']:.4f} s; write {c['write_s_mean']:.3f} s mean, "
                  f"{c['write_GiB_per_s_mean']:.3f} GiB/s mean", flush=True)
        ratio = got["async"]["stall_s_mean"] / got["sync"]["stall_s_mean"]
        print(f"round {r}: async stall / sync stall = {ratio:.3f} (target < 0.10)", flush=True)
    print(f"runs: {top}")


if __name__ == "__main__":
    main()
