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
from .calibrate import TOLERANCE_S, calibrate, check_tolerance
from .calibration import is_calibration, write_calibration
from .ckpt_command import add_parser as add_checkpoint
from .measured import check_keys, load_costs, merge_costs, pinned
from .engine import AGGREGATE_ABOVE
from .platform import load_platform, platform_dict
from .bench import add_parser as add_bench
from .published import add_parser as add_published
from .pool import beside
from .predict import (WIDE, check_scale, fit_from_calibration, fit_line, held_out, near_line,
                      simulate_all, simulate_points, spread, templates, workloads)

__all__ = ["main", "build_parser"]


def _ranks(text):
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rank counts: {text!r}")
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"rank counts must be >= 1: {text!r}")
    return out


def _tolerance(text):
    try:
        return check_tolerance(float(text), "ms") * 1e-3
    except (ValueError, HpcioError) as e:
        raise argparse.ArgumentTypeError(str(e) if isinstance(e, HpcioError) else
                                         f"not a number of ms: {text!r}")


def _print_rows(title, rows):
    print(title)
    ranged = any("simulated_stall_lo_s" in r for r in rows)
    print(f"  {'run':<34} {'P':>4} {'stall/step max-rank s':>22} {'err':>7} "
          f"{'AU % meas/sim':>14} {'AU err':>7}"
          + ("  near-equal fits' stall s: range, +-%, measured inside" if ranged else ""))
    for r in rows:
        more = ""
        if "simulated_stall_lo_s" in r:
            more = (f"  {r['simulated_stall_lo_s']:.4f}-{r['simulated_stall_hi_s']:.4f} "
                    f"({r['near_fits']} fits), +-{100 * r['half_width_rel']:.0f}%, "
                    f"{'inside' if r['inside'] else 'OUTSIDE'}")
        print(f"  {r['run']:<34} {r['ranks']:>4} {r['measured_stall_s']:>10.4f} /"
              f"{r['simulated_stall_s']:>9.4f} {100 * r['stall_err_rel']:>+6.0f}% "
              f"{r['measured_au_percent']:>6.1f}/{r['simulated_au_percent']:<6.1f} "
              f"{r['au_err_points']:>+6.1f}{more}")


def _calibrate(args):
    if args.output:
        claim_file(args.output, "-o", is_calibration, args.force)
    platform = load_platform(args.platform)
    fit = calibrate(workloads(args.runs), platform, args.tolerance, "calibrate", _costs(args))
    print(fit_line(fit))
    print(sources_line(fit))
    print(near_line(fit))
    _print_rows("residual per run (stall err relative, floor 1 ms; AU in points):",
                fit.residuals)
    if args.output:
        write_calibration(args.output, fit, args.runs, args.costs)
        print(f"wrote {args.output}")
    return 0


def _costs(args):
    """The measured costs ``--costs`` names (only ``--pin``'s figures), as calibrate takes
    them; None without ``--costs``."""
    if not args.costs:
        if args.pin is not None:
            raise HpcioError("--pin: give the measured costs with --costs FILE")
        return None
    return pinned(merge_costs([load_costs(c) for c in args.costs]), args.pin)


def sources_line(fit):
    """Which costs were measured (pinned) and which fitted, in one line."""
    s = fit.sources
    return (f"measured: {'; '.join(s.get('measured') or []) or 'nothing (no --costs)'}; "
            f"fitted: {', '.join(s.get('fitted') or [])}")


def _add_costs(p):
    p.add_argument("--costs", metavar="COSTS.yaml", action="append",
                   help="measured costs (`bench -o`; again for several bench runs: their "
                        "envelope): each replaces its grid axis by its spread (CPU per MiB, "
                        "latency, quantum)")
    p.add_argument("--pin", type=check_keys, default=None, metavar="KEY[,KEY]",
                   help="take only these figures of --costs (cpu_us_per_sample, "
                        "cpu_ms_per_mib, outside_cpu_ms_per_mib, latency_us, "
                        "run_queue_quantum_ms; default: all it holds)")


