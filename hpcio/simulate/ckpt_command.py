"""``python -m hpcio.simulate checkpoint predict|calibrate|published``: checkpoint write
and read GiB/s simulated (:mod:`.checkpoint`), fitted to measured runs
(:mod:`.ckpt_calibrate`), and checked against MLPerf Storage's published rows
(:mod:`.ckpt_published`)."""

import argparse
import json

from ..checkpoint.layout import MODELS
from ..errors import HpcioError
from ..fsutil import atomic_write
from .checkpoint import PHASES, WRITERS, load_ckpt_platform, make_case, simulate_cases, \
    write_ckpt_platform
from .ckpt_calibrate import client_costs, fit, load_runs, medians, residuals, \
    summary_errors, with_writers
from .ckpt_published import add_published
from .engine import MAX_ACTORS

__all__ = ["add_parser"]


def _ranks(text):
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of process counts: "
                                         f"{text!r}")
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"process counts must be >= 1: {text!r}")
    return out


def _row(case, w, r):
    note = f"grouped: an actor per {w['group']} ranks" if w["group"] > 1 else ""
    return {"model": case.layout.model.name, "writer": case.writer,
            "ranks": case.layout.world, "nodes": -(-case.layout.world //
                                                   case.platform.ranks_per_node),
            "gib": w["bytes"] / 2 ** 30, "write_s": w["wall_s"], "write_gib_s": w["GiB_per_s"],
            "write_limit": w["limit"], "read_s": r["wall_s"], "read_gib_s": r["GiB_per_s"],
            "read_limit": r["limit"], "note": note}


def _print_rows(rows):
    print(f"  {'model':<12} {'writer':<12} {'P':>5} {'nodes':>5} {'GiB':>10} "
          f"{'write s':>9} {'GiB/s':>8} {'set by':<11} {'read s':>9} {'GiB/s':>8} "
          f"{'set by':<11} note")
    for r in rows:
        print(f"  {r['model']:<12} {r['writer']:<12} {r['ranks']:>5} {r['nodes']:>5} "
              f"{r['gib']:>10.2f} {r['write_s']:>9.3f} {r['write_gib_s']:>8.2f} "
              f"{r['write_limit']:<11} {r['read_s']:>9.3f} {r['read_gib_s']:>8.2f} "
              f"{r['read_limit']:<11} {r['note']}")


def _predict(args):
    platform, costs, _ = load_ckpt_platform(args.platform)
    writers = args.writer or sorted(WRITERS)
    cases = [make_case(platform, costs, args.model, n, w, ph, args.scale, args.files)
             for n in args.ranks for w in writers for ph in PHASES]
    sims = simulate_cases(cases)
    rows = [_row(cases[k], sims[k], sims[k + 1]) for k in range(0, len(cases), 2)]
    print(f"checkpoint on {platform.name} ({platform.ranks_per_node} processes per node; "
          f"wall = the slowest rank's, GiB/s = checkpoint / wall as MLPerf; 'set by': the "
          f"resource busiest over the wall):")
    _print_rows(rows)
    if args.output:
        data = (json.dumps({"platform": args.platform, "rows": rows}, indent=1) + "\n").encode()
        atomic_write(args.output, lambda f: f.write(data))
        print(f"wrote {args.output}")
    return 0


def _print_residuals(title, rows):
    print(title)
    print(f"  {'point':<16} {'P':>3} {'rounds':>6} {'write GiB/s meas (range) / sim':>32} "
          f"{'err':>6} {'read GiB/s meas (range) / sim':>31} {'err':>6}  set by (write, read)")
    for r in rows:
        wr, rr = r["write_range"], r["read_range"]
        print(f"  {r['run']:<16} {r['ranks']:>3} {r['rounds']:>6} {r['write_gib_s']:>7.3f} "
              f"({wr[0]:.3f}-{wr[1]:.3f}) / {r['sim_write_gib_s']:<6.3f} "
              f"{100 * r['write_err']:>+5.0f}% {r['read_gib_s']:>7.3f} "
              f"({rr[0]:.3f}-{rr[1]:.3f}) / {r['sim_read_gib_s']:<6.3f} "
              f"{100 * r['read_err']:>+5.0f}%  {r['write_limit']}, {r['read_limit']}")


