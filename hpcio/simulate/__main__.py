"""``python -m hpcio.simulate``: calibrate a SimGrid model of the platform on measured runs,
and predict stall, AU and samples/s at rank counts nobody ran, with the validation printed
every time (measured points simulated back, and the largest rank count held out)."""

import argparse
import os
from dataclasses import replace
import sys

import yaml

from ..errors import HpcioError, guard
from ..fsutil import atomic_json, atomic_write
from .calibrate import Fit, calibrate, errors_of, run_cases
from .engine import AGGREGATE_ABOVE, Case
from .platform import load_platform, platform_dict
from ..explain.runs import expand
from .workload import median_of_repeats, workload_from_run

__all__ = ["main", "build_parser"]


def _ranks(text):
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rank counts: {text!r}")
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"rank counts must be >= 1: {text!r}")
    return out


def _workloads(paths):
    """Every run under ``paths`` (run or sweep directories) as a workload."""
    dirs, problems, _ = expand(paths)
    if problems:
        raise HpcioError(problems[0])
    ws = median_of_repeats([workload_from_run(d) for d, _ in dirs])
    datasets = {w.dataset for w in ws}
    if len(datasets) > 1:
        raise HpcioError(f"runs of different datasets mixed: {' | '.join(sorted(datasets))}")
    return ws


def _fit_line(fit):
    p = fit.platform
    per = ", ".join(f"{r}: CPU {v['cpu_s'] * 1e6:.0f} us/sample, "
                    f"{v.get('cpu_s_per_byte', 0.0) * 1e3 * 2 ** 20:.1f} ms/MiB"
                    + (f", read-around {v['window'] // 1024} KiB" if v.get("window") else "")
                    for r, v in sorted(fit.params.items()))
    xch = f"; allreduce {p.exchange_bps / 1e6:.0f} MB/s per rank" if p.exchange_bps else ""
    xch += f"; barrier {p.round_s * 1e3:.2f} ms per round" if p.barrier_round_s >= 0 else ""
    return (f"fitted: latency {p.latency_s * 1e6:.0f} us/request, "
            f"{p.server_threads or 'unlimited'} served at once, {p.server_bps / 1e6:.0f} MB/s "
            f"per server, {p.client_threads or 'any number of'} request(s) out per node's "
            f"client, the node's cores "
            + (f"a run queue of {p.cpu_quantum_s * 1e3:g} ms quanta" if p.cpu_quantum_s
               else "shared fluidly") + f"{xch}; {per}")


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
                                                     "cpu_ms_per_mib": round(
                                                         v["cpu_s_per_byte"] * 1e3 * 2 ** 20, 3),
                                                     "window_kib": (v["window"] or 0) // 1024}
                                                 for r, v in fit.params.items()},
                          calibrated_on=[os.path.abspath(d) for d in args.runs])
        atomic_write(args.output, lambda f: f.write(yaml.safe_dump(d, sort_keys=False).encode()))
        print(f"wrote {args.output}")
    return 0


def _held_out(ws, platform):
    """Calibrate on every rank count but the largest, predict the largest: the validation
    that says what a prediction past the runs is worth. None with one rank count."""
    top = max(w.ranks for w in ws)
    train = [w for w in ws if w.ranks < top]
    if not train or {w.case for w in train} != {w.case for w in ws}:
        return None, top
    fit = calibrate(train, platform)
    held = [w for w in ws if w.ranks == top]
    figs = run_cases([Case(fit.platform, w, fit.params[w.label]) for w in held])
    rows = [{"run": w.name, "reader": w.case, "ranks": w.ranks,
             "measured_stall_s": w.measured["stall_max_s"], "simulated_stall_s": f["stall_max_s"],
             "measured_au_percent": w.measured["au_pct"], "simulated_au_percent": f["au_pct"],
             **errors_of(f, w.measured)} for w, f in zip(held, figs)]
    return {"calibrated_on_ranks": sorted({w.ranks for w in train}), "held_out_ranks": top,
            "fit": _fit_line(fit), "points": rows}, top


