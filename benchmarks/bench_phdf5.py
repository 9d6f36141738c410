"""Parallel HDF5 against the index: the coordinated reader through h5py's ``mpio`` driver
(HDF5's own collective reads), the same reader with raw MPI-IO at the index's offsets, and
the naive reader (h5py, one read per sample), on a contiguous and a chunked HDF5 dataset.

    python benchmarks/bench_phdf5.py --root /scratch/me/phdf5 [--preset imagenet]
        [--records 1500] [--ranks 2] [--chunk-records 16] [--shuffle none,global]
        [--cache cold] [--repeat 3] [--batch 16] [--wait-quiet 30]

Needs h5py built with MPI (docs/setup.md: Parallel HDF5). Makes the two datasets once under
``--root`` (raw records, 2 shards each), then runs one :mod:`hpcio.bench` job over both
(``--limits seq``: one sequential ``dd bs=8M``-like stream over the same files in every
repeat, the machine's limit) and prints, per layout, shuffle and reader, the medians over
the repeats of samples/s (all ranks), MiB/s (2^20 bytes of records delivered per second)
and ``x seq`` (MiB/s / the ``seq`` stream's, same repeat). The launcher is ``$MPIEXEC``,
else the one :func:`hpcio.mpiutil.launcher` finds. Writes ``phdf5.json`` (every run) under
``--root``. Figures measured here: ``benchmarks/parallel-hdf5.md``.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

from hpcio.explain.benchtable import summarize
from hpcio.mpiutil import launcher

READERS = {"naive": "naive",
           "offsets": "coordinated",
           "offsets collective": "coordinated:collective=true",
           "mpio collective": "coordinated:hdf5=mpio",
           "mpio no two-phase": ("coordinated:hdf5=mpio:hint.romio_cb_read=disable:"
                                 "hint.romio_ds_read=disable"),
           "mpio independent": "coordinated:hdf5=mpio:collective=false"}


def make(root, preset, records, chunk):
    """The two datasets (made once): ``<preset>-contiguous`` and ``<preset>-chunked``."""
    out = {}
    for layout, extra in (("contiguous", []), ("chunked", ["--chunk-records", str(chunk)])):
        d = os.path.join(root, f"{preset}-{records}-{layout}")
        if not os.path.exists(os.path.join(d, "hpcio.json")):
            subprocess.run([sys.executable, "-m", "hpcio.datagen", "generate", d, "--preset",
                            preset, "--records", str(records), "--format", "hdf5",
                            "--encoding", "raw", "--shards", "2", *extra], check=True,
                           stdout=subprocess.DEVNULL)
        out[layout] = d
    return out


def table(runs, names):
    """Median samples/s, MiB/s and x seq per (layout, cache, shuffle, reader)."""
    summarize(runs)  # sets each run's x_seq (against the same repeat's seq)
    groups = {}
    for r in runs:
        if "mb_s" in r and r["what"] in names:
            groups.setdefault((r["dataset"], r["cache"], r["shuffle"], r["what"]), []).append(r)
    head = (f"{'layout':<11} {'cache':<5} {'shuffle':<7} {'reader':<19} {'samples/s':>10} "
            f"{'MiB/s':>8} {'x seq':>6}  {'x seq min..max':<14}")
    lines = [head, "-" * len(head)]
    for (ds, cache, shuffle, what), rs in sorted(groups.items(),
                                                 key=lambda kv: (kv[0][:3], list(
                                                     names).index(kv[0][3]))):
        xs = [r["x_seq"] for r in rs if r.get("x_seq") is not None]
        med = statistics.median
        lines.append(f"{ds.rsplit('-', 1)[1]:<11} {cache:<5} {shuffle:<7} {names[what]:<19} "
                     f"{med(r['rec_s'] for r in rs):>10,.0f} "
                     f"{med(r['bytes'] / r['seconds'] / 2**20 for r in rs):>8,.0f} "
                     f"{med(xs) if xs else float('nan'):>6.2f}  "
                     f"{min(xs) if xs else 0:.2f}..{max(xs) if xs else 0:.2f}")
    seq = [r["mb_s"] * 1e6 / 2**20 for r in runs if r["what"] == "seq" and "mb_s" in r]
    if seq:
        lines.append(f"seq (one stream, 8 MiB reads, same files): median "
                     f"{statistics.median(seq):,.0f} MiB/s over {len(seq)} runs")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="where the datasets and phdf5.json go")
    ap.add_argument("--preset", default="imagenet")
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--chunk-records", type=int, default=16)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--shuffle", default="none,global")
    ap.add_argument("--cache", default="cold")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--wait-quiet", type=float, default=0.0)
    ap.add_argument("--readers", default=",".join(READERS),
                    help=f"which of: {', '.join(READERS)}")
    a = ap.parse_args()
    os.makedirs(a.root, exist_ok=True)
    sets = make(a.root, a.preset, a.records, a.chunk_records)
    picked = [k.strip() for k in a.readers.split(",") if k.strip()]
    bad = [k for k in picked if k not in READERS]
    if bad:
        sys.exit(f"bench_phdf5: unknown reader {bad[0]!r} (choose from {', '.join(READERS)})")
    names = {READERS[k]: k for k in picked}
    out = os.path.join(a.root, "phdf5.json")
    cmd = shlex.split(os.environ.get("MPIEXEC") or launcher()) + [
        "-n", str(a.ranks), sys.executable, "-m", "hpcio.bench", "--data",
        sets["contiguous"], sets["chunked"], "--readers", ",".join(names), "--limits", "seq",
        "--cache", a.cache, "--shuffle", a.shuffle, "--repeat", str(a.repeat), "--batch",
        str(a.batch), "--wait-quiet", str(a.wait_quiet), "--quiet", "--out", out]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if p.returncode:
        sys.exit(p.returncode)
    with open(out) as f:
        res = json.load(f)
    print(f"{a.ranks} ranks, batch {a.batch}, {a.records} {a.preset} records "
          f"({res['meta']['datasets'][os.path.basename(sets['contiguous'])]['record_bytes']:,}"
          f" bytes of records per layout), chunks of {a.chunk_records} records; "
          f"{res['meta']['mpi']}")
    print(table(res["runs"], names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
