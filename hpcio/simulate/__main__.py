"""``python -m hpcio.simulate``: calibrate a SimGrid model of the platform on measured runs,
and predict stall, AU and samples/s at rank counts nobody ran, with the validation printed
every time (measured points simulated back, and the largest rank count held out)."""

import argparse
import sys

from ..cli import ArgumentParser, add_renamed, au_percent
from ..errors import HpcioError, guard
from ..explain.prediction import FILES, is_prediction, write_prediction
from ..outputs import claim_dir, claim_file
from ..plan import SHUFFLES
from .calibrate import Fit, calibrate
from .calibration import is_calibration, load_readers, write_calibration
from .engine import AGGREGATE_ABOVE
from .platform import load_platform, platform_dict
from .published import add_parser as add_published
from .predict import (check_scale, fit_line, held_out, simulate_points, templates,
                      workloads)

__all__ = ["main", "build_parser"]


def _ranks(text):
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rank counts: {text!r}")
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"rank counts must be >= 1: {text!r}")
    return out


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
    if args.output:
        claim_file(args.output, "-o", is_calibration, args.force)
    platform = load_platform(args.platform)
    fit = calibrate(workloads(args.runs), platform)
    print(fit_line(fit))
    _print_rows("residual per run (stall err relative, floor 1 ms; AU in points):",
                fit.residuals)
    if args.output:
        write_calibration(args.output, fit, args.runs)
        print(f"wrote {args.output}")
    return 0


def _variant(text):
    """``LABEL[:SHUFFLE]``: a reader (``naive``, ``naive-cursor``, ``coordinated``) to predict
    beside the measured ones, with the template of its reader's runs."""
    label, _, shuffle = text.partition(":")
    reader, _, access = label.partition("-")
    if shuffle and shuffle not in SHUFFLES:
        raise argparse.ArgumentTypeError(f"shuffle {shuffle!r} is not one of "
                                         f"{', '.join(SHUFFLES)}")
    return reader, access or None, shuffle or None


def _fitted(args, platform, ws):
    """(fit, its line, the held-out check or None): fitted to the runs, or the readers'
    costs from ``--readers`` on the platform as described; the validation printed."""
    if args.reader_costs:
        params, where = load_readers(args.reader_costs)
        missing = sorted({w.label for w in ws} - set(params))
        if missing:
            raise HpcioError(f"{args.reader_costs}: no fitted costs for {', '.join(missing)}")
        fit = Fit(platform, params)
        print(f"readers' costs from {args.reader_costs} (calibrated on {len(where)} runs); "
              f"{platform.name}'s storage as its file describes it, not fitted")
        fit_text = fit_line(fit).replace("fitted", f"used (from {args.reader_costs})")
        print(fit_text)
        print("validation: none on this platform; the predictions below are unvalidated")
        return fit, fit_text, None
    fit = calibrate(ws, platform)
    fit_text = fit_line(fit)
    print(fit_text)
    _print_rows("validation, measured points simulated back:", fit.residuals)
    held, top = held_out(ws, platform)
    if held is None:
        print(f"validation, held out: not possible (one rank count, {top}); the predictions "
              f"below are unvalidated")
    else:
        _print_rows(f"validation, held out: calibrated on P in {held['calibrated_on_ranks']}, "
                    f"predicting P={top}:", held["points"])
    return fit, fit_text, held


def _print_points(platform, points, supported, threshold):
    print(f"prediction on {platform.name} (stall/step max-rank as Table A):")
    print(f"  {'reader':<20} {'P':>6} {'stall s':>9} {'AU %':>6} {'samples/s':>10} "
          f"{'MiB/s':>8} {'busiest srv %':>11}  dominated by; note")
    for p in points:
        note = []
        if p["extrapolated"]:
            note.append("extrapolated past the runs")
        if p.get("simulated_back"):
            note.append("a run made: its point as simulated back above")
        if p["group"] > 1:
            note.append(f"grouped: an actor per {p['group']} ranks, each step one request")
        elif p["aggregated"]:
            note.append(f"aggregated: >{AGGREGATE_ABOVE:,} requests, a rank's step is one "
                        f"request")
        print(f"  {p['reader']:<20} {p['ranks']:>6} {p['stall_s_per_step']:>9.4f} "
              f"{p['au_percent']:>6.1f} {p['samples_per_s']:>10.1f} "
              f"{p['storage_mib_per_s']:>8.1f} {p['server_utilisation_percent']:>11.0f}  "
              f"{'; '.join([p['dominant']] + note)}")
    print(f"accelerators supported (the most ranks whose AU stays >= {threshold:g}%, "
          f"MLPerf Storage's rule):")
    for r, v in sorted(supported.items()):
        print(f"  {r:<20} {_supported_text(v)}")


