"""hpcio beside DLIO 2.0.0 on DLIO's own workloads, scaled down, on the very same files.

    python benchmarks/bench_dlio.py [--venv .venv-dlio] [--dir runs/bench-dlio]
                                    [--workloads unet3d resnet50] [--repeats 3]
                                    [--fraction 0.5] [--contenders dlio naive coordinated]

Contenders, each with 2 ranks (``--ranks``), cold cache before every run, interleaved
(A B C, then C B A, ...), medians of ``--repeats``:

* ``dlio``: ``dlio_benchmark workload=NAME`` (DLIO's own config file, shipped in its wheel)
  with hydra overrides for the scaled sizes, batch, epochs and compute time;
* ``naive`` / ``coordinated``: ``hpcio.train --workload NAME`` (DLIO's file as hpcio ships
  it) with the same values as flags, ``--cache cold``.

Workloads (DLIO's MLPerf Storage configs, scaled to this 2-core VM):

* ``unet3d`` from ``unet3d_h100``: npz, 64 files of one 4 MiB sample (2048x2048 uint8),
  batch 2 per rank. DLIO's size spread (``record_length_stdev``) is set to 0: hpcio's npz
  index takes one sample shape per dataset, and hpcio does not model the spread anyway.
* ``resnet50`` from ``resnet50_h100``: TFRecord, 8 files of 512 samples of ~112 KiB (the
  config's record length: a 338x338 uint8 image in a ``tf.train.Example``), batch 64 per
  rank.

Equal data: DLIO's own generator writes the files (``workflow.generate_data``, 2 ranks),
``python -m hpcio.datagen index DIR/train --out DIR-hpcio`` indexes those same files, and all
three contenders read them. ``--generator hpcio`` makes the data with ``hpcio.datagen
generate --workload`` at the same sizes instead (no DLIO needed: the test uses it).

The compute time per step is sized so that the ranks ask for ``--fraction`` of the
machine's limit: ``t = ranks x batch x record bytes / (fraction x BW)``, BW the median of 3
cold sequential reads of the same files (fadvise DONTNEED of every file, and as root
``drop_caches``, then 8 MiB reads into a page-aligned buffer). One more cold sequential
read is measured in every repeat, beside the runs; its median is the table's limit.

Figures, one run each, as each tool defines them:

* DLIO: its output folder's ``summary.json``: ``train_au_mean_percentage`` (per rank and
  epoch: compute of steps 2..N over the epoch's wall time less the first step's load and
  compute, mean over ranks; the first step excluded) and
  ``train_throughput_mean_samples_per_second`` (per rank and epoch: steps x batch over the
  epoch's wall time, first step and the loader's start included; summed over ranks).
* hpcio: its run's ``summary.json``: ``au_percent`` (compute over wall, each epoch's first
  step excluded, MLPerf Storage's rule, mean over ranks) and ``samples_per_s`` (records
  delivered over whole epochs, the first step included).
* ``x seq``: samples/s x mean record bytes (the hpcio index's record lengths: the same for
  all three) over the cold sequential read: how much of the machine's limit a run took in.
  DLIO's own "MB/s" is samples/s x the configured record length, not measured, so it is
  not used.

DLIO's venv (``--venv``, default ``./.venv-dlio``, which git ignores) is made here on the
first run, and reused while its marker file names the same packages:

* ``python -m venv`` plus a ``.pth`` file naming this venv's site-packages, so DLIO uses
  the project's torch (CPU), mpi4py (with the mpich wheel's ``libmpi``, found through
  ``MPI4PY_LIBMPI``), numpy, h5py, pandas, Pillow and PyYAML instead of a second copy;
* ``pip install --no-deps dlio_benchmark==2.0.0 pydftracer==1.0.2``: DLIO's declared
  requirements also pull in TensorFlow (the full build), DALI for CUDA 11, torchvision and
  torchaudio, which its npz and TFRecord paths on CPUs never import; pydftracer is
  required in practice (without it DLIO's fallback ``Profile`` stub raises TypeError on
  import);
* ``pip install tensorflow-cpu==2.21.0 hydra-core omegaconf psutil`` with their
  dependencies: DLIO's ``main`` imports TensorFlow unconditionally (through
  ``profiler/tf_profiler.py``) and its TFRecord generator, reader and loader use it;
  hydra and omegaconf parse its configs; psutil is read in its stats;
* ``VENV/bin/tfrecord2idx``: DLIO's TFRecord generator runs DALI's ``tfrecord2idx`` after
  each file (index files only DALI's reader uses); this is that script's logic (one
  "offset length" line per record) instead of installing DALI.

The venv comes to ~1.5 GB (TensorFlow for CPUs) and took ~1 min to make here.

``--setup-only`` makes the venv and stops. The VM's disk sits on the host's page cache,
so "cold" figures are upper bounds (``../shared/BENCHMARKING.md``).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcio.cache import PIECE, drop_caches, read_file, resident_fraction  # noqa: E402
from hpcio.cli import ArgumentParser  # noqa: E402
from hpcio.data.dataset import is_dataset, open_dataset  # noqa: E402
from hpcio.errors import HpcioError, guard  # noqa: E402
from hpcio.fsutil import aligned_empty, evict  # noqa: E402
from hpcio.measure.probes import loadavg, wait_quiet  # noqa: E402
from hpcio.measure.rundir import RunDir  # noqa: E402
from hpcio.mpiutil import launcher  # noqa: E402

DLIO = ["dlio_benchmark==2.0.0", "pydftracer==1.0.2"]
DLIO_DEPS = ["tensorflow-cpu==2.21.0", "hydra-core>=1.3.2", "omegaconf>=2.2.0",
             "psutil>=5.9.8"]
#: scaled workloads: DLIO's config, files, samples per file, record length (None: the
#: config's), batch per rank, the extension of its files
WORKLOADS = {
    "unet3d": dict(config="unet3d_h100", files=64, per_file=1, record=4 << 20, batch=2,
                   ext=".npz"),
    "resnet50": dict(config="resnet50_h100", files=8, per_file=512, record=None, batch=64,
                     ext=".tfrecord"),
    # MLPerf Storage v3.0's (mlcommons/storage's files, as hpcio ships them: DLIO reads
    # them from a hydra search path, its wheel has none)
    "unet3d_b200": dict(config="unet3d_b200", files=64, per_file=1, record=4 << 20,
                        batch=2, ext=".npz", v3=True),
    "retinanet_b200": dict(config="retinanet_b200", files=384, per_file=1, record=None,
                           batch=8, ext=".jpeg", v3=True),
}
TFRECORD2IDX = '''#!/usr/bin/env python3
"""tfrecord2idx FILE IDX: one "offset length" line per record of a TFRecord file."""
import struct, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "w") as idx:
    while True:
        start = f.tell()
        head = f.read(12)
        if len(head) < 12:
            break
        f.seek(struct.unpack("<Q", head[:8])[0] + 4, 1)
        idx.write(f"{start} {f.tell() - start}\\n")
'''


def dlio_venv(venv):
    """Make (or reuse) DLIO's venv as the module docstring says; its python's path."""
    py = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".hpcio-dlio")
    want = " ".join(DLIO + DLIO_DEPS)
    if os.path.exists(marker) and open(marker).read() == want:
        return py
    print(f"making DLIO's venv in {venv} (with TensorFlow for CPUs: ~1.5 GB) ...",
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    ours = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    with open(os.path.join(site, "hpcio-project.pth"), "w") as f:
        f.write("".join(p + "\n" for p in sorted(ours)))
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["--no-deps"] + DLIO, check=True)
    subprocess.run(pip + DLIO_DEPS, check=True)
    print("(pip's lines on DALI, tensorflow, torchvision and torchaudio not installed are "
          "expected: DLIO's npz and TFRecord paths on CPUs do not import them)", flush=True)
    script = os.path.join(venv, "bin", "tfrecord2idx")
    with open(script, "w") as f:
        f.write(TFRECORD2IDX)
    os.chmod(script, 0o755)
    subprocess.run([py, "-c", "import dlio_benchmark.main"], check=True, env=dlio_env(venv),
                   capture_output=True)
    with open(marker, "w") as f:
        f.write(want)
    return py


def dlio_env(venv):
    """DLIO's processes: its venv's scripts first, mpi4py pointed at this venv's libmpi."""
    env = dict(os.environ, PATH=os.path.join(os.path.abspath(venv), "bin") + os.pathsep
               + os.environ.get("PATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    lib = os.path.join(os.path.realpath(sys.prefix), "lib")
    if any(os.path.exists(os.path.join(lib, n)) for n in ("libmpi.so.12", "libmpi.so")):
        env["MPI4PY_LIBMPI"] = lib
    return env


def run(cmd, what, cwd=None, env=None, timeout=3600):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    if p.returncode:
        tail = (p.stderr.strip() or p.stdout.strip() or "?").splitlines()[-1]
        raise HpcioError(f"{what} failed ({p.returncode}): {tail}")
    return p


def dlio_cmd(a, w, data, out, **over):
    """``dlio_benchmark workload=CONFIG`` under mpiexec with the scaled values as hydra
    overrides (``++workload.SECTION.KEY=VALUE``)."""
    vals = {"dataset.data_folder": data, "dataset.num_files_train": w["files"],
            "dataset.num_samples_per_file": w["per_file"], "dataset.num_files_eval": 0,
            "reader.batch_size": w["batch"], "train.epochs": a.epochs,
            "workflow.checkpoint": False, "workflow.evaluation": False,
            "output.folder": out, **over}
    if w["record"]:
        vals.update({"dataset.record_length": w["record"], "dataset.record_length_stdev": 0,
                     "dataset.record_length_bytes": w["record"],
                     "dataset.record_length_bytes_stdev": 0})
    search = [f"hydra.searchpath=[file://{v3_configs(a.dir)}]"] if w.get("v3") else []
    return [launcher(), "-n", str(a.ranks), os.path.join(a.venv, "bin", "dlio_benchmark"),
            f"workload={w['config']}", f"hydra.run.dir={out}"] + search + [
                f"++workload.{k}={str(v).lower() if isinstance(v, bool) else v}"
                for k, v in vals.items()]


def v3_configs(where):
    """A hydra search path whose ``workload/`` holds the v3.0 configs hpcio ships."""
    from hpcio.workloads import WORKLOADS as SHIPPED
    d = os.path.join(os.path.abspath(where), "dlio-configs")
    os.makedirs(os.path.join(d, "workload"), exist_ok=True)
    for w in WORKLOADS.values():
        if w.get("v3"):
            shutil.copyfile(SHIPPED[w["config"]], os.path.join(d, "workload",
                                                               w["config"] + ".yaml"))
    return d


def make_data(a, name, w):
    """The workload's files (DLIO's generator, or hpcio's) and hpcio's index of them."""
    d = os.path.join(a.dir, f"{name}-{a.generator}-{w['files']}x{w['per_file']}"
                     f"-{w['record'] or 'config'}")
    idx = d + "-hpcio" if a.generator == "dlio" else d
    if is_dataset(idx):
        return d, open_dataset(idx)
    if a.generator == "dlio":
        train = os.path.join(d, "train")
        if not os.path.isdir(train) or sum(f.endswith(w["ext"]) for f in os.listdir(train)) \
                != w["files"]:
            out = os.path.join(a.dir, f"{name}-generate")
            os.makedirs(out, exist_ok=True)
            print(f"DLIO generates {d} ...", flush=True)
            run(dlio_cmd(a, w, d, out, **{"workflow.generate_data": True,
                                          "workflow.train": False}),
                "DLIO's generator", cwd=out, env=dlio_env(a.venv))
        run([sys.executable, "-m", "hpcio.datagen", "index", os.path.join(d, "train"),
             "--out", idx], "hpcio.datagen index", cwd=ROOT)
    else:
        from hpcio.workloads import load
        rec = w["record"] or load(w["config"]).record_bytes
        side = int(rec ** 0.5)
        run([launcher(), "-n", str(a.ranks), sys.executable, "-m", "hpcio.datagen",
             "generate", d, "--workload", w["config"], "--records",
             str(w["files"] * w["per_file"]), "--shape", f"{side}x{side}x1", "--no-progress"],
            "hpcio.datagen generate", cwd=ROOT)
    return d, open_dataset(idx)


def make_cold(paths):
    """Evict the files (fadvise DONTNEED; as root also drop_caches); the resident fraction
    left, which the table's runs require to be ~0."""
    for p in paths:
        evict(p)
    if os.geteuid() == 0:
        drop_caches()
    return resident_fraction(paths)


def sequential_read(paths):
    """Bytes per second of one cold sequential read of ``paths``."""
    make_cold(paths)
    buf = aligned_empty(PIECE)
    t = time.perf_counter()
    n = sum(read_file(p, buf) for p in paths)
    return n / (time.perf_counter() - t)


def train(a, w, who, data, ds, compute, out):
    """One run of a contender; its samples/s and AU as that tool reports them."""
    quiet = wait_quiet(a.wait_quiet, cpu=0.25) if a.wait_quiet else None
    left = make_cold(ds.paths)
    l0 = loadavg()
    t = time.perf_counter()
    if who == "dlio":
        os.makedirs(out)
        run(dlio_cmd(a, w, data, out, **{"workflow.generate_data": False,
                                         "workflow.train": True,
                                         "train.computation_time": f"{compute:.6f}"}),
            f"DLIO ({out})", cwd=out, env=dlio_env(a.venv))
        with open(os.path.join(out, "summary.json")) as f:
            m = json.load(f)["metric"]
        au, sps = m["train_au_mean_percentage"], m["train_throughput_mean_samples_per_second"]
    else:
        cmd = [launcher(), "-n", str(a.ranks), sys.executable, "-m", "hpcio.train",
               "--workload", w["config"], "--data", ds.root, "--reader", who,
               "--batch", str(w["batch"]), "--epochs", str(a.epochs),
               "--compute-time", f"{compute:.6f}", "--cache", "cold", "--out", out,
               "--progress", "off"] + (["--drop-caches"] if os.geteuid() == 0 else [])
        run(cmd, f"hpcio {who} ({out})", cwd=ROOT)
        m = RunDir(out).summary()[0]["metrics"]
        au, sps = m["au_percent"], m["samples_per_s"]
    return {"who": who, "au": au, "samples_s": sps, "wall_s": time.perf_counter() - t,
            "resident_before": left, "load_before": l0, "load_after": loadavg(),
            "quiet": quiet["quiet"] if quiet else None, "run": out}


def med(xs):
    return statistics.median(xs), min(xs), max(xs)


def table(results, limits, records, contenders):
    """Markdown rows: per workload and contender, median (min-max) samples/s, x seq and
    AU %, and each hpcio reader's samples/s over DLIO's in the same repeat."""
    rows = ["| workload | contender | samples/s | x seq | AU % | runs |",
            "|---|---|---|---|---|---|"]
    ratios = []
    for name in limits:
        bw = statistics.median(limits[name])
        for who in contenders:
            rs = [r for r in results if r["workload"] == name and r["who"] == who]
            if not rs:
                continue
            s, x, au = (med([f(r) for r in rs]) for f in (
                lambda r: r["samples_s"], lambda r: r["samples_s"] * records[name] / bw,
                lambda r: r["au"]))
            rows.append(f"| {name} | {'DLIO 2.0.0' if who == 'dlio' else 'hpcio ' + who} | "
                        f"{s[0]:,.1f} ({s[1]:,.1f}-{s[2]:,.1f}) | {x[0]:.2f} "
                        f"({x[1]:.2f}-{x[2]:.2f}) | {au[0]:.1f} ({au[1]:.1f}-{au[2]:.1f}) | "
                        f"{len(rs)} |")
        for who in contenders:
            pairs = [(r["samples_s"], d["samples_s"]) for r in results for d in results
                     if r["workload"] == d["workload"] == name and r["repeat"] == d["repeat"]
                     and r["who"] == who != "dlio" and d["who"] == "dlio"]
            if pairs:
                q = med([x / y for x, y in pairs])
                ratios.append(f"{name}: hpcio {who} / DLIO samples/s {q[0]:.2f}x "
                              f"({q[1]:.2f}-{q[2]:.2f})")
    return rows, ratios


def main(argv=None):
    p = ArgumentParser(prog="python benchmarks/bench_dlio.py",
                       description="DLIO 2.0.0 vs hpcio naive vs hpcio coordinated on DLIO's "
                                   "U-Net3D (npz) and ResNet-50 (TFRecord) workloads and "
                                   "MLPerf Storage v3.0's U-Net3D and RetinaNet (JPEG) on "
                                   "b200, scaled "
                                   "down, same files, cold cache, interleaved repeats.")
    p.add_argument("--venv", default=os.path.join(ROOT, ".venv-dlio"),
                   help="DLIO's venv, made here on first use (default ./.venv-dlio, "
                        "ignored by git): dlio_benchmark 2.0.0 without its declared "
                        "dependencies, tensorflow-cpu, hydra; this venv's torch, mpi4py and "
                        "numpy through a .pth file")
    p.add_argument("--setup-only", action="store_true", help="make DLIO's venv and stop")
    p.add_argument("--dir", default=os.path.join(ROOT, "runs", "bench-dlio"),
                   help="datasets and run directories go here")
    p.add_argument("--workloads", nargs="+", default=["unet3d", "resnet50"],
                   choices=list(WORKLOADS))
    p.add_argument("--contenders", nargs="+", default=["dlio", "naive", "coordinated"],
                   choices=("dlio", "naive", "coordinated"))
    p.add_argument("--generator", default="dlio", choices=("dlio", "hpcio"),
                   help="who writes the files (default: DLIO's generator; hpcio indexes "
                        "them)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--fraction", type=float, default=0.5,
                   help="share of the cold sequential read the ranks' compute asks for")
    p.add_argument("--files", type=int, default=None, help="files per workload (scaled)")
    p.add_argument("--per-file", type=int, default=None, help="samples per file")
    p.add_argument("--record-bytes", type=int, default=None, help="bytes per sample")
    p.add_argument("--batch", type=int, default=None, help="samples per rank and step")
    p.add_argument("--max-load", type=float, default=1.5,
                   help="wait (up to 10 min) for a 1-minute load average below this first")
    p.add_argument("--wait-quiet", type=float, default=15.0, metavar="S",
                   help="before each run wait up to S s for idle CPUs and disks (0: no)")
    p.add_argument("--json", default=None, help="write every figure here too")
    a = p.parse_args(argv)
    a.venv = os.path.abspath(a.venv)
    if "dlio" in a.contenders or a.generator == "dlio":
        dlio_venv(a.venv)
    if a.setup_only:
        return 0
    os.makedirs(a.dir, exist_ok=True)
    loads = {w: dict(WORKLOADS[w], **{k: v for k, v in (
        ("files", a.files), ("per_file", a.per_file), ("record", a.record_bytes),
        ("batch", a.batch)) if v is not None}) for w in a.workloads}

    data, limits, records, compute = {}, {}, {}, {}
    for name, w in loads.items():
        data[name] = make_data(a, name, w)
    t_end = time.monotonic() + 600
    while (loadavg() or 0) >= a.max_load and time.monotonic() < t_end:
        time.sleep(10)
    print(f"load average {loadavg()} at start", flush=True)
    for name, w in loads.items():
        ds = data[name][1]
        records[name] = ds.nbytes() / ds.records
        bw = statistics.median(sequential_read(ds.paths) for _ in range(3))
        compute[name] = a.ranks * w["batch"] * records[name] / (a.fraction * bw)
        limits[name] = []
        print(f"{name}: {ds.records} samples of {records[name] / 1024:.0f} KiB in "
              f"{len(ds.paths)} files; cold sequential {bw / 2 ** 20:,.0f} MiB/s; compute "
              f"{compute[name] * 1e3:.2f} ms per step of {w['batch']} x {a.ranks} ranks "
              f"({a.fraction:.0%} of it)", flush=True)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = []
    for rep in range(a.repeats):
        order = a.contenders if rep % 2 == 0 else a.contenders[::-1]
        for name, w in loads.items():
            data_dir, ds = data[name]
            limits[name].append(sequential_read(ds.paths))
            for who in order:
                out = os.path.join(a.dir, f"{stamp}-{name}-{who}-{rep}")
                r = train(a, w, who, data_dir, ds, compute[name], out)
                r.update(workload=name, repeat=rep, compute_s=compute[name])
                results.append(r)
                print(f"  {name:<8} {who:<11} {r['samples_s']:9.1f} samples/s  AU "
                      f"{r['au']:5.1f}%  ({r['wall_s']:.0f} s, load {r['load_before']})",
                      flush=True)
    rows, ratios = table(results, limits, records, a.contenders)
    print("\n" + "\n".join(f"{n}: cold sequential read {statistics.median(v) / 2 ** 20:,.0f} "
                           f"MiB/s (median of {len(v)}), compute {compute[n] * 1e3:.2f} ms "
                           f"per step" for n, v in limits.items()))
    print("\n".join(rows + ratios))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"limits_bytes_s": limits, "record_bytes": records,
                       "compute_s": compute, "workloads": loads, "runs": results,
                       "table": rows, "ratios": ratios}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="bench_dlio"))
