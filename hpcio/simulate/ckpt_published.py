"""``python -m hpcio.simulate checkpoint published``: MLPerf Storage v3.0's published
checkpoint rows predicted from the submitted systems' descriptions.

Each system is a platform file under ``platforms/published/checkpoint/`` whose every value
carries its source in a comment (as the training systems' files beside it, checked the same
way); ``checkpoint.csv`` there holds the published row (model, hosts, processes, write and
read GiB/s) and the ``summary.json`` it comes from. The prediction writes and reads the
model's checkpoint as DLIO does (``pt_save``: the ``torch_save`` writer, file per process)
with the published processes spread evenly over the hosts.
"""

import csv
import io
import os

from ..errors import HpcioError
from ..fsutil import atomic_write
from .checkpoint import PHASES, load_ckpt_platform, make_case, simulate_cases
from .published import read_table, sourced_text

__all__ = ["DATA", "TABLE", "load_rows", "predict_rows", "add_published"]

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "platforms", "published",
                    "checkpoint")
TABLE = os.path.join(DATA, "checkpoint.csv")
COLUMNS = ("system", "org", "model", "hosts", "processes", "write_gib_s", "read_gib_s",
           "platform", "summary", "description")


def load_rows(path=TABLE):
    """The published checkpoint rows, each with its columns (a read figure may be absent:
    some submissions published their writes alone)."""
    return read_table(path, COLUMNS, optional=("read_gib_s",))


def load_system(name):
    """(Platform, CkptCosts) of a published system's file, its sources checked first."""
    path = os.path.join(DATA, name)
    platform, costs, _ = load_ckpt_platform(path, sourced_text(path))
    return platform, costs


def predict_rows(rows):
    """Per published row: the predicted write and read GiB/s, the error against the
    published figure, and what set each."""
    cases = []
    for r in rows:
        platform, costs = load_system(r["platform"])
        procs, hosts = int(r["processes"]), int(r["hosts"])
        if procs % hosts or platform.ranks_per_node * platform.nodes != procs:
            raise HpcioError(f"{r['platform']}: nodes x ranks_per_node must be the row's "
                             f"{procs} processes on {hosts} hosts")
        cases.extend(make_case(platform, costs, r["model"], procs, "torch_save", ph)
                     for ph in PHASES)
    sims = simulate_cases(cases)
    out = []
    for k, r in enumerate(rows):
        w, rd = sims[2 * k], sims[2 * k + 1]
        pw = float(r["write_gib_s"])
        pr = float(r["read_gib_s"]) if r.get("read_gib_s") else None
        out.append({**r, "sim_write_gib_s": w["GiB_per_s"],
                    "write_err": w["GiB_per_s"] / pw - 1, "write_limit": w["limit"],
                    "sim_read_gib_s": rd["GiB_per_s"],
                    "read_err": rd["GiB_per_s"] / pr - 1 if pr else None,
                    "read_limit": rd["limit"]})
    return out


def _pct(v):
    return "-" if v is None else f"{100 * v:+.0f}%"


def _markdown(rows):
    lines = ["| system | model | hosts / procs | write GiB/s published / predicted (err) "
             "| set by | read GiB/s published / predicted (err) | set by |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['org']}: `{r['platform'][:-5]}` | {r['model']} | "
            f"{r['hosts']} / {r['processes']} | "
            f"{float(r['write_gib_s']):.1f} / {r['sim_write_gib_s']:.1f} "
            f"({_pct(r['write_err'])}) | {r['write_limit']} | "
            f"{r['read_gib_s'] or '-'} / {r['sim_read_gib_s']:.1f} ({_pct(r['read_err'])}) "
            f"| {r['read_limit']} |")
    return "\n".join(lines) + "\n"


def _published(args):
    rows = load_rows()
    if args.only:
        rows = [r for r in rows if args.only in r["system"] or args.only == r["platform"]]
        if not rows:
            raise HpcioError(f"--only {args.only}: no published checkpoint row matches")
    out = predict_rows(rows)
    print("MLPerf Storage v3.0 checkpoint rows, predicted from the systems' descriptions "
          "(DLIO pt_save, file per process):")
    print(_markdown(out), end="")
    if args.output:
        buf = io.StringIO()
        keys = list(COLUMNS) + ["sim_write_gib_s", "write_err", "write_limit",
                                "sim_read_gib_s", "read_err", "read_limit"]
        w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in out:
            w.writerow({k: (f"{r[k]:.4f}" if isinstance(r[k], float) else r[k]) for k in keys})
        data = buf.getvalue().encode()
        atomic_write(args.output, lambda f: f.write(data))
        print(f"wrote {args.output}")
    return 0


def add_published(sub):
    p = sub.add_parser("published", help="MLPerf Storage v3.0's published checkpoint rows "
                       "predicted from the systems' descriptions")
    p.add_argument("--only", help="one system (a part of its name, or its platform file)")
    p.add_argument("-o", "--output", help="write the predictions as CSV here")
    p.set_defaults(func=_published)
