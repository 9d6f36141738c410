"""The GPU paths, checked on a machine with NVIDIA GPUs.

    python benchmarks/bench_gpu.py [--dir DIR] [--records 4096] [--batch 64] [--steps 60]
                                   [--model resnet50] [--json FILE]

What it runs and checks (one line each, then a table):

1. A raw ImageNet-sized dataset (256x256x3, LMDB) in ``--dir``.
2. ``hpcio.train --device cuda --dist torch`` (DDP over NCCL) at 1 rank, and at 2 ranks
   when there are 2 GPUs, with ``--reader memory`` and ``--reader coordinated``, warm
   cache (the question is whether the coordinated reader keeps a real GPU as busy as
   data already in RAM).
3. **NCCL**: the run's ``config.yaml`` says the process group was NCCL.
4. **pynvml**: every rank's ``rank-R.json`` carries GPU utilisation and memory samples
   (not NaN; memory > 0).
5. **Sum rule**: in every step, the components (hpcio.measure.steps.COMPONENTS) add
   up to the step's wall time (within 2%), with the GPU's work inside ``compute``
   (the step synchronises the device before the stamp).
6. **CUDA-synchronised compute**: the median ``compute`` of the 1-rank memory run
   against the same step (DDP on a 1-rank NCCL group, forward, loss, backward, SGD) timed
   here with CUDA events, ``--steps`` after 10 warm-up steps. Agreement within 10% means
   the trainer's compute stamp measures the device's work, not the kernel launches
   (unsynchronised, a ResNet-50 step "takes" the few ms of its launches).

samples/s in the table is steady state: every rank's records over its step time with each
epoch's first step (CUDA context, cuDNN autotuning) left out, summed over ranks;
first-step s is that first step (slowest rank).

Exits non-zero when a check fails; ``--json`` keeps every figure.
"""

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcio.cli import ArgumentParser  # noqa: E402
from hpcio.errors import HpcioError, guard  # noqa: E402
from hpcio.measure.rundir import RunDir  # noqa: E402
from hpcio.measure.steps import COMPONENTS  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402


def generate(root, records, fmt):
    if os.path.exists(os.path.join(root, "hpcio.json")):
        return
    subprocess.run([sys.executable, "-m", "hpcio.datagen", "generate", root, "--preset",
                    "imagenet", "--records", str(records), "--format", fmt,
                    "--encoding", "raw", "--no-progress"], check=True)


