"""What a prediction at scale costs, timed on this machine (load beside every time).

    python benchmarks/bench_simulate.py [--ranks 1024] [--steps 100] [--records 2000000]
    python benchmarks/bench_simulate.py --predict
    python benchmarks/bench_simulate.py --against OTHER_CHECKOUT [--repeat 3]

Default: one ``hpcio.simulate`` case of 1,024 ranks x 100 steps per reader (the recorded
testbed runs' workloads on ``platforms/testbed.yaml``, scaled out), with the requests it
simulated and whether it aggregated them.

``--predict``: the whole command the issue times, ``predict --ranks 1024 --steps 100
--records 2000000 --scale-out`` on the 6 shared testbed runs, in this process: per phase
(each batch of cases the command simulates, by its progress label) when it started and how
long it ran (phases overlap: the held-out calibration runs beside the rest), then the wall
time, the engines' CPU (user + system, of the forked children) and this process's own.

``--against DIR``: the same command run as a subprocess by this checkout and by ``DIR``
(another checkout, e.g. ``git worktree add /tmp/old <commit>``), interleaved, ``--repeat``
pairs: wall and CPU of each, the median ratio new/old, and whether both wrote the same
prediction.json and validation.json (a speed-up must not change a number).

The budget (a 1,024-rank, 100-step prediction in at most 60 s on this machine's 2 cores)
is printed beside each time.
"""

import argparse
import filecmp
import glob
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from hpcio.simulate import calibrate as calibrate_mod  # noqa: E402
from hpcio.simulate.calibrate import run_cases  # noqa: E402
from hpcio.simulate.engine import Case  # noqa: E402
from hpcio.simulate.platform import load_platform  # noqa: E402
from hpcio.simulate.workload import workload_from_run  # noqa: E402

RUNS = os.path.join(ROOT, "tests", "fixtures", "hpcio-runs")
BUDGET_S = 60.0


def load():
    """The 1-minute load average (``/proc/loadavg``), as text."""
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def predict_argv(args, out):
    """``hpcio.simulate predict`` of the issue's timing, on the shared testbed runs."""
    runs = sorted(glob.glob(os.path.join(args.runs, "pfs-inet-lmdb-*")))
    return ["predict", "--platform", os.path.join("platforms", "testbed.yaml"), "--from",
            *runs, "--ranks", str(args.ranks), "--steps", str(args.steps), "--records",
            str(args.records), "--scale-out", "-o", out, "--force"]


def one_case(args):
    """One case per reader, timed alone."""
    platform = load_platform(os.path.join(ROOT, "platforms", "testbed.yaml"))
    params = {"naive": {"cpu_s": 5e-4, "window": 256 << 10},
              "coordinated": {"cpu_s": 0.0, "window": None}}
    print(f"{args.ranks} ranks x {args.steps} steps, {args.records:,} records, "
          f"budget {BUDGET_S:.0f} s")
    for reader in ("naive", "coordinated"):
        w = workload_from_run(os.path.join(args.runs, f"pfs-inet-lmdb-{reader}-n4"))
        case = Case(platform.fit_ranks(args.ranks), w.at(args.ranks, args.steps, args.records),
                    params[reader])
        l0, t0 = load(), time.perf_counter()
        (f,) = run_cases([case])
        dt = time.perf_counter() - t0
        print(f"  {reader:<12} {dt:7.1f} s ({dt / BUDGET_S:.2f} of the budget, load "
              f"{l0}-{load()})  {f['requests']:,} requests"
              f"{' aggregated' if f['aggregated'] else ''}, stall/step max-rank "
              f"{f['stall_max_s'] * 1e3:.1f} ms, AU {f['au_pct']:.1f}%")


