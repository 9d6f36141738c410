"""``python -m hpcio.simulate``: calibrate a SimGrid model of the platform on measured runs,
and predict stall, AU and samples/s at rank counts nobody ran, with the validation printed
every time (measured points simulated back, and the largest rank count held out)."""

import argparse
import json
import os
import sys

import yaml

from ..errors import HpcioError, guard
from .calibrate import calibrate, errors_of, run_cases
from .engine import AGGREGATE_ABOVE, Case
from .platform import load_platform, platform_dict
from .workload import workload_from_run

__all__ = ["main"]


def _ranks(text):
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rank counts: {text!r}")
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"rank counts must be >= 1: {text!r}")
    return out


def _workloads(dirs):
    ws = [workload_from_run(d) for d in dirs]
    datasets = {w.dataset for w in ws}
    if len(datasets) > 1:
        raise HpcioError(f"runs of different datasets mixed: {' | '.join(sorted(datasets))}")
    return ws


def _fit_line(fit):
    p = fit.platform
    per = ", ".join(f"{r}: CPU {v['cpu_s'] * 1e6:.0f} us/sample"
                    + (f", read-around {v['window'] // 1024} KiB" if v.get("window") else "")
                    for r, v in sorted(fit.params.items()))
    return (f"fitted: latency {p.latency_s * 1e6:.0f} us/request, "
            f"{p.server_threads or 'unlimited'} served at once, {p.server_bps / 1e6:.0f} MB/s "
            f"per server; {per}")


def _print_rows(title, rows):
    print(title)
    print(f"  {'run':<34} {'P':>4} {'stall/step max-rank s':>22} {'err':>7} "
          f"{'AU % meas/sim':>14} {'AU err':>7}")
    for r in rows:
        print(f"  {r['run']:<34} {r['ranks']:>4} {r['measured_stall_s']:>10.4f} /"
              f"{r['simulated_stall_s']:>9.4f} {100 * r['stall_err_rel']:>+6.0f}% "
              f"{r['measured_au_percent']:>6.1f}/{r['simulated_au_percent']:<6.1f} "
              f"{r['au_err_points']:>+6.1f}")


