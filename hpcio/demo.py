"""The README's main command: a small synthetic dataset, then ``hpcio.train`` on 2 ranks
with the naive and the coordinated reader, cold cache, and the two summaries side by side.

Everything it makes goes under ``--workdir`` (default ``./demo``): the dataset is reused
when it is already there, each run gets a new directory.
"""

import json
import os
import shlex
import subprocess
import sys
import time

from .analysis.summary import side_by_side
from .cli import ArgumentParser
from .data.dataset import is_dataset
from .errors import HpcioError, guard

__all__ = ["main"]

def launcher():
    """``mpiexec`` beside this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def build_parser():
    ap = ArgumentParser(prog="python -m hpcio.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="demo", help="where the dataset and runs go")
    ap.add_argument("--preset", default="cifar10", help="dataset preset")
    ap.add_argument("--records", type=int, default=8000, help="records in the dataset")
    ap.add_argument("--format", default="lmdb", help="dataset format")
    ap.add_argument("--model", default="cifar-quick", help="model to train")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run")
    ap.add_argument("--launcher", default=None,
                    help="MPI launcher command (default: the mpiexec beside this Python); "
                         "e.g. 'srun --mpi=pmi2'")
    return ap


def _run(cmd):
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    p = subprocess.run(cmd)
    if p.returncode != 0:
        raise HpcioError(f"{cmd[0]} exited with {p.returncode}")


def main(argv=None):
    a = build_parser().parse_args(argv)
    launch = shlex.split(a.launcher) if a.launcher else [launcher()]
    os.makedirs(a.workdir, exist_ok=True)
    data = os.path.join(a.workdir, f"{a.preset}-{a.records}.{a.format}")
    if not is_dataset(data):
        _run(launch + ["-n", str(a.ranks), sys.executable, "-m", "hpcio.datagen", "generate",
                       data, "--preset", a.preset, "--records", str(a.records),
                       "--format", a.format, "--shards", str(a.ranks)])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    summaries = {}
    for reader in ("naive", "coordinated"):
        out = os.path.join(a.workdir, "runs", f"{stamp}-{reader}")
        _run(launch + ["-n", str(a.ranks), sys.executable, "-m", "hpcio.train",
                       "--data", data, "--reader", reader, "--model", a.model,
                       "--batch", str(a.batch), "--epochs", str(a.epochs),
                       "--cache", "cold", "--out", out])
        with open(os.path.join(out, "summary.json")) as f:
            summaries[reader] = json.load(f)
    print(f"\n{a.model} on {a.ranks} ranks, {data}, cold cache:")
    print(side_by_side(summaries))
    print("\nDefinitions: AU = compute / wall (first step of each epoch excluded, as MLPerf "
          "Storage); stall = time a step waited for its batch, split into fetch (reader) "
          "and prep (decode/augment). Run directories are under "
          f"{os.path.join(a.workdir, 'runs')}.")
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, "hpcio.demo"))