def calibrate_report(platform, costs, runs, client, on):
    """Fit on the runs at ``on`` processes, the writers' costs from ``client``; (platform,
    costs, fitted values, calibration rows, held-out rows)."""
    costs = with_writers(costs, client_costs(client))
    runs = medians(runs)
    used = [r for r in runs if r.ranks in on]
    held = [r for r in runs if r.ranks not in on]
    if not used:
        raise HpcioError(f"--calibrate-on {','.join(map(str, on))}: no run at those "
                         f"process counts (have {sorted({r.ranks for r in runs})})")
    missing = sorted({r.writer for r in runs} - set(costs.writers))
    if missing:
        raise HpcioError(f"no client run for writer {', '.join(missing)} (--client-runs)")
    platform, costs, values = fit(platform, costs, used)
    return platform, costs, values, residuals(platform, costs, used), \
        residuals(platform, costs, held)


def _header(path):
    """The platform file's leading comment lines (what it describes, where from), which the
    fitted file keeps: calibrating into the file it reads changes only its values."""
    with open(path) as f:
        lines = f.read().splitlines()
    head = []
    for line in lines:
        if not line.startswith("#"):
            break
        head.append(line + "\n")
    return "".join(head)


def _calibrate(args):
    platform, costs, _ = load_ckpt_platform(args.platform, required=False)
    runs, client = load_runs(args.runs), load_runs(args.client_runs)
    platform, costs, values, cal, held = calibrate_report(platform, costs, runs, client,
                                                          args.calibrate_on)
    print("writers' own cost (client runs, tmpfs): " + "; ".join(
        f"{w} write {c.write_ns_per_byte:.3f} / read {c.read_ns_per_byte:.3f} ns/B"
        for w, c in sorted(costs.writers.items())))
    print("fitted: " + ", ".join(f"{k} {v:.4g}" for k, v in values.items()))
    _print_residuals(f"calibration runs (P in {args.calibrate_on}):", cal)
    errors = {}
    if held:
        _print_residuals("held out:", held)
        for n in sorted({h["ranks"] for h in held}):
            rows = [h for h in held if h["ranks"] == n]
            w, r = summary_errors(rows)
            errors[n] = {"write": round(w, 1), "read": round(r, 1)}
            print(f"held-out error at {n} processes, mean |sim/meas - 1| over {len(rows)} "
                  f"points (the median of their rounds): write {w:.0f}%, read {r:.0f}%")
    else:
        print("held out: no run at another process count; the fit is unvalidated")
    if args.output:
        write_ckpt_platform(args.output, platform, costs, {
            "runs": len(runs), "client_runs": sorted(r.name for r in client),
            "calibrate_on": args.calibrate_on, "held_out_error_percent": errors},
            _header(args.platform))
        print(f"wrote {args.output}")
    return 0


def add_parser(sub):
    """``checkpoint`` and its commands under ``python -m hpcio.simulate``."""
    ck = sub.add_parser("checkpoint", help="checkpoint write/read GiB/s: predict, "
                        "calibrate on runs, published rows",
                        description=__doc__)
    cs = ck.add_subparsers(dest="ckpt_command", required=True)
    p = cs.add_parser("predict", help="write and read GiB/s of a llama3 checkpoint on a "
                      "platform at --ranks processes")
    p.add_argument("--platform", required=True,
                   help="platform YAML with a checkpoint section (write_mbs, create_us, "
                        "open_us, fsync_ms, metadata_ops, writers)")
    p.add_argument("--model", default="llama3_8b",
                   help=f"{', '.join(MODELS)} or a DLIO config file")
    p.add_argument("--ranks", type=_ranks, required=True,
                   help=f"processes, e.g. 8,64,1024 (above {MAX_ACTORS} a node's ranks are "
                        f"simulated as one actor)")
    p.add_argument("--writer", action="append", choices=sorted(WRITERS),
                   help="repeatable (default: all): dcp and torch_save file per process, "
                        "coordinated shared files")
    p.add_argument("--scale", type=float, default=1.0, help="tensor scale, as hpcio.checkpoint")
    p.add_argument("--files", type=int, default=1, help="coordinated: shared files")
    p.add_argument("-o", "--output", help="also write the rows as JSON here")
    p.set_defaults(func=_predict)
    c = cs.add_parser("calibrate", help="fit write/read bandwidth, create/open and fsync to "
                      "runs; validate on the process counts held out")
    c.add_argument("--platform", required=True, help="platform YAML the runs ran on")
    c.add_argument("--runs", nargs="+", required=True, metavar="RUN",
                   help="hpcio.checkpoint run directories (or directories of them)")
    c.add_argument("--client-runs", nargs="+", required=True, metavar="RUN",
                   help="one-process runs of each writer on tmpfs: the writers' own cost")
    c.add_argument("--calibrate-on", type=_ranks, default=[1, 2],
                   help="process counts fitted; the others are held out")
    c.add_argument("-o", "--output", help="write the fitted platform YAML here")
    c.set_defaults(func=_calibrate)
    add_published(cs)
