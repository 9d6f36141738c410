"""The README's main command: a synthetic ImageNet-like dataset, the disk's own bandwidth
measured, then ``hpcio.train`` with the naive and the coordinated reader at 1 and 2 ranks,
cold cache, emulated compute sized so that the ranks ask for ``--demand`` of that bandwidth;
the summaries side by side, and ``hpcio.analyze``'s report on the four runs.

Everything it makes goes under ``--workdir`` (default ``./demo``): the dataset is reused
when it is already there, each run gets a new directory, the report goes to
``WORKDIR/report-<time>``. ``--model`` other than ``emulate`` trains a real model instead
(on a CPU the model, not the storage, is then the bottleneck).
"""

import json
import os
import shlex
import subprocess
import sys
import time

from .analysis.summary import side_by_side
from .cache import read_file
from .cli import ArgumentParser, integer, positive
from .data.dataset import is_dataset, open_dataset
from .errors import HpcioError, guard
from .fsutil import aligned_empty, evict
from .mpiutil import launcher

__all__ = ["main", "sequential_mb_s"]


def sequential_mb_s(paths, repeat=3):
    """The disk's limit for these files: the median of ``repeat`` cold sequential reads
    (evicted first; 8 MiB reads into a page-aligned buffer, like ``dd bs=8M``), MB/s."""
    buf = aligned_empty(8 << 20)
    rates = []
    for _ in range(repeat):
        for p in paths:
            evict(p)
        t = time.perf_counter()
        n = sum(read_file(p, buf) for p in paths)
        rates.append(n / (time.perf_counter() - t) / 1e6)
    return sorted(rates)[len(rates) // 2]


def build_parser():
    ap = ArgumentParser(prog="python -m hpcio.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="demo", help="where the dataset, runs and report go")
    ap.add_argument("--preset", default="imagenet", help="dataset preset")
    ap.add_argument("--records", type=integer(1), default=2048, help="records in the dataset")
    ap.add_argument("--format", default="lmdb", help="dataset format")
    ap.add_argument("--model", default="emulate", help="model to train")
    ap.add_argument("--ranks", default="1,2", help="rank counts, e.g. 1,2")
    ap.add_argument("--batch", type=integer(1), default=16, help="samples per rank per step")
    ap.add_argument("--epochs", type=integer(1), default=2, help="epochs per run")
    ap.add_argument("--shuffle", default="global", help="sample order (see hpcio/plan.py)")
    ap.add_argument("--demand", type=positive, default=0.8,
                    help="emulate: the compute time per step makes the most ranks ask for "
                         "this fraction of the disk's measured sequential bandwidth")
    ap.add_argument("--darshan", metavar="LIB", default=None,
                    help="trace every run with this Darshan runtime (hpcio.train --darshan; "
                         "scripts/darshan-local.sh build makes one)")
    ap.add_argument("--launcher", default=None,
                    help="MPI launcher command (default: the mpiexec beside this Python); "
                         "e.g. 'srun --mpi=pmi2'")
    return ap


def _run(cmd, ok=(0,)):
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    p = subprocess.run(cmd)
    if p.returncode not in ok:
        raise HpcioError(f"{' '.join(cmd[:4])} exited with {p.returncode}")


def main(argv=None):
    a = build_parser().parse_args(argv)
    try:
        ranks = sorted({int(r) for r in a.ranks.split(",") if r.strip()})
    except ValueError:
        raise HpcioError(f"--ranks {a.ranks!r}: expected integers like 1,2")
    if not ranks or ranks[0] < 1:
        raise HpcioError(f"--ranks {a.ranks!r}: every rank count must be >= 1")
    launch = shlex.split(a.launcher) if a.launcher else [launcher()]
    os.makedirs(a.workdir, exist_ok=True)
    data = os.path.join(a.workdir, f"{a.preset}-{a.records}.{a.format}")
    if not is_dataset(data):
        _run(launch + ["-n", str(ranks[-1]), sys.executable, "-m", "hpcio.datagen",
                       "generate", data, "--preset", a.preset, "--records", str(a.records),
                       "--format", a.format, "--shards", str(ranks[-1])])
    ds = open_dataset(data)
    train = ["--model", a.model, "--batch", str(a.batch), "--epochs", str(a.epochs),
             "--shuffle", a.shuffle, "--cache", "cold"]
    if a.darshan:
        train += ["--darshan", a.darshan, "--darshan-dxt"]
    note, limit = "", []
    if a.model == "emulate":
        bw = sequential_mb_s(ds.paths)
        step_bytes = ranks[-1] * a.batch * ds.nbytes() / ds.records
        compute = step_bytes / (a.demand * bw * 1e6)
        train += ["--compute-time", f"{compute:.6f}"]
        note = (f"disk: {bw:,.0f} MB/s cold sequential (median of 3); emulated compute "
                f"{compute * 1e3:.2f} ms per step: {ranks[-1]} rank(s) ask for "
                f"{100 * a.demand:.0f}% of it")
        print(note, flush=True)
        limit = ["--storage-mibs", f"{bw * 1e6 / 2 ** 20:.1f}"]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    summaries, runs = {}, []
    for n in ranks:
        for reader in ("naive", "coordinated"):
            out = os.path.join(a.workdir, "runs", f"{stamp}-{reader}-n{n}")
            _run(launch + ["-n", str(n), sys.executable, "-m", "hpcio.train", "--data", data,
                           "--reader", reader, "--out", out] + train)
            with open(os.path.join(out, "summary.json")) as f:
                summaries[f"{reader} n={n}"] = json.load(f)
            runs.append(out)
    print(f"\n{a.model} on {data}, cold cache{'; ' + note if note else ''}:")
    print(side_by_side(summaries))
    print("\nDefinitions: AU = compute / wall (MLPerf Storage's rule: the first step of each "
          "epoch excluded; AU over every step beside it in summary.json); stall = time a "
          "step waited for its batch, split into fetch (reader) and prep (decode/augment). "
          f"Run directories are under {os.path.join(a.workdir, 'runs')}.", flush=True)
    report = os.path.join(a.workdir, f"report-{stamp}")
    # exit code 1: the report is made, with the gaps in its input said above it
    _run([sys.executable, "-m", "hpcio.analyze", *runs, "-o", report, *limit], ok=(0, 1))
    print(f"\nWhy they differ, explained: {os.path.join(report, 'report.html')} "
          f"(and report.md)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, "hpcio.demo"))
