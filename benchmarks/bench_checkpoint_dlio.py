"""DLIO 2.0.0's checkpoints beside hpcio's writers, the same bytes per rank in the same
directory, at 2 and 4 processes: checkpoint writes only (DLIO 2.0 never restores).

    python benchmarks/bench_checkpoint_dlio.py [--venv .venv-dlio] [--dir /var/tmp/hpcio-ckd]
        [--ranks 2 4] [--scale 0.01] [--checkpoints 3] [--repeat 2] [--out FILE.json]

DLIO 2.0 has no llama3 layouts: its checkpoint is, per rank, ``model-E-S-R.pt`` (one int8
tensor of ``checkpoint.model_size`` bytes) and ``optimizer-E-S-R.pt`` (per entry ``g`` of
``optimization_groups`` two int8 tensors of ``g`` bytes, plus one "combined" of their sum:
3 x g bytes), plus layer files that ``num_layers: 0`` turns off, each written by
``torch.save`` (its ``pt_save``), from its training loop every
``steps_between_checkpoints`` steps (``type: all_ranks``). Here ``model_size`` is the model
bytes per rank of hpcio's ``llama3_8b`` layout at ``--scale`` and world size N (ZeRO-3 over
N data-parallel ranks: two files per rank, ``*_model_states`` and ``*_optim_states``, as
DLIO's), and ``optimization_groups`` = [optimizer bytes per rank / 3]: the same bytes per
rank and files per rank as hpcio's, in the same file system (``--dir``). The training
data is 4 KiB npz samples, one per step, no compute: the loop is there to checkpoint.

Rows (GiB/s = the checkpoint's bytes, all ranks, over a duration; the mean over the
checkpoints of the per-checkpoint rates, as MLPerf Storage publishes it):

* ``dlio``: DLIO's ``pt_save`` as shipped: ``torch.save`` into the page cache, no fsync;
  duration as DLIO records it (``per_epoch_stats.json`` ``ckptK`` start to end: rank 0's
  own save, after a barrier; the other ranks' end is not waited for);
* ``dlio+fsync``: the same with an fsync of each file after its ``torch.save``
  (``benchmarks/dlio_fsync_checkpointing.py``, through DLIO's
  ``checkpoint_mechanism_classname``), timed the same way;
* ``torch_save``, ``dcp``, ``coordinated``: ``python -m hpcio.checkpoint run --phase
  write`` (every file fsync'd); two figures each: rank 0's write time (DLIO's definition)
  and the slowest rank's (hpcio's and MLPerf's).

``dlio`` against the others is durable-against-not: it says what the page cache absorbs,
not the disk; ``dlio+fsync`` against ``torch_save`` is the like-for-like pair (the same
``torch.save`` per file, fsync'd; DLIO's tensors are zeros, hpcio's random bytes; DLIO 3
tensors per optimizer file, hpcio's layout its per-tensor keys). Rows run interleaved
(rotated order each round), checkpoints removed after each run; the 1-minute load average
is printed beside each (2 shared cores: a loaded machine makes every figure noisy).
DLIO's venv: ``benchmarks/bench_dlio.py --setup-only`` makes it.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
from bench_dlio import dlio_env  # noqa: E402
from hpcio.checkpoint.layout import GIB, Layout, load_model  # noqa: E402
from hpcio.measure.probes import loadavg  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402

ROWS = ("dlio", "dlio+fsync", "torch_save", "dcp", "coordinated")
TS = "%Y-%m-%dT%H:%M:%S.%f"  # DLIO's LOG_TS_FORMAT


def per_rank(ranks, scale):
    """(model bytes, optimizer bytes) per rank of hpcio's llama3_8b layout."""
    lay = Layout(load_model("llama3_8b"), ranks, scale)
    model, opt = lay.split_bytes()
    return model // ranks, opt // ranks, lay.total_bytes


