"""What ``--trace`` costs a training step: the same run with and without it, interleaved.

    python benchmarks/bench_trace.py [--ranks 2] [--repeat 5] [--steps 200] [--epochs 3]
        [--compute-time 0.005] [--work DIR]

Each repeat runs ``mpiexec -n RANKS python -m hpcio.train --model emulate`` (naive reader,
packed raw MNIST-sized records, emulate's default step end: a barrier; the figures of docs/training.md
were measured when the default was the mnist preset's LeNet gradient allreduce and the
cache as it was) once without and once with
``--trace``, alternating which goes first; then the same again beside a busy loop
(``python3 -c 'while 1: pass'``, one core kept busy). The step time of a run is the mean
step wall over every rank and step (rank-<r>.npz); the overhead is the median over repeats
of (traced / untraced) - 1, with the range over repeats. The traces are made on the
flusher's thread at epoch ends, so what a step could pay is CPU and GIL taken from it: the
writer's own CPU time per step (events made and gzipped for 10,000 recorded steps) is
printed too, a bound that run-to-run noise does not blur.
Writes ``trace-overhead.json`` into ``--work``.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from hpcio.data.dataset import is_dataset  # noqa: E402
from hpcio.datagen.write import generate  # noqa: E402
from hpcio.measure.steps import StepLog  # noqa: E402
from hpcio.measure.trace import TraceWriter  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402


def step_time(out, ranks):
    """Mean step wall (s) over every rank's steps."""
    walls = [np.load(os.path.join(out, f"rank-{r}.npz"))["wall"] for r in range(ranks)]
    return float(np.concatenate(walls).mean())


def run(a, data, out, trace):
    cmd = [launcher(), "-n", str(a.ranks), sys.executable, "-m", "hpcio.train",
           "--data", data, "--model", "emulate", "--reader", "naive", "--batch", "4",
           "--steps", str(a.steps), "--epochs", str(a.epochs), "--compute-time",
           str(a.compute_time), "--progress", "off", "--out", out] + (["--trace"] if trace
                                                                   else [])
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        sys.exit(f"bench_trace: run failed: {(p.stderr or p.stdout).strip()[-300:]}")
    return step_time(out, a.ranks)


def series(a, data, label):
    """(untraced, traced) step times of each repeat, their order alternating."""
    pairs = []
    for i in range(a.repeat):
        got = {}
        for trace in ((False, True) if i % 2 == 0 else (True, False)):
            out = os.path.join(a.work, "runs", f"{label}-{i}-{'on' if trace else 'off'}")
            shutil.rmtree(out, ignore_errors=True)
            got[trace] = run(a, data, out, trace)
        pairs.append((got[False], got[True]))
        print(f"  {label} {i + 1}/{a.repeat}: {1e3 * got[False]:.3f} ms untraced, "
              f"{1e3 * got[True]:.3f} ms traced", flush=True)
    return pairs


def writer_cost(work, steps=10_000):
    """CPU seconds the trace writer takes per step, the steps' stamps made up."""
    log = StepLog(steps, origin=0.0)
    t = 0.0
    for s in range(steps):
        d = 1e-3 * (1 + (s % 7))
        log.add(s // 500, s % 500, t, t + d, t + 2 * d, t + 5 * d, t + 6 * d, t + 7 * d,
                t + 7 * d, t + 8 * d, t - d, t + d / 2, t + d, 4, 3136)
        t += 8 * d
    path = os.path.join(work, "writer-cost.pfw.gz")
    if os.path.exists(path):
        os.remove(path)
    w = TraceWriter.open(path)
    w.start(1.7e9, "node", 0, 1)
    c = time.thread_time()
    for lo in range(0, steps, 500):  # one write an epoch
        log_n, log.n = log.n, lo + 500
        w.write(log, lo // 500)
        log.n = log_n
    w.close(log)
    return (time.thread_time() - c) / steps


def summary(pairs):
    ratios = [on / off - 1 for off, on in pairs]
    return {"step_ms_untraced": 1e3 * statistics.median(p[0] for p in pairs),
            "step_ms_traced": 1e3 * statistics.median(p[1] for p in pairs),
            "overhead_percent": 100 * statistics.median(ratios),
            "overhead_percent_min": 100 * min(ratios),
            "overhead_percent_max": 100 * max(ratios), "pairs": pairs}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--compute-time", type=float, default=0.005)
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "bench-trace"))
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    data = os.path.join(a.work, "mnist-packed")
    records = a.ranks * 4 * a.steps
    if not is_dataset(data):
        generate(data, preset="mnist", records=records, format="packed", encoding="raw",
                 shards=2, force=True)
    print(f"bench_trace: {a.ranks} ranks, {a.epochs} x {a.steps} steps of "
          f"{1e3 * a.compute_time:g} ms emulated compute, {a.repeat} repeats", flush=True)
    result = {"config": vars(a), "writer_cpu_us_per_step": 1e6 * writer_cost(a.work)}
    result["idle"] = summary(series(a, data, "idle"))
    busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        result["busy"] = summary(series(a, data, "busy"))
    finally:
        busy.kill()
        busy.wait()
    for k in ("idle", "busy"):
        s = result[k]
        print(f"{k:5s}: step {s['step_ms_untraced']:.3f} ms untraced, "
              f"{s['step_ms_traced']:.3f} ms traced: overhead {s['overhead_percent']:+.2f}% "
              f"(median; {s['overhead_percent_min']:+.2f} to "
              f"{s['overhead_percent_max']:+.2f}% over repeats)")
    cost = result["writer_cpu_us_per_step"]
    print(f"writer: {cost:.1f} us of CPU per step = "
          f"{100 * cost / (1e3 * result['idle']['step_ms_untraced']):.2f}% of the untraced step")
    with open(os.path.join(a.work, "trace-overhead.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