def _readers(path):
    """Each reader's fitted costs from ``calibrate -o``'s YAML: ({label: params}, runs)."""
    try:
        with open(path) as f:
            d = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise HpcioError(f"{path}: cannot read the calibration: "
                         f"{getattr(e, 'strerror', None) or str(e).splitlines()[0]}")
    rd = d.get("readers") if isinstance(d, dict) else None
    if not isinstance(rd, dict) or not rd:
        raise HpcioError(f"{path}: no readers section (write one with hpcio.simulate "
                         f"calibrate -o)")
    out = {}
    for r, v in rd.items():
        try:
            cpu, win = float(v["cpu_us_per_sample"]), int(v["window_kib"])
            per_mib = float(v.get("cpu_ms_per_mib", 0))
        except (TypeError, KeyError, ValueError, AttributeError):
            raise HpcioError(f"{path}: readers.{r} needs cpu_us_per_sample and window_kib")
        if cpu < 0 or win < 0 or per_mib < 0:
            raise HpcioError(f"{path}: readers.{r}: negative cost")
        out[r] = {"cpu_s": cpu * 1e-6, "window": win * 1024 or None,
                  "cpu_s_per_byte": per_mib * 1e-3 / 2 ** 20}
    return out, d.get("calibrated_on") or []


def _variant(text):
    """``LABEL[:SHUFFLE]``: a reader (``naive``, ``naive-cursor``, ``coordinated``) to predict
    beside the measured ones, with the template of its reader's runs."""
    label, _, shuffle = text.partition(":")
    reader, _, access = label.partition("-")
    from ..plan import SHUFFLES
    if shuffle and shuffle not in SHUFFLES:
        raise argparse.ArgumentTypeError(f"shuffle {shuffle!r} is not one of "
                                         f"{', '.join(SHUFFLES)}")
    return reader, access or None, shuffle or None


def _templates(ws, variants):
    """One template per reader to predict: each measured reader's largest run, and each
    ``--also`` variant made from its reader's (cursor walks need shuffle none)."""
    first = {}
    for w in ws:
        if w.case not in first or w.ranks > first[w.case].ranks:
            first[w.case] = w
    for reader, access, shuffle in variants:
        base = next((w for w in first.values() if w.reader == reader), None)
        if base is None:
            raise HpcioError(f"--also {reader}: no run of reader {reader} to take it from")
        v = replace(base, access=access or base.access, shuffle=shuffle or base.shuffle)
        try:
            v.pattern
        except KeyError:
            raise HpcioError(f"--also {v.label}: the simulation has no request pattern for it")
        if v.access == "cursor" and v.shuffle != "none":
            raise HpcioError(f"--also {v.label}: a cursor walks keys in order: add :none")
        if v.case not in first:
            first[v.case] = replace(v, measured=None, name=v.case)
    return first


