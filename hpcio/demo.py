"""``make run`` (docs/demo.md): naive against coordinated reads where the difference lives, on a
parallel file system, with the compute of a named accelerator; then the same on local disk;
and, when asked (``--checkpoints``), naive against coordinated checkpoints on both.

As root it brings up the single-machine GlusterFS testbed (``scripts/pfs-local.sh``: 500 us per
request, client caches off), or uses the one already up (and leaves it up), copies a small
synthetic ImageNet-like LMDB onto it, measures its cold sequential bandwidth, and runs
``hpcio.train`` with the naive and the coordinated reader at 1, 2 and 4 ranks, 3 repeats
interleaved, each run cold: the dataset's pages evicted and ``drop_caches``, which on this
testbed also clears the bricks' page cache (the servers of a real parallel file system keep
theirs out of a client's reach). A testbed it started is stopped at the end, also on error.
Without root the testbed is skipped, with one line saying so. Then the same on local disk.

Each step computes what ResNet-50 needs on ``--accelerator`` (DLIO's workload configs, as
MLPerf Storage uses them). Per storage it prints, per rank count, the median stall % and AU %
of each reader with their range over the repeats, and writes ``hpcio.analyze``'s report
given the storage's measured bandwidth. Everything goes under ``--workdir`` (default
``./demo``): the dataset (reused when there), ``runs/``, ``report-<time>-<storage>/``.

The checkpoint part, skipped unless asked (``--checkpoints WRITERS``; ``make run`` leaves it
out): per storage, a tiny llama3_8b checkpoint (``--checkpoint-scale``, 105 MiB at 0.001)
written twice and restored by each writer (``hpcio.checkpoint run``: coordinated, dcp,
torch_save) at the same rank counts, its write and read GiB/s, and ``hpcio.analyze``'s
checkpoint findings over those runs (``report-<time>-<storage>-checkpoints/``);
``--checkpoints-only`` runs only that part.
"""

import contextlib
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from .cache import describe, drop_caches, read_file
from .checkpoint.command import WRITER_NAMES
from .cli import ArgumentParser, add_plan_arguments, integer, number
from .data.dataset import is_dataset, open_dataset
from .errors import HpcioError, guard
from .explain.summary import figures_line
from .fsutil import aligned_empty, evict, fs_type
from .measure.rundir import RunDir
from .mpiutil import launcher

__all__ = ["ACCELERATORS", "compute_per_step", "plan", "testbed", "testbed_skipped",
           "sequential_mb_s", "table", "main"]

# ResNet-50 training's compute, as DLIO emulates it for MLPerf Storage: (train.computation_time
# in seconds, reader.batch_size) from argonne-lcf/dlio_benchmark,
# dlio_benchmark/configs/workload/resnet50_{v100,a100,h100}.yaml (commit e1919d7).
ACCELERATORS = {"v100": (0.195, 64), "a100": (0.435, 400), "h100": (0.224, 400)}
READERS = ("naive", "coordinated")
DELAY_US = 500
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "pfs-local.sh")
STATE = "/run/hpcio-pfs/state"
NO_TESTBED = "GlusterFS testbed skipped (--no-testbed)"


def compute_per_step(accelerator, batch):
    """Seconds a step of ``batch`` samples per rank computes on ``accelerator``: DLIO's time
    per sample (computation_time / batch_size), times the batch."""
    try:
        seconds, per = ACCELERATORS[accelerator]
    except KeyError:
        raise HpcioError(f"--accelerator {accelerator!r}: choose from "
                         f"{', '.join(ACCELERATORS)}")
    return seconds / per * batch


def plan(ranks, repeats, readers=READERS):
    """The runs in the order they are made, as (repeat, ranks, reader): every point once per
    repeat, the readers' order flipped each repeat, so a slow minute of a shared machine
    hits both alike."""
    return [(rep, n, r) for rep in range(repeats) for n in ranks
            for r in (readers if rep % 2 == 0 else readers[::-1])]


