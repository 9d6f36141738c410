"""Accelerators per client: the most emulated accelerators (ranks) one node feeds at the
workload's AU threshold, for hpcio's naive and coordinated readers and DLIO 2.0.0, on the
same files, with the data in the page cache (so storage is not the limit: the client is).

    python benchmarks/bench_client.py [--dir /tmp/bench-client] [--workloads retinanet_b200
        unet3d_b200] [--contenders naive coordinated dlio] [--steps 6] [--venv .venv-dlio]

Per workload (MLPerf Storage v3.0's b200 files as hpcio ships them: batch, compute time, AU
threshold unchanged; the data scaled down to ``max ranks x batch x steps`` samples, unet3d's
records to its config's 2 MiB ``record_length_bytes_resize``):

* the files are made once by ``hpcio.datagen generate DIR --workload W --accelerator b200``
  in DLIO's layout (``train/img_<i>_of_<n>.<ext>``; unet3d's scaled records in hpcio's,
  which DLIO reads through links named as its generator names its files), and read into the
  page cache before every run (other jobs on a shared machine drop it); every run records
  (mincore) how much of them was resident as it started;
* a probe at ``n`` ranks is one run of ``--steps`` steps per rank: hpcio ``mpiexec -n n
  python -m hpcio.train --workload W --accelerator b200 --model emulate --reader R --cache
  asis --steps S --epochs 1``; DLIO ``mpiexec -n n dlio_benchmark workload=unet3d_h100`` with every
  value of the workload given as hydra overrides (format, files, record length, batch,
  compute time, ``train.total_training_steps=S``, ``reader.read_threads=1``: one loader
  process per rank, the fewest DLIO can have; the file's 8 or 4 would put 8-16 processes
  on each of the 2 cores);
* it passes when the run's AU (each tool's own: hpcio's ``au_percent``, each epoch's first
  step left out as MLPerf Storage does; DLIO's ``train_au_mean_percentage``) is at least
  the workload's threshold; the counts ``--counts`` are searched by
  :func:`hpcio.explain.accelerators.search` (the sweep's bisection: the smallest first,
  doubling, then bisection between the last pass and the first failure). One run per
  probe, not MLPerf's five: a figure of this machine, not a submission.

Per-sample CPU: user + system seconds of the whole job (the launcher, every rank and its
loader processes, their start-up included: ``getrusage(RUSAGE_CHILDREN)`` around the run)
over the samples it delivered, at the largest count that passed; for hpcio also the ranks'
own figure over their epochs (``counters.rusage`` in each rank's JSON, start-up excluded).
Why the next count fails: its AU and, from the same run, the node's CPU busy fraction
(``/proc/stat`` over the run) and, for hpcio, the step split (own wait for data, straggler
wait in the barrier) from its summary. The machine is 2 shared cores: every figure carries
the 1-minute load average before its run.
"""

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from hpcio.cache import read_file, resident_fraction  # noqa: E402
from hpcio.errors import HpcioError  # noqa: E402
from hpcio.explain.accelerators import search  # noqa: E402
from hpcio.fsutil import aligned_empty  # noqa: E402
from hpcio.measure.probes import cpu_jiffies, loadavg  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402
from hpcio.workloads import load as load_workload  # noqa: E402

#: per workload: most ranks probed (sizes the data), record bytes (None: the file's)
WORKLOADS = {"retinanet_b200": dict(max_ranks=32, record=None),
             "unet3d_b200": dict(max_ranks=16, record=2 << 20)}
COUNTS = (1, 2, 4, 8, 12, 16, 24, 32)