def _calibrate(args):
    platform = load_platform(args.platform)
    fit = calibrate(_workloads(args.runs), platform)
    print(_fit_line(fit))
    _print_rows("residual per run (stall err relative, floor 1 ms; AU in points):",
                fit.residuals)
    if args.output:
        d = platform_dict(fit.platform, readers={r: {"cpu_us_per_sample": v["cpu_s"] * 1e6,
                                                     "window_kib": (v["window"] or 0) // 1024}
                                                 for r, v in fit.params.items()},
                          calibrated_on=[os.path.abspath(d) for d in args.runs])
        with open(args.output, "w") as f:
            yaml.safe_dump(d, f, sort_keys=False)
        print(f"wrote {args.output}")
    return 0


def _held_out(ws, platform):
    """Calibrate on every rank count but the largest, predict the largest: the validation
    that says what a prediction past the runs is worth. None with one rank count."""
    top = max(w.ranks for w in ws)
    train = [w for w in ws if w.ranks < top]
    if not train or {w.reader for w in train} != {w.reader for w in ws}:
        return None, top
    fit = calibrate(train, platform)
    held = [w for w in ws if w.ranks == top]
    figs = run_cases([Case(fit.platform, w, fit.params[w.reader]) for w in held])
    rows = [{"run": w.name, "reader": w.reader, "ranks": w.ranks,
             "measured_stall_s": w.measured["stall_max_s"], "simulated_stall_s": f["stall_max_s"],
             "measured_au_percent": w.measured["au_pct"], "simulated_au_percent": f["au_pct"],
             **errors_of(f, w.measured)} for w, f in zip(held, figs)]
    return {"calibrated_on_ranks": sorted({w.ranks for w in train}), "held_out_ranks": top,
            "fit": _fit_line(fit), "points": rows}, top


def _predict(args):
    platform = load_platform(args.platform)
    ws = _workloads(args.runs)
    fit = calibrate(ws, platform)
    print(_fit_line(fit))
    _print_rows("validation, measured points simulated back:", fit.residuals)
    held, top = _held_out(ws, platform)
    if held is None:
        print(f"validation, held out: not possible (one rank count, {top}); the predictions "
              f"below are unvalidated")
    else:
        _print_rows(f"validation, held out: calibrated on P in {held['calibrated_on_ranks']}, "
                    f"predicting P={top}:", held["points"])
    measured_max = max(w.ranks for w in ws)
    first = {}
    for w in ws:  # one template per reader: its largest run
        if w.reader not in first or w.ranks > first[w.reader].ranks:
            first[w.reader] = w
    cases = []
    for reader, w in sorted(first.items()):
        for n in args.ranks:
            need = n * w.batch
            if need > (args.records or w.records):
                raise HpcioError(f"{n} ranks x batch {w.batch} need more than the dataset's "
                                 f"{args.records or w.records} records: give --records")
            cases.append(Case(fit.platform.fit_ranks(n), w.at(n, args.steps, args.records),
                              fit.params[reader]))
    figs = run_cases(cases)
    points = []
    print(f"prediction on {platform.name} (stall/step max-rank as Table A):")
    print(f"  {'reader':<12} {'P':>6} {'stall s':>9} {'AU %':>6} {'samples/s':>10} "
          f"{'MiB/s':>8}  note")
    for case, f in zip(cases, figs):
        w = case.workload
        note = []
        if w.ranks > measured_max:
            note.append("extrapolated past the runs")
        if f["aggregated"]:
            note.append(f"aggregated: >{AGGREGATE_ABOVE} requests, each rank's step is one "
                        f"latency wait and one transfer per server")
        points.append({"reader": w.reader, "ranks": w.ranks, "stall_s_per_step": f["stall_max_s"],
                       "au_percent": f["au_pct"], "samples_per_s": f["samples_s"],
                       "storage_mib_per_s": f["mib_s"], "stall_mean_s": f["stall_mean_s"],
                       "straggler_s": f["straggler_s"], "steps": w.steps,
                       "requests": f["requests"], "aggregated": f["aggregated"],
                       "extrapolated": w.ranks > measured_max,
                       "validated": held is not None})
        print(f"  {w.reader:<12} {w.ranks:>6} {f['stall_max_s']:>9.4f} {f['au_pct']:>6.1f} "
              f"{f['samples_s']:>10.1f} {f['mib_s']:>8.1f}  {'; '.join(note)}")
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "prediction.json"), "w") as f:
        json.dump({"platform": platform_dict(fit.platform), "fit": _fit_line(fit),
                   "stall_s_per_step": "Table A's stall/step max-rank (tables.run_figures "
                                       "stall_max_s), each epoch's first step left out",
                   "points": points}, f, indent=1)
    with open(os.path.join(args.output, "validation.json"), "w") as f:
        json.dump({"simulated_back": fit.residuals, "held_out": held}, f, indent=1)
    print(f"wrote {args.output}/prediction.json and validation.json")
    return 0


def _parser():
    ap = argparse.ArgumentParser(prog="python -m hpcio.simulate", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="fit latency, bandwidth and CPU per sample to runs")
    c.add_argument("runs", nargs="+", metavar="RUN_DIR")
    c.add_argument("--platform", required=True, help="platform YAML the runs ran on")
    c.add_argument("-o", "--output", help="write the fitted platform YAML here")
    c.set_defaults(func=_calibrate)
    p = sub.add_parser("predict", help="calibrate on runs, validate, predict at --ranks")
    p.add_argument("--platform", required=True, help="platform YAML")
    p.add_argument("--from", dest="runs", nargs="+", required=True, metavar="RUN_DIR")
    p.add_argument("--ranks", type=_ranks, required=True, help="e.g. 1,2,4,8,16")
    p.add_argument("--steps", type=int, default=None, help="steps to simulate (the runs')")
    p.add_argument("--records", type=int, default=None,
                   help="dataset records (the runs'; more for many ranks)")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.set_defaults(func=_predict)
    return ap


def main(argv=None):
    args = _parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.simulate"))