def _predict(args):
    platform = load_platform(args.platform)
    ws = _workloads(args.runs)
    top = max(args.ranks)
    if top > platform.max_ranks and not args.scale_out:
        raise HpcioError(f"{top} ranks are more than {platform.name}'s {platform.nodes} nodes x "
                         f"{platform.ranks_per_node} ranks hold: give a platform with more "
                         f"nodes, or --scale-out to add nodes of the same kind")
    for w in ws:
        if top * w.batch > (args.records or w.records):
            raise HpcioError(f"{top} ranks x batch {w.batch} need more than the dataset's "
                             f"{args.records or w.records:,} records: give --records")
    first = _templates(ws, args.also or [])
    if args.readers:
        params, where = _readers(args.readers)
        missing = sorted({w.label for w in ws} - set(params))
        if missing:
            raise HpcioError(f"{args.readers}: no fitted costs for {', '.join(missing)}")
        fit = Fit(platform, params)
        held, top = None, max(w.ranks for w in ws)
        print(f"readers' costs from {args.readers} (calibrated on {len(where)} runs); "
              f"{platform.name}'s storage as its file describes it, not fitted")
        fit_text = _fit_line(fit).replace("fitted", f"used (from {args.readers})")
        print(fit_text)
    else:
        fit = calibrate(ws, platform)
        fit_text = _fit_line(fit)
        print(fit_text)
        _print_rows("validation, measured points simulated back:", fit.residuals)
        held, top = _held_out(ws, platform)
    if held is None and args.readers:
        print("validation: none on this platform; the predictions below are unvalidated")
    elif held is None:
        print(f"validation, held out: not possible (one rank count, {top}); the predictions "
              f"below are unvalidated")
    else:
        _print_rows(f"validation, held out: calibrated on P in {held['calibrated_on_ranks']}, "
                    f"predicting P={top}:", held["points"])
    measured_max = max(w.ranks for w in ws)

    def simulate_at(pairs):
        cases = [Case(fit.platform.fit_ranks(n), first[r].at(n, args.steps, args.records),
                      fit.params[first[r].reader if first[r].measured is None
                                 and first[r].reader in fit.params else first[r].label])
                 for r, n in pairs]
        return cases, run_cases(cases)

    pairs = [(r, n) for r in sorted(first) for n in args.ranks]
    cases, figs = simulate_at(pairs)
    points = [_point(r, c, f, fit.platform, measured_max,
                     held is not None and first[r].measured is not None)
              for (r, _), c, f in zip(pairs, cases, figs)]
    supported = _accelerators(points, simulate_at, args.au_threshold, fit.platform,
                              measured_max)
    print(f"prediction on {platform.name} (stall/step max-rank as Table A):")
    print(f"  {'reader':<20} {'P':>6} {'stall s':>9} {'AU %':>6} {'samples/s':>10} "
          f"{'MiB/s':>8} {'busiest srv %':>11}  dominated by; note")
    for p in points:
        note = []
        if p["extrapolated"]:
            note.append("extrapolated past the runs")
        if p["group"] > 1:
            note.append(f"grouped: an actor per {p['group']} ranks, each step one request")
        elif p["aggregated"]:
            note.append(f"aggregated: >{AGGREGATE_ABOVE:,} requests, a rank's step is one "
                        f"request")
        print(f"  {p['reader']:<20} {p['ranks']:>6} {p['stall_s_per_step']:>9.4f} "
              f"{p['au_percent']:>6.1f} {p['samples_per_s']:>10.1f} "
              f"{p['storage_mib_per_s']:>8.1f} {p['server_utilisation_percent']:>11.0f}  "
              f"{'; '.join([p['dominant']] + note)}")
    print(f"accelerators supported (the most ranks whose AU stays >= {args.au_threshold:g}%, "
          f"MLPerf Storage's rule):")
    for r, v in sorted(supported.items()):
        print(f"  {r:<20} {_supported_text(v)}")
    _write(args.output, fit, fit_text, points, supported, held)
    return 0


def _supported_text(v):
    if v["ranks"] is None:
        return f"none: AU below the threshold already at {v['below_at']} ranks"
    more = " or more (AU still above at the largest asked)" if v["at_least"] else ""
    return (f"{v['ranks']}{more}" + ("" if v["validated"] else ", unvalidated")
            + (", extrapolated" if v["extrapolated"] else ""))


def _write(out, fit, fit_text, points, supported, held):
    os.makedirs(out, exist_ok=True)
    atomic_json(os.path.join(out, "prediction.json"), {
        "platform": platform_dict(fit.platform), "fit": fit_text,
        "stall_s_per_step": "Table A's stall/step max-rank (tables.run_figures stall_max_s), "
                            "each epoch's first step left out",
        "accelerators_supported": supported, "points": points})
    atomic_json(os.path.join(out, "validation.json"),
                {"simulated_back": fit.residuals, "held_out": held})
    print(f"wrote {out}/prediction.json and validation.json")


def dominant(f, w, platform, step_s):
    """What sets a simulated point's stall: none (the storage keeps up), the servers'
    bandwidth, stragglers, the per-request latency, read amplification (bytes brought in
    beyond those delivered: read-around, or a cursor's stepped-over records) or the transfer."""
    util = f["server_utilisation"]
    if f["stall_max_s"] + f["straggler_s"] < 0.01 * step_s:
        return "nothing: the storage keeps up"
    if util >= 0.8:
        return "server bandwidth" + ("" if f["storage_bps"] >= 0.8 * platform.servers
                                     * platform.server_bps else " (one server's: the ranks "
                                     "read the same server at once)")
    if f["straggler_s"] > f["stall_mean_s"]:
        return "stragglers"
    amplified = f["storage_bytes"] / max(f["delivered_bytes"], 1.0)
    if amplified > 2:
        return f"read amplification ({amplified:.1f}x the bytes delivered)"
    if f["requests"] / (w.ranks * w.steps) * platform.latency_s > 0.5 * f["stall_mean_s"]:
        return "per-request latency"
    return "transfer"