def _variant(text):
    """``LABEL[:SHUFFLE]``: a reader (``naive``, ``naive-cursor``, ``coordinated``) to predict
    beside the measured ones, with the template of its reader's runs."""
    label, _, shuffle = text.partition(":")
    reader, _, access = label.partition("-")
    if shuffle and shuffle not in SHUFFLES:
        raise argparse.ArgumentTypeError(f"shuffle {shuffle!r} is not one of "
                                         f"{', '.join(SHUFFLES)}")
    return reader, access or None, shuffle or None


def _fitted(args, platform, ws, costs):
    """(fit, its line): fitted to the runs (with the measured ``costs``), or the readers'
    costs from ``--reader-costs`` on the platform as described; its lines printed."""
    if args.reader_costs:
        fit, where = fit_from_calibration(platform, args.reader_costs)
        missing = sorted({w.label for w in ws} - set(fit.params))
        if missing:
            raise HpcioError(f"{args.reader_costs}: no fitted costs for {', '.join(missing)}")
        print(f"readers' costs from {args.reader_costs} (calibrated on {len(where)} runs); "
              f"{platform.name}'s storage as its file describes it, not fitted")
        fit_text = fit_line(fit).replace("fitted", f"used (from {args.reader_costs})")
        print(fit_text)
        print(near_line(fit))
        print("validation: none on this platform; the predictions below are unvalidated")
        return fit, fit_text
    fit = calibrate(ws, platform, args.tolerance, "predict: calibrate", costs)
    fit_text = fit_line(fit)
    print(fit_text)
    print(sources_line(fit))
    print(near_line(fit))
    _print_rows("validation, measured points simulated back:", fit.residuals)
    return fit, fit_text


def _print_held(held, top):
    if held is None:
        print(f"validation, held out: not possible (one rank count, {top}); the predictions "
              f"below are unvalidated")
    else:
        _print_rows(f"validation, held out: calibrated on P in {held['calibrated_on_ranks']}, "
                    f"predicting P={top}:", held["points"])


def _no_check(*_):
    return None, None


def _between(p, key, fmt):
    lo, hi = p.get(f"{key}_lo"), p.get(f"{key}_hi")
    return "" if lo is None or hi == lo else f"{format(lo, fmt)}-{format(hi, fmt)}"


def _print_points(platform, points, supported, threshold, extra):
    print(f"prediction on {platform.name} (stall/step max-rank as Table A; the best fit, "
          f"then the range of the near-equal fits):")
    print(f"  {'reader':<20} {'P':>6} {'stall s':>9} {'range':>15} {'AU %':>6} {'range':>11} "
          f"{'samples/s':>10} {'MiB/s':>8} {'busiest srv %':>11}  dominated by; note")
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
        if p.get("half_width_rel", 0) > WIDE:
            note.append(f"range wider than +-{100 * WIDE:.0f}%")
        print(f"  {p['reader']:<20} {p['ranks']:>6} {p['stall_s_per_step']:>9.4f} "
              f"{_between(p, 'stall_s', '.4f'):>15} "
              f"{p['au_percent']:>6.1f} {_between(p, 'au_percent', '.1f'):>11} "
              f"{p['samples_per_s']:>10.1f} "
              f"{p['storage_mib_per_s']:>8.1f} {p['server_utilisation_percent']:>11.0f}  "
              f"{'; '.join([p['dominant']] + note)}")
    print(f"accelerators supported (the most ranks whose AU stays >= {threshold:g}%, "
          f"MLPerf Storage's rule):")
    for r, v in sorted(supported.items()):
        print(f"  {r:<20} {_supported_text(v)}")
    for r, e in sorted(extra.items()):
        if e is None:
            print(f"{r}: its range is wider than +-{100 * WIDE:.0f}% at some point, and no "
                  f"run that the fits bearing it would simulate differently was found")
        else:
            print(f"{r}: its range is wider than +-{100 * WIDE:.0f}% at some point; the run "
                  f"that would narrow it most: {e['run']} (the near-equal fits simulate "
                  f"{e['stall_s_lo'] * 1e3:.1f} to {e['stall_s_hi'] * 1e3:.1f} ms of stall "
                  f"per step there)")