def in_process(args):
    """The predict command in this process, each batch of cases timed as it runs."""
    from hpcio.simulate.__main__ import main as simulate_main
    spans, t0 = [], time.perf_counter()
    simulate = calibrate_mod.simulate

    def timed(cases, label=None):   # the engines' entry, timed (nothing else changes)
        a = time.perf_counter()
        try:
            return simulate(cases, label)
        finally:
            spans.append((label or "(unlabelled)", len(cases), a - t0,
                          time.perf_counter() - a))
    calibrate_mod.simulate = timed
    c0, s0, l0 = resource.getrusage(resource.RUSAGE_CHILDREN), \
        resource.getrusage(resource.RUSAGE_SELF), load()
    with tempfile.TemporaryDirectory() as out, open(os.devnull, "w") as quiet:
        saved, sys.stdout = sys.stdout, quiet
        try:
            rc = simulate_main(predict_argv(args, out))
        finally:
            sys.stdout = saved
            calibrate_mod.simulate = simulate
    wall = time.perf_counter() - t0
    c1, s1 = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(
        resource.RUSAGE_SELF)
    print(f"predict {args.ranks} ranks x {args.steps} steps, {args.records:,} records "
          f"(exit {rc}); load {l0}-{load()}")
    print(f"  {'phase (progress label)':<58} {'cases':>5} {'from s':>7} {'for s':>7}")
    for label, n, start, dt in spans:
        print(f"  {label:<58} {n:>5} {start:>7.1f} {dt:>7.1f}")
    print(f"  wall {wall:.1f} s ({wall / BUDGET_S:.2f} of the budget); engines' CPU "
          f"{c1.ru_utime - c0.ru_utime:.1f} s user + {c1.ru_stime - c0.ru_stime:.1f} s "
          f"system; this process {s1.ru_utime - s0.ru_utime + s1.ru_stime - s0.ru_stime:.1f} s")
    return rc


def _timed_run(tree, args, out):
    """(wall s, CPU s of the command and its children, load before-after) of the predict
    command run by checkout ``tree``; a failure ends the benchmark with its last line."""
    l0, t0 = load(), time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([sys.executable, "-m", "hpcio.simulate",
                              *predict_argv(args, out)], cwd=tree,
                             stdout=subprocess.DEVNULL, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if p.returncode:
            err.seek(0)
            last = err.read().decode(errors="replace").strip().splitlines()[-1:]
            sys.exit(f"bench_simulate: {tree}: predict failed (exit {p.returncode}): "
                     f"{last[0] if last else ''}")
    return wall, ru.ru_utime + ru.ru_stime, f"{l0}-{load()}"


def against(args):
    """This checkout and ``args.against``, interleaved; the median ratio new/old."""
    other = os.path.abspath(args.against)
    if not os.path.isdir(os.path.join(other, "hpcio", "simulate")):
        sys.exit(f"bench_simulate: --against {args.against}: not an hpcio checkout")
    walls, cpus, same = {"new": [], "old": []}, {"new": [], "old": []}, True
    print(f"predict {args.ranks} ranks x {args.steps} steps; new = {ROOT}, old = {other}")
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeat):
            outs = {}
            for name, tree in (("old", other), ("new", ROOT)) if k % 2 else \
                    (("new", ROOT), ("old", other)):
                outs[name] = os.path.join(tmp, f"{name}-{k}")
                wall, cpu, ld = _timed_run(tree, args, outs[name])
                walls[name].append(wall)
                cpus[name].append(cpu)
                print(f"  pair {k + 1} {name}: {wall:6.1f} s wall, {cpu:6.1f} s CPU, "
                      f"load {ld}", flush=True)
            for f in ("prediction.json", "validation.json"):
                same &= filecmp.cmp(os.path.join(outs["new"], f),
                                    os.path.join(outs["old"], f), shallow=False)
    ratio = statistics.median(n / o for n, o in zip(walls["new"], walls["old"]))
    cratio = statistics.median(n / o for n, o in zip(cpus["new"], cpus["old"]))
    print(f"  median wall new {statistics.median(walls['new']):.1f} s, old "
          f"{statistics.median(walls['old']):.1f} s: new/old {ratio:.2f} (pairs "
          f"{', '.join(f'{n / o:.2f}' for n, o in zip(walls['new'], walls['old']))}); "
          f"CPU new/old {cratio:.2f}")
    print(f"  outputs: {'identical' if same else 'DIFFERENT'} (prediction.json, "
          f"validation.json, every pair)")
    return 0 if same else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--runs", default=RUNS, help="directory of the recorded testbed runs")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--predict", action="store_true",
                      help="time the whole predict command, phase by phase, in this process")
    mode.add_argument("--against", metavar="DIR",
                      help="time predict here and in checkout DIR, interleaved; compare")
    ap.add_argument("--repeat", type=int, default=3, help="pairs for --against (default 3)")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    if args.predict:
        return in_process(args)
    if args.against:
        return against(args)
    one_case(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