def _point(reader, case, f, platform, measured_max, validated):
    w = case.workload
    step = f["step_s_median"]
    return {"reader": reader, "ranks": w.ranks, "stall_s_per_step": f["stall_max_s"],
            "au_percent": f["au_pct"], "samples_per_s": f["samples_s"],
            "storage_mib_per_s": f["storage_bps"] / 2 ** 20,
            "delivered_mib_per_s": f["mib_s"],
            "server_utilisation_percent": 100 * f["server_utilisation"],
            "stall_mean_s": f["stall_mean_s"], "straggler_s": f["straggler_s"],
            "step_s": step, "steps": w.steps, "requests": f["requests"],
            "aggregated": f["aggregated"], "group": f["group"],
            "dominant": dominant(f, w, platform, step),
            "extrapolated": w.ranks > measured_max, "validated": validated}


def _accelerators(points, simulate_at, threshold, platform, measured_max):
    """Per reader, MLPerf Storage's headline: the most ranks (accelerators) whose AU stays
    at or above ``threshold``, found between the asked rank counts by bisection."""
    out = {}
    for r in sorted({p["reader"] for p in points}):
        mine = sorted((p for p in points if p["reader"] == r), key=lambda p: p["ranks"])
        ok = [p["ranks"] for p in mine if p["au_percent"] >= threshold]
        bad = [p["ranks"] for p in mine if p["au_percent"] < threshold]
        if not ok or (bad and bad[0] < ok[0]):
            lo, hi = None, (bad[0] if bad else None)
        else:
            lo = max(n for n in ok if not bad or n < bad[0])
            hi = min((n for n in bad if n > lo), default=None)
        while lo is not None and hi is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            _, (f,) = simulate_at([(r, mid)])
            lo, hi = (mid, hi) if f["au_pct"] >= threshold else (lo, mid)
        out[r] = {"ranks": lo, "threshold_au_percent": threshold,
                  "at_least": lo is not None and hi is None,
                  "below_at": hi if lo is None else None,
                  "validated": all(p["validated"] for p in mine),
                  "extrapolated": lo is not None and lo > measured_max}
    return out


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m hpcio.simulate", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="fit latency, bandwidth and CPU per sample to runs")
    c.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP",
                   help="run directories, sweep directories, or directories of runs")
    c.add_argument("--platform", required=True, help="platform YAML the runs ran on")
    c.add_argument("-o", "--output", help="write the fitted platform YAML here")
    c.set_defaults(func=_calibrate)
    p = sub.add_parser("predict", help="calibrate on runs, validate, predict at --ranks")
    p.add_argument("--platform", required=True, help="platform YAML")
    p.add_argument("--from", dest="runs", nargs="+", required=True, metavar="RUN_OR_SWEEP",
                   help="run directories, sweep directories, or directories of runs")
    p.add_argument("--ranks", type=_ranks, required=True, help="e.g. 1,2,4,8,16")
    p.add_argument("--steps", type=int, default=None, help="steps to simulate (the runs')")
    p.add_argument("--records", type=int, default=None,
                   help="dataset records (the runs'; more for many ranks)")
    p.add_argument("--also", type=_variant, action="append", metavar="READER[:SHUFFLE]",
                   help="also predict a reader the runs did not use, from its reader's runs "
                        "and costs: naive-cursor:none (Caffe's cursor), coordinated:none")
    p.add_argument("--readers", metavar="CALIBRATION.yaml",
                   help="take each reader's costs from `calibrate -o` (e.g. on the testbed) "
                        "and the platform's storage as described, fitting nothing")
    p.add_argument("--au-threshold", type=float, default=90.0, metavar="PERCENT",
                   help="AU the accelerators-supported count keeps (MLPerf Storage: 90 for "
                        "resnet50 and unet3d, 70 for cosmoflow)")
    p.add_argument("--scale-out", action="store_true",
                   help="add nodes of the platform's kind for rank counts it cannot hold")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.set_defaults(func=_predict)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.simulate"))