def sequential_mb_s(paths, repeat=3, drop=False):
    """The storage's limit for these files: the median of ``repeat`` cold sequential reads
    (evicted first, and ``drop_caches`` with ``drop``: a server on this kernel forgets them
    too; 8 MiB reads into a page-aligned buffer, like ``dd bs=8M``), MB/s."""
    buf = aligned_empty(8 << 20)
    rates = []
    for _ in range(repeat):
        for p in paths:
            evict(p)
        if drop and not drop_caches():
            raise HpcioError("drop_caches refused (needs root)")
        t = time.perf_counter()
        n = sum(read_file(p, buf) for p in paths)
        rates.append(n / (time.perf_counter() - t) / 1e6)
    return statistics.median(rates)


# ---- the testbed ------------------------------------------------------------------------
@dataclass(frozen=True)
class Testbed:
    mount: str
    delay_us: int
    started: bool


def _pfs(*args):
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _state():
    """What ``pfs-local.sh start`` recorded of the testbed up (MOUNT, DELAY_US, ...)."""
    with open(STATE) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def testbed_skipped(euid=None):
    """Why the testbed cannot be used here (one line), or None."""
    if (os.geteuid() if euid is None else euid) != 0:
        return ("GlusterFS testbed skipped: it needs root (a FUSE mount, a network namespace, "
                "drop_caches for the servers' cache); run `sudo make run` for it (a testbed "
                "already up from `scripts/pfs-local.sh start` is used and left up)")
    if not os.access(SCRIPT, os.X_OK):
        return f"GlusterFS testbed skipped: {SCRIPT} not found (hpcio without its scripts/)"
    return None


@contextlib.contextmanager
def testbed(delay_us=DELAY_US, mount=None, data=None):
    """The GlusterFS testbed: the one up already (left up), else one started here with
    ``delay_us`` per request and stopped on the way out, whatever happens."""
    if _pfs("status").returncode == 0:
        st = _state()
        yield Testbed(st["MOUNT"], int(st.get("DELAY_US") or 0), started=False)
        return
    extra = (["--mount", mount] if mount else []) + (["--data", data] if data else [])
    p = _pfs("start", "--delay-us", delay_us, *extra)
    if p.returncode:
        raise HpcioError("the GlusterFS testbed did not start: "
                         + (p.stderr.strip().splitlines() or ["?"])[-1])
    print(p.stdout.strip(), flush=True)
    try:
        yield Testbed(_state()["MOUNT"], delay_us, started=True)
    finally:
        p = _pfs("stop")
        print((p.stdout + p.stderr).strip(), flush=True)


def _copy_dataset(src, dst):
    """``src`` copied to ``dst`` unless the same dataset is there (a new name, then renamed:
    a copy cut short is never taken for a dataset)."""
    with open(os.path.join(src, "hpcio.json"), "rb") as f:
        manifest = f.read()
    if is_dataset(dst):
        with open(os.path.join(dst, "hpcio.json"), "rb") as f:
            if f.read() == manifest:
                return False
    shutil.rmtree(dst, ignore_errors=True)
    tmp = f"{dst}.copying"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    os.rename(tmp, dst)
    return True


# ---- runs and the table -----------------------------------------------------------------
def _run(cmd, quiet=False, ok=(0,)):
    """Run ``cmd``; a signal or error here ends it (SIGTERM, then SIGKILL) before going on.
    ``quiet``: its output only if it fails."""
    if not quiet:
        print("$ " + " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    out = subprocess.PIPE if quiet else None
    p = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT if quiet
                         else None, text=True)
    try:
        text, _ = p.communicate()
    except BaseException:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
        raise
    if p.returncode not in ok:
        if quiet:
            print(text[-4000:], end="", file=sys.stderr)
        raise HpcioError(f"{' '.join(map(str, cmd[:6]))} ... exited with {p.returncode}")
    return p.returncode


def _mmm(values, fmt="{:.1f}"):
    """median (min-max)"""
    if not values:
        return "-"
    m = fmt.format(statistics.median(values))
    return m if len(values) == 1 else (f"{m} ({fmt.format(min(values))}-"
                                       f"{fmt.format(max(values))})")


