"""The held-out checks with and without measured costs: calibrate on every rank count but
the largest, predict the largest, once fitting every cost from stall and once with the
costs ``python -m hpcio.simulate bench`` measured pinned (``--costs``, ``--pin``), and
print per reader the best fit's stall against the measured one, the near-equal fits'
range, its half-width and whether it holds the measurement, with the fits that bear it.

    python benchmarks/bench_sim_costs.py --costs costs.yaml \\
        [--pin cpu_ms_per_mib,outside_cpu_ms_per_mib,run_queue_quantum_ms] \\
        [--from analysis/scale-sim/testbed-runs/global] [--platform platforms/testbed.yaml]

The target (the 8-rank sweep, calibrated on 1, 2, 4): the best within 15% or 1 ms of the
measured stall, or a range holding it with a half-width of at most 25%.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from hpcio.measure.probes import loadavg  # noqa: E402
from hpcio.simulate.measured import check_keys, load_costs, merge_costs, pinned  # noqa: E402
from hpcio.simulate.platform import load_platform  # noqa: E402
from hpcio.simulate.predict import held_out, workloads  # noqa: E402

WIDE, WITHIN, FLOOR_S = 0.25, 0.15, 1e-3


def _rows(title, held):
    print(f"{title}: {held['fit']}")
    for r in held["points"]:
        meas, best = r["measured_stall_s"], r["simulated_stall_s"]
        lo, hi = r.get("simulated_stall_lo_s", best), r.get("simulated_stall_hi_s", best)
        ok = abs(best - meas) <= max(WITHIN * meas, FLOOR_S) or (
            r.get("inside") and r.get("half_width_rel", 0) <= WIDE)
        print(f"  {r['reader']:<22} P={r['ranks']}: measured {meas * 1e3:.1f} ms, best "
              f"{best * 1e3:.1f} ms ({100 * r['stall_err_rel']:+.0f}%), range "
              f"{lo * 1e3:.1f}-{hi * 1e3:.1f} ms (+-{100 * r.get('half_width_rel', 0):.0f}%, "
              f"{r.get('near_fits', 1)} fits, {'inside' if r.get('inside') else 'OUTSIDE'}), "
              f"AU {r['au_err_points']:+.1f} points; target {'met' if ok else 'missed'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--costs", required=True, nargs="+",
                    help="costs files of `hpcio.simulate bench` (several: their envelope)")
    ap.add_argument("--pin", type=check_keys, default=None,
                    help="only these figures of --costs (default: all)")
    ap.add_argument("--from", dest="runs", nargs="+",
                    default=[os.path.join(ROOT, "analysis/scale-sim/testbed-runs/global")])
    ap.add_argument("--platform", default=os.path.join(ROOT, "platforms/testbed.yaml"))
    ap.add_argument("--tolerance-ms", type=float, default=1.0)
    a = ap.parse_args(argv)
    ws, plat = workloads(a.runs), load_platform(a.platform)
    costs = pinned(merge_costs([load_costs(c) for c in a.costs]), a.pin)
    for title, c in (("fitted from stall", None), (f"with {' + '.join(a.costs)}", costs)):
        t0, l0 = time.perf_counter(), loadavg()
        held, top = held_out(ws, plat, a.tolerance_ms * 1e-3, None, c)
        if held is None:
            print(f"nothing to hold out: one rank count ({top})")
            return 1
        _rows(title, held)
        print(f"  ({time.perf_counter() - t0:.0f} s, load {l0} -> {loadavg()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