def run_job(cmd, cwd, env=None, timeout=900):
    """(completed process, CPU seconds of the job's processes, node CPU busy fraction,
    wall seconds)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    j0 = cpu_jiffies()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    j1 = cpu_jiffies()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return p, cpu, _busy(j0, j1), wall


def _busy(a, b):
    """Fraction of the node's CPU time busy between two /proc/stat samples
    (:func:`cpu_jiffies`: user, system, iowait, idle, total)."""
    if not a or not b:
        return None
    total = b[4] - a[4]
    idle = (b[2] - a[2]) + (b[3] - a[3])
    return (total - idle) / total if total else None


def make_data(a, name, spec, w):
    """The workload's files in DLIO's layout (made once), read into the page cache."""
    n = spec["max_ranks"] * w.batch * a.steps
    d = os.path.join(a.dir, f"{name}-{n}")
    if not os.path.exists(os.path.join(d, "hpcio.json")):
        cmd = [sys.executable, "-m", "hpcio.datagen", "generate", d, "--workload", name,
               "--records", str(n), "--no-progress", "--force"]
        if spec["record"]:
            side = int(spec["record"] ** 0.5)
            cmd += ["--shape", f"{side}x{side}x1"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if p.returncode:
            raise HpcioError(f"hpcio.datagen generate {d}: {p.stderr.strip()[-300:]}")
    from hpcio.data.dataset import open_dataset
    paths = list(open_dataset(d).paths)
    folder = d
    if not os.path.isdir(os.path.join(d, "train")):
        # hpcio's layout (a scaled record size): DLIO reads the same files through links
        # named as its own generator names them
        folder = os.path.join(d, "dlio")
        train = os.path.join(folder, "train")
        if not os.path.isdir(train):
            os.makedirs(train + ".tmp", exist_ok=True)
            ext = os.path.splitext(paths[0])[1]
            for i, path in enumerate(paths):
                os.symlink(path, os.path.join(train + ".tmp",
                                              f"img_{i:0{len(str(len(paths)))}d}_of_"
                                              f"{len(paths)}{ext}"))
            os.makedirs(os.path.join(folder, "valid"), exist_ok=True)  # DLIO lists it
            os.replace(train + ".tmp", train)
    return d, folder, paths


def warm(paths):
    """Every file read into the page cache (again: other jobs on a shared machine drop it)."""
    buf = aligned_empty(8 << 20)
    for path in paths:
        read_file(path, buf)


def dlio_env(venv):
    from bench_dlio import dlio_env as env
    return env(venv)


def dlio_cmd(a, w, data, out, n, ranks):
    """DLIO 2.0.0 with the workload's values as hydra overrides (its own retinanet and b200
    files are not in its wheel)."""
    fmt = "jpeg" if w.format == "jpeg" else "npz"
    rec = w.record_bytes if w.format == "jpeg" else WORKLOADS[w.name]["record"]
    vals = {"dataset.data_folder": data, "dataset.format": fmt,
            "dataset.num_files_train": n, "dataset.num_samples_per_file": 1,
            "dataset.num_files_eval": 0, "dataset.record_length": rec,
            "dataset.record_length_stdev": 0, "reader.batch_size": w.batch,
            "reader.read_threads": 1, "train.epochs": 1,
            "train.computation_time": w.compute_time,
            "train.total_training_steps": a.steps, "workflow.generate_data": "false",
            "workflow.train": "true", "workflow.checkpoint": "false",
            "workflow.evaluation": "false", "output.folder": out}
    return [launcher(), "-n", str(ranks), os.path.join(a.venv, "bin", "dlio_benchmark"),
            "workload=unet3d_h100", f"hydra.run.dir={out}"] + [
                f"++workload.{k}={v}" for k, v in vals.items()]


def probe_run(a, name, w, who, data, folder, paths, ranks, k):
    """One run of ``who`` at ``ranks`` ranks: its AU, samples/s, CPU per sample, why."""
    out = os.path.join(a.dir, "runs", f"{name}-{who}-n{ranks}-{k}")
    if os.path.exists(out):
        subprocess.run(["rm", "-rf", out], check=True)
    warm(paths)
    res = resident_fraction(paths)
    load = loadavg()
    if who == "dlio":
        os.makedirs(out)
        cmd = dlio_cmd(a, w, folder, out, len(paths), ranks)
        p, cpu, busy, wall = run_job(cmd, out, env=dlio_env(a.venv))
        for k, v in (("stdout.txt", p.stdout), ("stderr.txt", p.stderr)):
            with open(os.path.join(out, k), "w") as f:
                f.write(v)
        try:
            with open(os.path.join(out, "summary.json")) as f:
                m = json.load(f)["metric"]
            au, sps = m["train_au_mean_percentage"], m["train_throughput_mean_samples_per_second"]
        except (OSError, KeyError, ValueError):
            au = sps = None
        samples = ranks * w.batch * a.steps
        own = None
        split = ""
    else:
        cmd = [launcher(), "-n", str(ranks), sys.executable, "-m", "hpcio.train",
               "--workload", name, "--model", "emulate", "--data", data, "--reader", who,
               "--cache", "asis", "--steps", str(a.steps), "--epochs", "1", "--out", out,
               "--progress", "off"]
        p, cpu, busy, wall = run_job(cmd, ROOT)
        au = sps = own = None
        samples = 0
        split = ""
        if p.returncode == 0:
            with open(os.path.join(out, "summary.json")) as f:
                s = json.load(f)
            m = s["metrics"]
            au, sps, samples = m["au_percent"], m["samples_per_s"], m["records"]
            own_cpu = 0.0
            for rj in glob.glob(os.path.join(out, "rank-*.json")):
                with open(rj) as f:
                    for e in json.load(f)["epochs"]:
                        ru = e["counters"]["rusage"]
                        own_cpu += ru["utime"] + ru["stime"]
            own = own_cpu / samples if samples else None
            split = _split(s)
    ok = p.returncode == 0 and au is not None
    why = None if ok else _last_error(p.stderr + "\n" + p.stdout)
    return {"who": who, "ranks": ranks, "au": au, "samples_s": sps, "samples": samples,
            "cpu_s": cpu, "cpu_per_sample_ms": 1e3 * cpu / samples if samples else None,
            "own_cpu_per_sample_ms": 1e3 * own if own is not None else None,
            "node_busy": busy, "wall_s": wall, "resident": res, "load": load, "split": split,
            "error": why, "run": out}


def _last_error(text):
    """The last line of a failed job's output that says what went wrong."""
    lines = [x.strip() for x in text.splitlines() if x.strip() and "HYDRA_FULL_ERROR" not in x]
    errs = [x for x in lines if "Error" in x or "error" in x]
    return ((errs or lines or ["?"])[-1])[:200]