def table(results, readers=READERS):
    """Per rank count, each reader's median stall %, straggler wait % (where any run
    waited at the barrier) and AU % (MLPerf Storage's rule) with their range over the
    repeats: {(ranks, reader): [summary.json, ...]}."""
    waited = any(round(s["metrics"].get("straggler_wait_percent") or 0.0, 1)
                 for runs in results.values() for s in runs)
    cols = [(f"stall % {r}", "stall_percent", r) for r in readers] + \
           [(f"straggler % {r}", "straggler_wait_percent", r) for r in readers if waited] + \
           [(f"AU % {r}", "au_percent", r) for r in readers]
    w = 22
    lines = ["ranks" + "".join(c[0].rjust(w) for c in cols)]
    for n in sorted({k[0] for k in results}):
        cells = [_mmm([s["metrics"][key] for s in results.get((n, r), [])]) for _, key, r
                 in cols]
        lines.append(f"{n:>5}" + "".join(c.rjust(w) for c in cells))
    return "\n".join(lines)


@dataclass
class Storage:
    name: str           # in run and report names
    label: str          # in the output
    data: str
    ranks: list
    drop: bool          # drop_caches before each run (the servers' cache, on the testbed)


def _measure(st, a, train, launch, stamp):
    """Every run of ``st``'s plan, then its table and its report."""
    ds = open_dataset(st.data)
    bw = sequential_mb_s(ds.paths, drop=st.drop)
    record = ds.nbytes() / ds.records
    print(f"\n=== {st.label}: {st.data} ({fs_type(st.data)}), {bw:,.0f} MB/s cold "
          f"sequential (median of 3)", flush=True)
    if a.model == "emulate":
        ask = ", ".join(f"{n} rank(s) {100 * n * a.batch * record / a.compute / 1e6 / bw:.0f}%"
                        for n in st.ranks)
        print(f"the ranks ask for this share of it: {ask}", flush=True)
    todo = plan(st.ranks, a.repeats)
    results, dirs = {}, []
    opts = train + (["--drop-caches"] if st.drop else [])
    print(f"{len(todo)} runs: {launch[0]} -n N {sys.executable} -m hpcio.train --data "
          f"{st.data} --reader R --out {a.workdir}/runs/... {' '.join(opts)}", flush=True)
    for k, (rep, n, reader) in enumerate(todo):
        out = os.path.join(a.workdir, "runs", f"{stamp}-{st.name}-{reader}-n{n}-r{rep}")
        t = time.perf_counter()
        _run(launch + ["-n", n, sys.executable, "-m", "hpcio.train", "--data", st.data,
                       "--reader", reader, "--out", out] + opts, quiet=True)
        s, _ = RunDir(out).summary()
        results.setdefault((n, reader), []).append(s)
        dirs.append(out)
        m = s["metrics"]
        print(f"[{k + 1}/{len(todo)}] {reader} n={n} repeat {rep + 1}: {figures_line(m)} "
              f"({time.perf_counter() - t:.1f} s)", flush=True)
    print(f"\n{st.label}, {a.repeats} repeat(s), median (min-max):")
    print(table(results))
    print(describe(s.get("cache")), flush=True)
    report = os.path.join(a.workdir, f"report-{stamp}-{st.name}")
    # exit code 1: the report is made, with the gaps in its input said above it
    _run([sys.executable, "-m", "hpcio.analyze", *dirs, "-o", report, "--storage-mibs",
          f"{bw * 1e6 / 2 ** 20:.1f}"], quiet=True, ok=(0, 1))
    print(f"report: {os.path.join(report, 'report.html')} (and report.md)", flush=True)
    return results


CKPT_MODEL, CKPT_COUNT = "llama3_8b", 2