def _run(cmd, what, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if p.returncode:
        sys.exit(f"bench_checkpoint_dlio: {what} failed ({p.returncode}): "
                 f"{(p.stderr or p.stdout).strip().splitlines()[-3:]}")
    return p


def dlio(a, ranks, fsync, data, generate=False):
    """One DLIO run: per checkpoint (bytes written, rank 0's seconds as DLIO records)."""
    model, opt, _ = per_rank(ranks, a.scale)
    ckpt = os.path.join(a.dir, f"dlio-ckpt-n{ranks}")
    out = os.path.join(a.dir, f"dlio-out-n{ranks}")
    for p in (ckpt, out):
        shutil.rmtree(p, ignore_errors=True)
    vals = {"dataset.data_folder": data, "dataset.format": "npz",
            "dataset.num_files_train": ranks * a.checkpoints, "dataset.num_samples_per_file": 1,
            "dataset.num_files_eval": 0, "dataset.record_length": 4096,
            "dataset.record_length_stdev": 0, "dataset.record_length_resize": 4096,
            "reader.batch_size": 1, "reader.read_threads": 1, "train.epochs": 1,
            "train.computation_time": 0, "workflow.generate_data": generate,
            "workflow.train": not generate, "workflow.checkpoint": not generate,
            "workflow.evaluation": False, "output.folder": out,
            "checkpoint.checkpoint_folder": ckpt, "checkpoint.type": "all_ranks",
            "checkpoint.steps_between_checkpoints": 1, "checkpoint.model_size": model,
            "checkpoint.optimization_groups": f"[{opt // 3}]", "checkpoint.num_layers": 0,
            "checkpoint.layer_parameters": "[]"}
    if fsync:
        vals["checkpoint.checkpoint_mechanism_classname"] = \
            "dlio_fsync_checkpointing.FsyncCheckpointing"
    env = dlio_env(a.venv)
    env["PYTHONPATH"] = HERE
    cmd = [launcher(), "-n", str(ranks), os.path.join(a.venv, "bin", "dlio_benchmark"),
           "workload=unet3d_h100", f"hydra.run.dir={out}"] + [
        f"++workload.{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in vals.items()]
    _run(cmd, f"DLIO at {ranks} ranks", env=env)
    if generate:
        return None
    with open(os.path.join(out, "per_epoch_stats.json")) as f:
        stats = json.load(f)
    epoch = stats[sorted(stats)[0]]
    got = []
    for k in sorted((k for k in epoch if k.startswith("ckpt")), key=lambda k: int(k[4:])):
        t = (datetime.strptime(epoch[k]["end"], TS)
             - datetime.strptime(epoch[k]["start"], TS)).total_seconds()
        got.append(t)
    files = os.listdir(ckpt)
    nbytes = sum(os.path.getsize(os.path.join(ckpt, n)) for n in files)
    if len(got) != a.checkpoints or len(files) != 2 * ranks * a.checkpoints:
        sys.exit(f"bench_checkpoint_dlio: DLIO wrote {len(got)} checkpoints, {len(files)} "
                 f"files; expected {a.checkpoints} and {2 * ranks * a.checkpoints}")
    for p in (ckpt, out):
        shutil.rmtree(p, ignore_errors=True)
    size = nbytes / a.checkpoints / GIB
    return {"rank0": statistics.mean(size / t for t in got), "bytes": nbytes / a.checkpoints,
            "rank0_s": got}


def hpcio(a, ranks, writer):
    """One ``hpcio.checkpoint run --phase write``: mean GiB/s by rank 0's and by the slowest
    rank's write seconds."""
    d = os.path.join(a.dir, f"hpcio-ckpt-n{ranks}")
    out = os.path.join(a.dir, f"hpcio-out-n{ranks}")
    for p in (d, out):
        shutil.rmtree(p, ignore_errors=True)
    _run([launcher(), "-n", str(ranks), sys.executable, "-m", "hpcio.checkpoint", "run",
          "--model", "llama3_8b", "--scale", str(a.scale), "--writer", writer, "--dir", d,
          "--out", out, "--checkpoints", str(a.checkpoints), "--phase", "write"],
         f"hpcio {writer} at {ranks} ranks")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    for p in (d, out):
        shutil.rmtree(p, ignore_errors=True)
    gib = s["checkpoint_bytes"] / GIB
    return {"rank0": statistics.mean(gib / c["write_rank_s"][0] for c in s["checkpoints"]),
            "slowest": s["metric"]["save_checkpoint_io_mean_GB_per_second"],
            "bytes": s["checkpoint_bytes"],
            "rank0_s": [c["write_rank_s"][0] for c in s["checkpoints"]]}


def measure(a, ranks, row, data):
    if row.startswith("dlio"):
        return dlio(a, ranks, row == "dlio+fsync", data)
    return hpcio(a, ranks, row)


def table(a, rows):
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]
               if f not in ("load", "rank0_s")}
           for k, v in rows.items()}
    print(f"\nllama3_8b's bytes per rank at scale {a.scale:g}, {a.checkpoints} checkpoints "
          f"per run, median of {a.repeat} rounds (GiB/s, the mean of per-checkpoint rates)")
    print(f"{'ranks':>5} {'row':<12} {'GiB/ckpt':>9} {'rank 0':>8} {'slowest':>8} "
          f"{'load':>6}")
    for (ranks, row), m in sorted(med.items()):
        load = statistics.median(x["load"] for x in rows[(ranks, row)])
        slow = f"{m['slowest']:8.3f}" if "slowest" in m else f"{'-':>8}"
        print(f"{ranks:>5} {row:<12} {m['bytes'] / GIB:>9.3f} {m['rank0']:>8.3f} {slow} "
              f"{load:>6.2f}")
    for ranks in a.ranks:
        ts, df = med[(ranks, "torch_save")], med[(ranks, "dlio+fsync")]
        co, dc = med[(ranks, "coordinated")], med[(ranks, "dcp")]
        print(f"n={ranks}: torch_save / dlio+fsync (rank 0, both fsync'd): "
              f"{ts['rank0'] / df['rank0']:.2f}x; coordinated / dlio+fsync: "
              f"{co['rank0'] / df['rank0']:.2f}x; coordinated / dcp (slowest rank): "
              f"{co['slowest'] / dc['slowest']:.2f}x; dlio (no fsync) / dlio+fsync: "
              f"{med[(ranks, 'dlio')]['rank0'] / df['rank0']:.2f}x")
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv-dlio"),
                    help="DLIO 2.0.0's venv (benchmarks/bench_dlio.py --setup-only)")
    ap.add_argument("--dir", default="/var/tmp/hpcio-ckd",
                    help="where the checkpoints (and DLIO's small dataset) go")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--scale", type=float, default=0.01,
                    help="llama3_8b's tensor-size factor (0.01: 1.05 GiB per checkpoint)")
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", help="write the rounds and medians as JSON here")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.venv, "bin", "dlio_benchmark")):
        sys.exit(f"bench_checkpoint_dlio: no DLIO in {a.venv} (make it with "
                 f"benchmarks/bench_dlio.py --setup-only, or give --venv)")
    os.makedirs(a.dir, exist_ok=True)
    rows = {}
    for ranks in a.ranks:
        data = os.path.join(a.dir, f"data-n{ranks}")
        shutil.rmtree(data, ignore_errors=True)
        dlio(a, ranks, False, data, generate=True)
        for r in range(a.repeat):
            order = ROWS[r % len(ROWS):] + ROWS[:r % len(ROWS)]
            for row in order:
                l0 = loadavg()
                m = dict(measure(a, ranks, row, data), load=l0)
                rows.setdefault((ranks, row), []).append(m)
                print(f"  n={ranks} round {r + 1} {row:<12} rank 0 {m['rank0']:.3f}"
                      + (f", slowest {m['slowest']:.3f}" if "slowest" in m else "")
                      + f" GiB/s; rank 0 s per checkpoint "
                      + " ".join(f"{t:.2f}" for t in m["rank0_s"])
                      + f"  (load {l0:.2f} -> {loadavg():.2f})", flush=True)
        shutil.rmtree(data, ignore_errors=True)
    med = table(a, rows)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"scale": a.scale, "checkpoints": a.checkpoints,
                       "rounds": {f"{k[0]}:{k[1]}": v for k, v in rows.items()},
                       "median": {f"{k[0]}:{k[1]}": v for k, v in med.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