def _predict(args):
    claim_dir(args.output, "-o", {name: lambda f, kind=kind: is_prediction(f, kind)
                                  for kind, name in FILES.items()}, args.force)
    platform = load_platform(args.platform)
    ws = workloads(args.runs)
    check_scale(ws, platform, args.ranks, args.records, args.scale_out)
    first = templates(ws, args.also or [])
    fit, fit_text, held = _fitted(args, platform, ws)
    points, supported = simulate_points(fit, first, args.ranks, args.steps, args.records,
                                        held is not None, args.au_threshold, ws)
    _print_points(platform, points, supported, args.au_threshold)
    write_prediction(args.output, platform_dict(fit.platform), fit_text, points, supported,
                     fit.residuals, held)
    print(f"wrote {args.output}/{FILES['prediction']} and {FILES['validation']}")
    return 0


def _supported_text(v):
    if v["ranks"] is None:
        return f"none: AU below the threshold already at {v['below_at']} ranks"
    more = " or more (AU still above at the largest asked)" if v["at_least"] else ""
    return (f"{v['ranks']}{more}" + ("" if v["validated"] else ", unvalidated")
            + (", extrapolated" if v["extrapolated"] else ""))


def build_parser():
    ap = ArgumentParser(prog="python -m hpcio.simulate", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="fit latency, bandwidth and CPU per sample to runs")
    c.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP",
                   help="run directories, sweep directories, or directories of runs")
    c.add_argument("--platform", required=True, help="platform YAML the runs ran on")
    c.add_argument("-o", "--output", help="write the fitted platform YAML here")
    c.add_argument("--force", action="store_true",
                   help="replace an existing -o file that is not an earlier calibration")
    c.set_defaults(func=_calibrate)
    p = sub.add_parser("predict", help="calibrate on runs, validate, predict at --ranks")
    p.add_argument("--platform", required=True, help="platform YAML")
    p.add_argument("--from", dest="runs", nargs="+", required=True, metavar="RUN_OR_SWEEP",
                   help="run directories, sweep directories, or directories of runs")
    p.add_argument("--ranks", type=_ranks, required=True, help="e.g. 1,2,4,8,16")
    p.add_argument("--steps", type=int, default=None,
                   help="steps to simulate at rank counts no run was made at (the runs'; "
                        "a rank count that was run is that run simulated back, as validated)")
    p.add_argument("--records", type=int, default=None,
                   help="dataset records at rank counts no run was made at (the runs'; "
                        "more for many ranks)")
    p.add_argument("--also", type=_variant, action="append", metavar="READER[:SHUFFLE]",
                   help="also predict a reader the runs did not use, from its reader's runs "
                        "and costs: naive-cursor:none (Caffe's cursor), coordinated:none")
    p.add_argument("--reader-costs", metavar="CALIBRATION.yaml",
                   help="take each reader's costs from `calibrate -o` (e.g. on the testbed) "
                        "and the platform's storage as described, fitting nothing")
    add_renamed(p, "--readers", "--reader-costs", ": --readers names reader specs in "
                "hpcio.bench", dest="reader_costs", metavar="CALIBRATION.yaml")
    p.add_argument("--au-threshold", type=au_percent, default=90.0, metavar="PERCENT",
                   help="AU the accelerators-supported count keeps (MLPerf Storage: 90 for "
                        "resnet50 and unet3d, 70 for cosmoflow)")
    p.add_argument("--scale-out", action="store_true",
                   help="add nodes of the platform's kind for rank counts it cannot hold")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="directory for prediction.json and validation.json (an earlier "
                        "prediction's are replaced)")
    p.add_argument("--force", action="store_true",
                   help="replace files of those names in DIR that are not a prediction's")
    p.set_defaults(func=_predict)
    add_published(sub)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.simulate"))