def _split(summary):
    """The step's split as the summary gives it (% of every step's wall, mean over ranks):
    own wait for data (stall), straggler wait in the barrier, other."""
    m = summary.get("metrics", {})
    return ", ".join(f"{label} {m.get(k) or 0:.0f}%" for k, label in (
        ("stall_percent", "own wait"), ("straggler_wait_percent", "straggler wait"),
        ("other_percent", "other")))


def reason(r, threshold):
    """Why a count failed, from its run."""
    if r["error"]:
        return f"did not run: {r['error']}"
    words = [f"AU {r['au']:.1f}% < {threshold:.0f}%"]
    if r["node_busy"] is not None:
        words.append(f"node CPU {100 * r['node_busy']:.0f}% busy"
                     + (" (CPU-bound)" if r["node_busy"] > 0.9 else ""))
    if r["split"]:
        words.append(r["split"])
    return "; ".join(words)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/tmp/bench-client", help="data and runs")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--contenders", nargs="+", default=["naive", "coordinated", "dlio"],
                   choices=["naive", "coordinated", "dlio"])
    p.add_argument("--steps", type=int, default=6, help="steps per rank of each run")
    p.add_argument("--counts", default=",".join(map(str, COUNTS)),
                   help="rank counts the search may probe (comma-separated)")
    p.add_argument("--venv", default=os.path.join(ROOT, ".venv-dlio"),
                   help="DLIO's venv (benchmarks/bench_dlio.py makes it)")
    p.add_argument("--max-ranks", type=int, default=None,
                   help="most ranks probed (sizes the data; default per workload: "
                        + ", ".join(f"{k} {v['max_ranks']}" for k, v in WORKLOADS.items())
                        + ")")
    p.add_argument("--out", default=None, help="JSON of every run (default DIR/client.json)")
    a = p.parse_args(argv)
    a.venv = os.path.abspath(a.venv)  # DLIO's runs start in their own directories
    counts = sorted({int(x) for x in a.counts.split(",")})
    if "dlio" in a.contenders and not os.path.exists(os.path.join(a.venv, "bin",
                                                                  "dlio_benchmark")):
        from bench_dlio import dlio_venv
        dlio_venv(a.venv)
    os.makedirs(os.path.join(a.dir, "runs"), exist_ok=True)
    results = []
    for name in a.workloads:
        w = load_workload(name)
        spec = dict(WORKLOADS[name])
        if a.max_ranks:
            spec["max_ranks"] = a.max_ranks
        data, folder, paths = make_data(a, name, spec, w)
        thr = 100 * w.au_threshold if w.au_threshold <= 1 else w.au_threshold
        for who in a.contenders:
            runs = {}

            def probe(n, who=who):
                r = probe_run(a, name, w, who, data, folder, paths, n, len(runs))
                runs[n] = r
                r["passed"] = r["au"] is not None and r["au"] >= thr
                print(f"  {name} {who} n={n}: AU {r['au']} samples/s {r['samples_s']} "
                      f"cpu/sample {r['cpu_per_sample_ms']} ms, node busy {r['node_busy']}, "
                      f"load {r['load']:.2f} -> {'pass' if r['passed'] else 'fail'}"
                      + (f" ({r['error']})" if r["error"] else ""), flush=True)
                return r["passed"]
            best = search([c for c in counts if c <= spec["max_ranks"]], probe)
            fail = min((n for n, r in runs.items() if not r["passed"] and n > best),
                       default=None)
            results.append({"workload": name, "who": who, "threshold": thr, "best": best,
                            "at_best": runs.get(best), "next": runs.get(fail),
                            "next_reason": reason(runs[fail], thr) if fail else
                            "every count probed passed", "runs": list(runs.values())})
    out = a.out or os.path.join(a.dir, "client.json")
    with open(out + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(out + ".tmp", out)
    print(table(results))
    print(f"wrote {out}")


def table(results):
    head = ("| workload | contender | accelerators (AU >= threshold) | samples/s at it | "
            "CPU ms/sample (job; ranks' own) | load | next count fails because |")
    lines = [head, "|" + "---|" * 7]
    for r in results:
        b = r["at_best"] or {}
        own, cpu = b.get("own_cpu_per_sample_ms"), b.get("cpu_per_sample_ms")
        cpu_s = "-" if cpu is None else f"{cpu:.2f}" + ("" if own is None else f"; {own:.2f}")
        load = f"{b['load']:.1f}" if b else "-"
        nxt = f"{r['next']['ranks']}: " if r["next"] else ""
        lines.append(f"| {r['workload']} | {r['who']} | {r['best']} | "
                     f"{b.get('samples_s') or 0:,.0f} | {cpu_s} | {load} | "
                     f"{nxt}{r['next_reason']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
