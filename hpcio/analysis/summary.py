"""The run's figures from every rank's totals, and the tables that print them.

Definitions of every figure: :mod:`hpcio.measure.steps`.
"""

import numpy as np

__all__ = ["summarize", "format_table", "side_by_side", "SIDE_BY_SIDE_ROWS"]


def summarize(per_rank):
    """The run's figures from every rank's :func:`hpcio.measure.steps.rank_summary` (see
    :mod:`hpcio.measure.steps` for the definitions)."""
    ranks = len(per_rank)
    meas = [r["measured"] for r in per_rank]
    wall = sum(m["wall"] for m in meas)
    pct = (lambda x: 100.0 * x / wall) if wall else (lambda x: 0.0)
    au = np.array([r["au"] for r in per_rank])
    et = np.array([r["epoch_time"] for r in per_rank])
    stall = sum(m["fetch"] + m["prep"] + m["stall_other"] for m in meas)
    s = {
        "ranks": ranks,
        "steps_per_rank": per_rank[0]["steps"],
        "steps_measured_per_rank": per_rank[0]["steps_measured"],
        "au_excludes_first_step": all(r["au_excludes_first_step"] for r in per_rank),
        "au_percent": 100.0 * float(au.mean()),
        "au_percent_min": 100.0 * float(au.min()),
        "au_percent_max": 100.0 * float(au.max()),
        "samples_per_s": sum(m["records"] / m["wall"] for m in meas if m["wall"]),
        "mib_per_s": sum(m["nbytes"] / m["wall"] for m in meas if m["wall"]) / 2 ** 20,
        "stall_percent": pct(stall),
        "fetch_percent": pct(sum(m["fetch"] for m in meas)),
        "prep_percent": pct(sum(m["prep"] for m in meas)),
        "stall_other_percent": pct(sum(m["stall_other"] for m in meas)),
        "h2d_percent": pct(sum(m["h2d"] for m in meas)),
        "compute_percent": pct(sum(m["compute"] for m in meas)),
        "ckpt_percent": pct(sum(m["ckpt"] for m in meas)),
        "other_percent": pct(sum(m["other"] for m in meas)),
        "records": sum(r["all"]["records"] for r in per_rank),
        "bytes": sum(r["all"]["nbytes"] for r in per_rank),
        "epoch_time_s_slowest": float(et.max()),
        "epoch_time_s_fastest": float(et.min()),
        "slowest_rank": int(et.argmax()),
        "fastest_rank": int(et.argmin()),
        "slowest_over_fastest": float(et.max() / et.min()) if et.min() > 0 else None,
        "epoch_time_s_per_rank": et.tolist(),
        "au_percent_per_rank": (100.0 * au).tolist(),
    }
    nep = max(len(r["epochs"]) for r in per_rank)
    s["per_epoch"] = [{
        "epoch": per_rank[0]["epochs"][e]["epoch"],
        "au_percent": 100.0 * float(np.mean([r["epochs"][e]["au"] for r in per_rank])),
        "wall_s_slowest": max(r["epochs"][e]["wall"] for r in per_rank),
        "wall_s_fastest": min(r["epochs"][e]["wall"] for r in per_rank),
        "records": sum(r["epochs"][e]["records"] for r in per_rank),
    } for e in range(nep) if all(len(r["epochs"]) > e for r in per_rank)]
    return s


def format_table(s, title=""):
    """The end-of-run table rank 0 prints (and saves as summary.txt)."""
    first = ("first step of each epoch excluded" if s["au_excludes_first_step"]
             else "all steps (epochs of one step)")
    ratio = s["slowest_over_fastest"]
    lines = [title] if title else []
    rows = [
        ("samples/s", f"{s['samples_per_s']:.1f}"),
        ("MiB/s", f"{s['mib_per_s']:.2f}"),
        ("AU %", f"{s['au_percent']:.1f}  (ranks {s['au_percent_min']:.1f}"
                 f"-{s['au_percent_max']:.1f})"),
        ("stall %", f"{s['stall_percent']:.1f}  (fetch {s['fetch_percent']:.1f} / prep "
                    f"{s['prep_percent']:.1f} / other {s['stall_other_percent']:.1f})"),
        ("h2d / compute / ckpt / other %",
         f"{s['h2d_percent']:.1f} / {s['compute_percent']:.1f} / {s['ckpt_percent']:.1f}"
         f" / {s['other_percent']:.1f}"),
        ("epoch time slowest/fastest", f"{s['epoch_time_s_slowest']:.3f} s (rank "
         f"{s['slowest_rank']}) / {s['epoch_time_s_fastest']:.3f} s (rank "
         f"{s['fastest_rank']})" + (f" = {ratio:.2f}x" if ratio else "")),
        ("steps/rank measured", f"{s['steps_measured_per_rank']} of "
                                f"{s['steps_per_rank']} ({first})"),
    ]
    w = max(len(k) for k, _ in rows)
    lines += [f"  {k:<{w}}  {v}" for k, v in rows]
    return "\n".join(lines)


SIDE_BY_SIDE_ROWS = [  # (label, summary.json metrics key, format)
    ("samples/s", "samples_per_s", "{:,.1f}"),
    ("MiB/s", "mib_per_s", "{:,.2f}"),
    ("AU %", "au_percent", "{:.1f}"),
    ("stall %", "stall_percent", "{:.2f}"),
    ("  fetch %", "fetch_percent", "{:.2f}"),
    ("  prep %", "prep_percent", "{:.2f}"),
    ("compute %", "compute_percent", "{:.1f}"),
    ("epoch s, slowest rank", "epoch_time_s_slowest", "{:.3f}"),
    ("slowest / fastest rank", "slowest_over_fastest", "{:.3f}"),
]


def side_by_side(summaries):
    """A table with one column per run: {name: summary.json dict}."""
    names = list(summaries)
    width = max(12, *(len(n) for n in names))
    lines = ["".ljust(24) + "".join(n.rjust(width + 2) for n in names)]
    for label, key, fmt in SIDE_BY_SIDE_ROWS:
        cells = []
        for n in names:
            v = summaries[n]["metrics"].get(key)
            cells.append(("-" if v is None else fmt.format(v)).rjust(width + 2))
        lines.append(label.ljust(24) + "".join(cells))
    return "\n".join(lines)
