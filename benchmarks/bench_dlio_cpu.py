"""DLIO's own client CPU per sample, the figure ``hpcio.simulate published`` predicts with.

    python benchmarks/bench_dlio_cpu.py [--venv .venv-dlio] [--dir runs/bench-dlio-cpu]
                                        [--workloads unet3d retinanet] [--repeats 3]
                                        [--json hpcio/simulate/platforms/published/dlio_cpu.json]

What it measures: the CPU seconds (user + system, of DLIO's whole process tree: mpiexec, the
rank, its DataLoader workers) that DLIO 2.0.0 spends per sample on MLPerf Storage v3.0's
b200 training workloads, with the records as the workload makes them (DLIO's own generator,
the configs' record sizes) and the page cache warm, so nothing waits for a device:

DLIO 2.0.0 ships no b200 config, so its ``unet3d_h100`` (PyTorch's loader) runs with the
v3.0 values as overrides:

* ``unet3d``: npz, one sample of 146,600,628 bytes per file (``unet3d_b200``), batch 7,
  4 read threads, the sample handed to the trainer resized to 2 MiB (the config's
  ``record_length_bytes_resize``);
* ``retinanet``: JPEG, 322,957 bytes per file (``retinanet_b200``), batch 24, 8 read
  threads.

How: one rank, ``computation_time`` 0, two runs that differ only in the files they read
(``--small`` and ``--large`` epochs' worth), each timed by ``getrusage(RUSAGE_CHILDREN)``
around DLIO's launch. DLIO's start (Python, TensorFlow's import, hydra, MPI) costs the same
in both, so the difference of CPU seconds over the difference of samples is the CPU per
sample of the loader and the step loop: reading, decoding (npz: ``np.load``; JPEG: PIL's
decoder, which DLIO's image reader runs on every file), handing the batch to the main
process, the step's bookkeeping and barrier. Median over ``--repeats`` pairs. The figure is
per logical CPU of this machine (its model in the output); a client's ``host_cpu_count``
counts logical CPUs too. Beside it, the CPU per byte of reading the same files whole from the
page cache (``read_s_per_byte``): on a client reading over the network that copy happens while
the bytes arrive, so the simulation charges it to the transfer, not after it.

The result is written as JSON (``--json``) for ``hpcio.simulate published``, with the
machine, load averages and every run's figures.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import bench_dlio  # noqa: E402  (DLIO's venv, env and command line)
from hpcio.fsutil import atomic_write  # noqa: E402

WORKLOADS = {
    # name: (config, format, record bytes, batch, read_threads, files small, files large)
    "unet3d": ("unet3d_b200", "npz", 146_600_628, 7, 4, 7, 49),
    "retinanet": ("retinanet_b200", "jpeg", 322_957, 24, 8, 240, 1200),
}
#: what each v3.0 config sets beyond those: unet3d_b200's record_length_bytes_resize (the
#: sample DLIO hands its trainer is a 2 MiB stand-in, not the 140 MiB it read)
EXTRA = {"unet3d": {"dataset.record_length_resize": 2_097_152}, "retinanet": {}}
#: DLIO 2.0.0 ships no b200 or retinanet config: its unet3d_h100 (PyTorch's loader) with the
#: v3.0 values above as overrides
BASE = "unet3d_h100"


def loadavg():
    return round(os.getloadavg()[0], 2)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_run(a, name, data, files, k):
    """DLIO reading ``files`` files once: (CPU s, wall s, samples, DLIO's samples/s)."""
    config, fmt, rec, batch, threads, _, _ = WORKLOADS[name]
    w = {"config": BASE, "files": files, "per_file": 1, "record": rec, "batch": batch}
    out = os.path.join(a.dir, f"{name}-run{files}-{k}")
    os.makedirs(out, exist_ok=True)
    cmd = bench_dlio.dlio_cmd(a, w, data, out, **{
        "dataset.format": fmt, "reader.read_threads": threads,
        "workflow.generate_data": False, "workflow.train": True,
        "train.computation_time": 0, "dataset.num_files_train": files, **EXTRA[name]})
    c0, t0 = children_cpu(), time.perf_counter()
    bench_dlio.run(cmd, f"DLIO ({out})", cwd=out, env=bench_dlio.dlio_env(a.venv))
    cpu, wall = children_cpu() - c0, time.perf_counter() - t0
    with open(os.path.join(out, "summary.json")) as f:
        sps = json.load(f)["metric"]["train_throughput_mean_samples_per_second"]
    return {"files": files, "cpu_s": cpu, "wall_s": wall, "samples": files // batch * batch,
            "dlio_samples_per_s": sps, "load": loadavg()}


def read_cost(data, repeats=3):
    """CPU seconds per byte of reading the workload's files whole from the page cache
    (Python's ``open().read()``, as np.load and PIL get their bytes): the part of DLIO's
    CPU per sample that, on a network file system, is spent while the bytes arrive."""
    paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(os.path.join(data, "train"))
                   for f in fs)
    for p in paths:                              # into the page cache first
        with open(p, "rb") as f:
            f.read()
    per = []
    for _ in range(repeats):
        t, n = time.process_time(), 0
        for p in paths:
            with open(p, "rb") as f:
                n += len(f.read())
        per.append((time.process_time() - t) / n)
    return statistics.median(per)