def _checkpoint_step(st, a, launch, stamp):
    """The checkpoint part on storage ``st``: each writer at each rank count, written and
    restored, then the report's checkpoint findings over those runs."""
    where = os.path.join(os.path.dirname(st.data), "hpcio-demo-checkpoints")
    print(f"\n=== checkpoints on {st.label}: {CKPT_MODEL} scale {a.checkpoint_scale:g}, "
          f"{CKPT_COUNT} written then restored per run, into {where} (removed after each "
          f"run)", flush=True)
    dirs = []
    for n in st.ranks:
        for w in a.checkpoints:
            out = os.path.join(a.workdir, "runs", f"{stamp}-{st.name}-ckpt-{w}-n{n}")
            d = os.path.join(where, os.path.basename(out))
            try:
                _run(launch + ["-n", n, sys.executable, "-m", "hpcio.checkpoint", "run",
                               "--model", CKPT_MODEL, "--scale", a.checkpoint_scale,
                               "--writer", w, "--checkpoints", CKPT_COUNT, "--dir", d,
                               "--out", out], quiet=True)
            finally:
                shutil.rmtree(d, ignore_errors=True)
            m, _ = RunDir(out).summary()
            m = m["metric"]
            dirs.append(out)
            print(f"{w} n={n}: write {m['save_checkpoint_io_mean_GB_per_second']:.3f} GiB/s, "
                  f"read {m['load_checkpoint_io_mean_GB_per_second']:.3f} GiB/s (means of the "
                  f"per-checkpoint rates, {m['checkpoint_size_GB']:.3f} GiB each)", flush=True)
    report = os.path.join(a.workdir, f"report-{stamp}-{st.name}-checkpoints")
    _run([sys.executable, "-m", "hpcio.analyze", *dirs, "-o", report, "--no-drishti"],
         quiet=True, ok=(0, 1))
    print(f"checkpoint findings: {os.path.join(report, 'report.md')}", flush=True)


def _writers(text):
    names = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in names if w not in WRITER_NAMES]
    if bad or not names:
        raise HpcioError(f"--checkpoints {text!r}: choose writers from "
                         f"{', '.join(WRITER_NAMES)}")
    return names


def _ranks(text, opt):
    try:
        ranks = sorted({int(r) for r in text.split(",") if r.strip()})
    except ValueError:
        raise HpcioError(f"{opt} {text!r}: expected integers like 1,2")
    if not ranks or ranks[0] < 1:
        raise HpcioError(f"{opt} {text!r}: every rank count must be >= 1")
    return ranks