def train(data, out, reader, ranks, args):
    cmd = [launcher(), "-n", str(ranks), sys.executable, "-m", "hpcio.train", "--data", data,
           "--reader", reader, "--model", args.model, "--device", "cuda", "--dist", "torch",
           "--batch", str(args.batch), "--steps", str(args.steps), "--cache", "warm",
           "--threads", str(args.threads), "--sample-interval", "0.2", "--progress", "off",
           "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise HpcioError(f"{' '.join(cmd)} failed: {(p.stderr or p.stdout).strip()[-400:]}")
    return RunDir(out).summary()[0]


def check_run(out, ranks):
    """The checks of one run (3-5 above); returns per-run figures."""
    fails, gpu_util, gpu_mem, compute, rate, first = [], [], [], [], 0.0, []
    run = RunDir(out)
    for r in range(ranks):
        rj, _ = run.rank_info(r)
        s = rj["samples"]
        u, m = np.array(s["gpu_util"], float), np.array(s["gpu_mem_bytes"], float)
        if not len(u) or np.isnan(u).all() or not (m > 0).any():
            fails.append(f"rank {r}: no pynvml samples in {run.RANK_INFO.format(rank=r)}")
        gpu_util += list(u[~np.isnan(u)])
        gpu_mem += list(m[~np.isnan(m)])
        z = np.load(run.rank_steps_file(r))
        parts = sum(z[c] for c in COMPONENTS)
        bad = int((np.abs(parts - z["wall"]) > 0.02 * z["wall"]).sum())
        if bad:
            fails.append(f"rank {r}: {bad} steps whose components miss the wall by > 2%")
        keep = z["step"] != 0
        compute += list(z["compute"][keep])
        rate += z["records"][keep].sum() / z["wall"][keep].sum()
        first.append(float(z["wall"][~keep].sum()))
    backend = run.config()[0]["dist_backend"]
    if backend != "nccl":
        fails.append(f"the process group was {backend}, not NCCL")
    return fails, {"gpu_util_mean": float(np.mean(gpu_util)) if gpu_util else None,
                   "gpu_mem_max_gib": max(gpu_mem) / 2**30 if gpu_mem else None,
                   "compute_ms_median": 1e3 * statistics.median(compute),
                   "steady_samples_per_s": float(rate), "first_step_s": max(first)}


def event_timed_step(model_name, batch, steps):
    """Median ms of one training step of ``model_name`` on cuda:0, timed with CUDA events:
    the trainer's step (DDP over a 1-rank NCCL group, forward, loss, backward, SGD), so
    the two figures time the same work."""
    import socket
    import torch
    import torch.distributed as td
    from hpcio.train.models import make_model
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    td.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                          world_size=1)
    try:
        model, spec = make_model(model_name, 1000)
        model = torch.nn.parallel.DistributedDataParallel(model.to(dev), device_ids=[0])
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        x = torch.randn(batch, *spec.input_shape, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        times = []
        for i in range(10 + steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            b.record()
            torch.cuda.synchronize(dev)
            if i >= 10:
                times.append(a.elapsed_time(b))
    finally:
        td.destroy_process_group()
    return statistics.median(times)


def main(argv=None):
    p = ArgumentParser(prog="python benchmarks/bench_gpu.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", help="dataset directory (default: a temporary one)")
    p.add_argument("--records", type=int, default=4096)
    p.add_argument("--format", default="lmdb")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--repeats", type=int, default=2, help="runs per (reader, ranks), "
                   "interleaved")
    p.add_argument("--threads", type=int, default=6, help="preprocessing threads per rank")
    p.add_argument("--json", help="write every figure here")
    args = p.parse_args(argv)
    import torch
    gpus = torch.cuda.device_count()
    if not gpus:
        raise HpcioError("no CUDA device visible: bench_gpu needs an NVIDIA GPU")
    work = tempfile.mkdtemp(prefix="hpcio-gpu-")
    data = args.dir or os.path.join(work, "inet.lmdb")
    generate(data, args.records, args.format)
    print(f"{gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}")
    rows, fails = [], []
    for ranks, rep, reader in itertools.product(sorted({1, min(2, gpus)}),
                                                range(args.repeats),
                                                ("memory", "coordinated")):
        out = os.path.join(work, f"{reader}-n{ranks}-{rep}")
        s = train(data, out, reader, ranks, args)
        f, fig = check_run(out, ranks)
        fails += [f"{reader} n={ranks}: {x}" for x in f]
        m = s["metrics"]
        rows.append({"reader": reader, "ranks": ranks, "repeat": rep, **fig,
                     **{k: m[k] for k in ("samples_per_s", "au_percent", "stall_percent",
                                          "h2d_percent", "mib_per_s")}})
    ev = event_timed_step(args.model, args.batch, args.steps)
    stamp = statistics.median(r["compute_ms_median"] for r in rows
                              if r["reader"] == "memory" and r["ranks"] == 1)
    ratio = stamp / ev
    if not 0.9 <= ratio <= 1.1:
        fails.append(f"trainer's median compute {stamp:.1f} ms against {ev:.1f} ms by CUDA "
                     f"events ({ratio:.2f}x)")
    print(f"{'reader':12} {'ranks':>5} {'samples/s':>10} {'first step s':>12} {'AU %':>6} "
          f"{'stall %':>8} {'h2d %':>6} {'compute ms':>11} {'GPU util %':>10} {'GPU GiB':>8}")
    for r in rows:
        print(f"{r['reader']:12} {r['ranks']:>5} {r['steady_samples_per_s']:>10.1f} "
              f"{r['first_step_s']:>12.2f} {r['au_percent']:>6.1f} {r['stall_percent']:>8.1f} "
              f"{r['h2d_percent']:>6.1f} "
              f"{r['compute_ms_median']:>11.1f} {r['gpu_util_mean'] or float('nan'):>10.1f} "
              f"{r['gpu_mem_max_gib'] or float('nan'):>8.2f}")
    for n in sorted({r["ranks"] for r in rows}):
        med = {rd: statistics.median(r["steady_samples_per_s"] for r in rows
                                     if r["reader"] == rd and r["ranks"] == n)
               for rd in ("memory", "coordinated")}
        print(f"n={n}: coordinated / memory samples/s = "
              f"{med['coordinated'] / med['memory']:.3f} (medians of {args.repeats})")
    print(f"compute stamp {stamp:.1f} ms, CUDA events {ev:.1f} ms "
          f"({ratio:.3f}x)")
    for f in fails:
        print(f"FAIL {f}")
    print("all checks passed" if not fails else f"{len(fails)} checks failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "event_step_ms": ev, "fails": fails,
                       "gpus": gpus, "device": torch.cuda.get_device_name(0),
                       "torch": torch.__version__}, f, indent=1)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(guard(main))
