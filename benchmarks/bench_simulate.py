"""What a prediction at scale costs: one ``hpcio.simulate`` case of 1,024 ranks x 100 steps
per reader (the recorded testbed runs' workloads on ``platforms/testbed.yaml``, scaled out),
timed on this machine, with the requests it simulated and whether it aggregated them.

    python benchmarks/bench_simulate.py [--ranks 1024] [--steps 100] [--records 2000000]

The budget (issue: a 1,024-rank, 100-step prediction in at most 60 s on 2 cores) is printed
beside each time.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from hpcio.simulate.calibrate import run_cases  # noqa: E402
from hpcio.simulate.engine import Case  # noqa: E402
from hpcio.simulate.platform import load_platform  # noqa: E402
from hpcio.simulate.workload import workload_from_run  # noqa: E402

RUNS = os.path.join(ROOT, "tests", "fixtures", "hpcio-runs")
BUDGET_S = 60.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--runs", default=RUNS, help="directory of the recorded testbed runs")
    args = ap.parse_args(argv)
    platform = load_platform(os.path.join(ROOT, "platforms", "testbed.yaml"))
    params = {"naive": {"cpu_s": 5e-4, "window": 256 << 10},
              "coordinated": {"cpu_s": 0.0, "window": None}}
    print(f"{args.ranks} ranks x {args.steps} steps, {args.records:,} records, "
          f"budget {BUDGET_S:.0f} s")
    for reader in ("naive", "coordinated"):
        w = workload_from_run(os.path.join(args.runs, f"pfs-inet-lmdb-{reader}-n4"))
        case = Case(platform.fit_ranks(args.ranks), w.at(args.ranks, args.steps, args.records),
                    params[reader])
        t0 = time.perf_counter()
        (f,) = run_cases([case])
        dt = time.perf_counter() - t0
        print(f"  {reader:<12} {dt:7.1f} s ({dt / BUDGET_S:.2f} of the budget)  "
              f"{f['requests']:,} requests{' aggregated' if f['aggregated'] else ''}, "
              f"stall/step max-rank {f['stall_max_s'] * 1e3:.1f} ms, AU {f['au_pct']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