def build_parser():
    ap = ArgumentParser(prog="python -m hpcio.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="demo", help="where the dataset, runs and reports go")
    ap.add_argument("--preset", default="imagenet", help="dataset preset")
    ap.add_argument("--records", type=integer(1), default=1024, help="records in the dataset")
    ap.add_argument("--format", default="lmdb", help="dataset format")
    ap.add_argument("--model", default="emulate", help="model to train")
    ap.add_argument("--accelerator", default="a100", choices=sorted(ACCELERATORS),
                    help="emulate: each step computes as long as ResNet-50 on this "
                         "accelerator (DLIO's workload configs)")
    ap.add_argument("--ranks", default="1,2,4", help="rank counts on the testbed")
    ap.add_argument("--local-ranks", default="2", help="rank counts on local disk")
    ap.add_argument("--repeats", type=integer(1), default=3, help="runs per point, interleaved")
    add_plan_arguments(ap, "global", batch=16, seed_help="seeds every run's sample order, "
                       "augmentation and compute-time draws")
    ap.add_argument("--epochs", type=integer(1), default=1, help="epochs per run")
    ap.add_argument("--no-testbed", action="store_true", help="local disk only")
    ap.add_argument("--delay-us", type=integer(0), default=DELAY_US,
                    help="per-request delay of a testbed started here")
    ap.add_argument("--darshan", metavar="LIB", default=None,
                    help="trace every run with this Darshan runtime (hpcio.train --darshan; "
                         "scripts/darshan-local.sh build makes one)")
    ap.add_argument("--launcher", default=None,
                    help="MPI launcher command (default: the mpiexec beside this Python); "
                         "e.g. 'srun --mpi=pmi2'")
    c = ap.add_argument_group("checkpoints (skipped unless asked)")
    c.add_argument("--checkpoints", metavar="WRITERS", default=None,
                   help="also write and restore a tiny llama3_8b checkpoint with these "
                        "writers (e.g. coordinated,dcp,torch_save) at the same rank counts, "
                        "with the report's checkpoint findings")
    c.add_argument("--checkpoint-scale", type=number(0, 1, above=True), default=0.001,
                   help="the checkpoint's tensor-size factor (0.001: 105 MiB)")
    c.add_argument("--checkpoints-only", action="store_true",
                   help="run only the checkpoint part (no dataset, no training runs)")
    return ap


def _terminate(signum, frame):
    raise SystemExit(128 + signum)      # so that a testbed started here is stopped


def main(argv=None):
    a = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    signal.signal(signal.SIGTERM, _terminate)
    ranks, local = _ranks(a.ranks, "--ranks"), _ranks(a.local_ranks, "--local-ranks")
    a.checkpoints = _writers(a.checkpoints) if a.checkpoints is not None else None
    if a.checkpoints_only and not a.checkpoints:
        raise HpcioError("--checkpoints-only: name the writers with --checkpoints WRITERS")
    launch = shlex.split(a.launcher) if a.launcher else [launcher()]
    train = ["--model", a.model, "--batch", str(a.batch), "--epochs", str(a.epochs),
             "--shuffle", a.shuffle, "--block", str(a.block), "--window", str(a.window),
             "--seed", str(a.seed), "--cache", "cold"]
    a.compute = None
    if a.model == "emulate" and not a.checkpoints_only:
        a.compute = compute_per_step(a.accelerator, a.batch)
        seconds, per = ACCELERATORS[a.accelerator]
        # every step ends in a barrier, as DLIO's: ranks wait for the slowest (straggler
        # wait), without a 100 MB allreduce per step that a 2-core node's loopback would
        # make the bottleneck (--exchange-model resnet50 in hpcio.train for that)
        train += ["--compute-time", f"{a.compute:.6f}", "--exchange-bytes", "0"]
        print(f"accelerator {a.accelerator.upper()}: ResNet-50 computes {seconds} s per "
              f"{per} samples (DLIO/MLPerf Storage), so {a.compute * 1e3:.2f} ms per step "
              f"of {a.batch} samples per rank; ranks synchronise every step (a barrier, "
              f"as DLIO)", flush=True)
    if a.darshan:
        train += ["--darshan", a.darshan, "--darshan-dxt"]
    os.makedirs(a.workdir, exist_ok=True)
    name = f"{a.preset}-{a.records}.{a.format}"
    data = os.path.join(a.workdir, name)
    if not a.checkpoints_only and not is_dataset(data):
        _run(launch + ["-n", 2, sys.executable, "-m", "hpcio.datagen", "generate", data,
                       "--preset", a.preset, "--records", a.records, "--format", a.format,
                       "--shards", max(ranks + local)])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    why = NO_TESTBED if a.no_testbed else testbed_skipped()
    with contextlib.ExitStack() as stack:
        tb = None
        if why is None:
            try:
                tb = stack.enter_context(testbed(a.delay_us))
            except HpcioError as e:
                why = f"GlusterFS testbed skipped: {e}"
        if tb is None:
            print(why, flush=True)
        else:
            print(f"GlusterFS testbed at {tb.mount}, {tb.delay_us} us per request"
                  f"{'' if tb.started else ' (up already: used and left up)'}", flush=True)
            remote = os.path.join(tb.mount, "hpcio-demo", name)
            os.makedirs(os.path.dirname(remote), exist_ok=True)
            st = Storage("testbed", f"GlusterFS testbed ({tb.delay_us} us per request)",
                         remote, ranks, drop=True)
            if not a.checkpoints_only:
                if _copy_dataset(data, remote):
                    print(f"copied {data} to {remote}", flush=True)
                _measure(st, a, train, launch, stamp)
            if a.checkpoints:
                _checkpoint_step(st, a, launch, stamp)
    st = Storage("local", "local disk", data, local, drop=False)
    if not a.checkpoints_only:
        _measure(st, a, train, launch, stamp)
    if a.checkpoints:
        _checkpoint_step(st, a, launch, stamp)
    if a.checkpoints_only:
        print(f"Runs in {os.path.join(a.workdir, 'runs')}. Done in "
              f"{time.perf_counter() - t0:.0f} s.", flush=True)
        return 0
    print(f"\nDefinitions: stall % = time the steps waited for their own batch, straggler "
          f"wait % = time at the per-step barrier waiting for the slowest rank, each over "
          f"every step (mean over ranks of each rank's share; with compute they add up to "
          f"100%); AU % = compute / wall by MLPerf Storage's rule, which leaves each "
          f"epoch's first step out (where naive's mmap read-around waits longest). Runs in "
          f"{os.path.join(a.workdir, 'runs')}. Done in {time.perf_counter() - t0:.0f} s.",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, "hpcio.demo"))