def _predict(args):
    claim_dir(args.output, "-o", {name: lambda f, kind=kind: is_prediction(f, kind)
                                  for kind, name in FILES.items()}, args.force)
    platform = load_platform(args.platform)
    ws = workloads(args.runs)
    check_scale(ws, platform, args.ranks, args.records, args.scale_out)
    first = templates(ws, args.also or [])
    # the held-out calibration runs beside the calibration and the points, its engines
    # taking a core when theirs do not wait for one; its rows printed where they were
    if args.reader_costs and args.costs:
        raise HpcioError("--costs with --reader-costs: nothing is calibrated here (give "
                         "--costs to the calibrate that wrote the reader costs)")
    costs = None if args.reader_costs else _costs(args)
    check = (_no_check,) if args.reader_costs else \
        (held_out, ws, platform, args.tolerance, "predict: validate", costs)
    with beside(*check, behind=True) as held_job:
        fit, fit_text = _fitted(args, platform, ws, costs)
        simulate_all(fit, first, args.ranks, args.steps, args.records, ws, "predict: points")
        held, top = held_job.result()
    if not args.reader_costs:
        _print_held(held, top)
    points, supported = simulate_points(fit, first, args.ranks, args.steps, args.records,
                                        held is not None, args.au_threshold, ws,
                                        "predict: points")
    extra = spread(fit, first, args.ranks, args.steps, args.records, points, supported,
                   args.au_threshold, ws, "predict: ranges")
    _print_points(platform, points, supported, args.au_threshold, extra)
    write_prediction(args.output, platform_dict(fit.platform), fit_text, points, supported,
                     fit.residuals, held, narrowing_runs=extra,
                     tolerance_ms=fit.tolerance_s * 1e3)
    print(f"wrote {args.output}/{FILES['prediction']} and {FILES['validation']}")
    return 0


def _supported_text(v):
    if v["ranks"] is None:
        return f"none: AU below the threshold already at {v['below_at']} ranks"
    more = " or more (AU still above at the largest asked)" if v["at_least"] else ""
    lo, hi = v.get("ranks_lo", v["ranks"]), v.get("ranks_hi", v["ranks"])
    if (lo, hi) != (v["ranks"], v["ranks"]):
        more += f" (near-equal fits: {lo or 'none'} to {hi or 'none'})"
    return (f"{v['ranks']}{more}" + ("" if v["validated"] else ", unvalidated")
            + (", extrapolated" if v["extrapolated"] else ""))


def build_parser():
    ap = ArgumentParser(prog="python -m hpcio.simulate", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="fit latency, bandwidth and CPU per sample to runs")
    c.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP",
                   help="run directories, sweep directories, or directories of runs")
    c.add_argument("--platform", required=True, help="platform YAML the runs ran on")
    c.add_argument("--tolerance", type=_tolerance, default=f"{TOLERANCE_S * 1e3:g}",
                   metavar="MS", help="keep every fit whose stall/step RMS over a reader's "
                   "runs is within MS ms of the best's; predictions carry their range")
    _add_costs(c)
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
    p.add_argument("--tolerance", type=_tolerance, default=f"{TOLERANCE_S * 1e3:g}",
                   metavar="MS", help="keep every fit whose stall/step RMS over a reader's "
                   "runs is within MS ms of the best's; predictions carry their range")
    _add_costs(p)
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
    add_checkpoint(sub)
    add_bench(sub)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.simulate"))