def measure(a, name):
    config, fmt, rec, batch, threads, small, large = WORKLOADS[name]
    data = os.path.join(a.dir, f"{name}-data")
    w = {"config": BASE, "files": large, "per_file": 1, "record": rec, "batch": batch}
    train = os.path.join(data, "train")
    if not os.path.isdir(train) or len(os.listdir(train)) < large:
        gen = os.path.join(a.dir, f"{name}-generate")
        os.makedirs(gen, exist_ok=True)
        print(f"DLIO generates {large} {fmt} files of {rec:,} B in {data} ...", flush=True)
        bench_dlio.run(bench_dlio.dlio_cmd(a, w, data, gen, **{
            "dataset.format": fmt, "workflow.generate_data": True, "workflow.train": False}),
            "DLIO's generator", cwd=gen, env=bench_dlio.dlio_env(a.venv))
    read = read_cost(data)
    print(f"  {name}: reading the files whole costs {read * 2**20 * 1e3:.2f} ms CPU per "
          f"MiB (load {loadavg()})", flush=True)
    if a.read_only:
        return {"read_s_per_byte": read}
    pairs = []
    for k in range(a.repeats):
        lo = one_run(a, name, data, small, k)
        hi = one_run(a, name, data, large, k)
        per = (hi["cpu_s"] - lo["cpu_s"]) / (hi["samples"] - lo["samples"])
        pairs.append({"small": lo, "large": hi, "cpu_s_per_sample": per})
        print(f"  {name} pair {k + 1}: {per * 1e3:.2f} ms CPU/sample "
              f"(CPU {lo['cpu_s']:.1f} s / {lo['samples']} samples, {hi['cpu_s']:.1f} s / "
              f"{hi['samples']}; load {lo['load']}-{hi['load']})", flush=True)
    return {"config": config, "format": fmt, "record_bytes": rec, "batch": batch,
            "read_threads": threads,
            "cpu_s_per_sample": statistics.median(p["cpu_s_per_sample"] for p in pairs),
            "read_s_per_byte": read, "pairs": pairs}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python benchmarks/bench_dlio_cpu.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--venv", default=os.path.join(os.path.dirname(HERE), ".venv-dlio"),
                   help="DLIO's venv (bench_dlio.py makes it on first use)")
    p.add_argument("--dir", default=os.path.join(os.path.dirname(HERE), "runs",
                                                 "bench-dlio-cpu"))
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None, help="write the figures here (atomically)")
    p.add_argument("--read-only", action="store_true",
                   help="measure only the cost of reading the files (the data must exist) "
                        "and add it to --json's earlier DLIO figures")
    a = p.parse_args(argv)
    a.ranks, a.epochs = 1, 1
    if a.read_only and not a.json:
        p.error("--read-only adds to --json: give it")
    if not a.read_only:
        bench_dlio.dlio_venv(a.venv)
    os.makedirs(a.dir, exist_ok=True)
    res = {"machine": {"cpu": cpu_model(), "logical_cpus": os.cpu_count(),
                       "load_before": os.getloadavg()},
           "dlio": "dlio_benchmark 2.0.0", "method": __doc__.split("\n\n")[2].strip(),
           "workloads": {}}
    if a.read_only:
        with open(a.json) as f:
            res = json.load(f)
    for name in a.workloads:
        got = measure(a, name)
        if a.read_only:
            res["workloads"][name].update(got)
            res["workloads"][name]["read_load"] = os.getloadavg()
            continue
        res["workloads"][name] = got
        print(f"{name}: {got['cpu_s_per_sample'] * 1e3:.2f} ms CPU per "
              f"sample (median of {a.repeats})", flush=True)
    res["machine"]["load_after" if not a.read_only else "load_after_read"] = os.getloadavg()
    if a.json:
        data = (json.dumps(res, indent=1) + "\n").encode()
        atomic_write(a.json, lambda f: f.write(data))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
