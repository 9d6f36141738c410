"""The run's figures from every rank's totals, and the tables that print them.

Definitions of every figure: :mod:`hpcio.measure.steps`.
"""

import numpy as np

__all__ = ["summarize", "format_table", "run_summary", "side_by_side", "SIDE_BY_SIDE_ROWS",
           "au_threshold_percent", "SPLIT", "split", "figures_line"]

#: the step's time split, every step: (summary key, label); each is the mean over ranks of
#: the component's share of the rank's wall time, so they add up to 100% and ``compute``
#: is the AU over every step
SPLIT = [("compute_percent", "compute"), ("stall_percent", "stall"),
         ("straggler_wait_percent", "straggler wait"), ("exchange_percent", "exchange"),
         ("h2d_percent", "h2d"), ("ckpt_percent", "ckpt"), ("other_percent", "other")]


def split(s, always=("compute_percent", "stall_percent")):
    """[(label, percent)] of the time split of summary figures ``s``: compute and stall
    always, the others where not zero (to the printed 0.1%)."""
    return [(label, s.get(k) or 0.0) for k, label in SPLIT
            if k in always or round(s.get(k) or 0.0, 1)]


def figures_line(s):
    """One line of a run's figures, each labelled with its rule: AU by MLPerf Storage's
    rule, then the every-step split that adds up to 100%."""
    parts = ", ".join(f"{label} {v:.1f}%" for label, v in split(s))
    return f"AU {s['au_percent']:.1f}% (MLPerf rule); every step: {parts}"


def au_threshold_percent(value):
    """A run's ``au_threshold`` (its config.yaml) in percent, or None: runs recorded it as
    a fraction (0.9) before every command took percent (90), which refuses 1 or less."""
    if value is None:
        return None
    return 100.0 * value if value <= 1 else float(value)


def summarize(per_rank):
    """The run's figures from every rank's :func:`hpcio.measure.steps.rank_summary` (see
    :mod:`hpcio.measure.steps` for the definitions)."""
    ranks = len(per_rank)
    every = [r["all"] for r in per_rank]

    def pct(part):  # the mean over ranks of each rank's share of its own wall time
        return 100.0 * float(np.mean([part(m) / m["wall"] if m["wall"] else 0.0
                                      for m in every]))
    au = np.array([r["au"] for r in per_rank])
    au_all = np.array([r["au_all_steps"] for r in per_rank])
    et = np.array([r["epoch_time"] for r in per_rank])
    nep = min(len(r["epochs"]) for r in per_rank)
    waits = np.array([[r["epochs"][e]["first_step_wait"] for r in per_rank]
                      for e in range(nep)], dtype=float).reshape(nep, ranks)
    seen = ~np.isnan(waits)
    s = {
        "ranks": ranks,
        "steps_per_rank": per_rank[0]["steps"],
        "steps_measured_per_rank": per_rank[0]["steps_measured"],
        "au_excludes_first_step": all(r["au_excludes_first_step"] for r in per_rank),
        "au_percent": 100.0 * float(au.mean()),
        "au_percent_min": 100.0 * float(au.min()),
        "au_percent_max": 100.0 * float(au.max()),
        "au_percent_all_steps": 100.0 * float(au_all.mean()),
        "au_percent_all_steps_min": 100.0 * float(au_all.min()),
        "au_percent_all_steps_max": 100.0 * float(au_all.max()),
        "first_step_wait_s_mean": float(waits[seen].mean()) if seen.any() else None,
        "first_step_wait_s_max": float(waits[seen].max()) if seen.any() else None,
        "samples_per_s": sum(m["records"] / m["wall"] for m in every if m["wall"]),
        "mib_per_s": sum(m["nbytes"] / m["wall"] for m in every if m["wall"]) / 2 ** 20,
        "stall_percent": pct(lambda m: m["fetch"] + m["prep"] + m["stall_other"]),
        "fetch_percent": pct(lambda m: m["fetch"]),
        "prep_percent": pct(lambda m: m["prep"]),
        "stall_other_percent": pct(lambda m: m["stall_other"]),
        "straggler_wait_percent": pct(lambda m: m.get("straggler_wait", 0.0)),
        "exchange_percent": pct(lambda m: m.get("exchange", 0.0)),
        "first_bucket_wait_s_mean": (sum(m.get("first_bucket_wait", 0.0) for m in every)
                                     / max(1, sum(r["steps"] for r in per_rank))),
        "h2d_percent": pct(lambda m: m["h2d"]),
        "compute_percent": pct(lambda m: m["compute"]),
        "ckpt_percent": pct(lambda m: m["ckpt"]),
        "other_percent": pct(lambda m: m["other"]),
        "records": sum(m["records"] for m in every),
        "bytes": sum(m["nbytes"] for m in every),
        "epoch_time_s_slowest": float(et.max()),
        "epoch_time_s_fastest": float(et.min()),
        "slowest_rank": int(et.argmax()),
        "fastest_rank": int(et.argmin()),
        "slowest_over_fastest": float(et.max() / et.min()) if et.min() > 0 else None,
        "epoch_time_s_per_rank": et.tolist(),
        "au_percent_per_rank": (100.0 * au).tolist(),
        "au_percent_all_steps_per_rank": (100.0 * au_all).tolist(),
        # the ranks' process CPU (getrusage user + system over the epochs) per sample
        # delivered: the input pipeline's and the step loop's own (the model's too when it
        # computes on the CPU); None where the ranks did not record it
        "client_cpu_s_per_sample": (sum(r["cpu_s"] for r in per_rank)
                                    / max(1, sum(m["records"] for m in every)))
        if all(r.get("cpu_s") is not None for r in per_rank) else None,
    }
    s["per_epoch"] = []
    for e in range(nep):
        eps = [r["epochs"][e] for r in per_rank]
        w = waits[e][seen[e]]
        s["per_epoch"].append({
            "epoch": eps[0]["epoch"],
            "au_percent": 100.0 * float(np.mean([x["au"] for x in eps])),
            "au_percent_all_steps": 100.0 * float(np.mean([x["au_all_steps"] for x in eps])),
            "first_step_wait_s_mean": float(w.mean()) if len(w) else None,
            "first_step_wait_s_max": float(w.max()) if len(w) else None,
            "wall_s_slowest": max(x["wall"] for x in eps),
            "wall_s_fastest": min(x["wall"] for x in eps),
            "records": sum(x["records"] for x in eps)})
    walls = [e["wall_s_slowest"] for e in s["per_epoch"]]
    s["epoch_s_mean"] = float(np.mean(walls)) if walls else None  # one epoch, not the run
    return s


def format_table(s, title=""):
    """The end-of-run table rank 0 prints (and saves as summary.txt)."""
    first = ("first step of each epoch excluded" if s["au_excludes_first_step"]
             else "all steps: epochs of one step")
    ratio = s["slowest_over_fastest"]
    lines = [title] if title else []
    wait = s.get("first_step_wait_s_mean")
    rows = [
        ("samples/s (every step)", f"{s['samples_per_s']:.1f}"),
        ("MiB/s (every step)", f"{s['mib_per_s']:.2f}"),
        ("AU % (MLPerf Storage rule)", f"{s['au_percent']:.1f}  (ranks "
                                       f"{s['au_percent_min']:.1f}-{s['au_percent_max']:.1f};"
                                       f" {first}: {s['steps_measured_per_rank']} of "
                                       f"{s['steps_per_rank']} steps/rank)"),
        ("first-step wait", "-" if wait is None else
         f"{wait:.3f} s mean, {s['first_step_wait_s_max']:.3f} s max over ranks and "
         f"epochs"),
        ("step time, every step", "% of wall, mean over ranks; adds up to 100"),
    ]
    for label, v in split(s):
        what = {"compute": f"  (= AU over every step; ranks "
                           f"{s['au_percent_all_steps_min']:.1f}-"
                           f"{s['au_percent_all_steps_max']:.1f})",
                "stall": f"  own wait: fetch {s['fetch_percent']:.1f} / prep "
                         f"{s['prep_percent']:.1f} / other {s['stall_other_percent']:.1f}",
                "straggler wait": "  at the per-step barrier, for the slowest rank"
                }.get(label, "")
        rows.append((f"  {label}", f"{v:.1f}{what}"))
    rows += [
        ("epoch time, slowest rank", "-" if s.get("epoch_s_mean") is None else
         f"{s['epoch_s_mean']:.3f} s (mean over {len(s['per_epoch'])} epoch(s))"),
        ("all epochs slowest/fastest", f"{s['epoch_time_s_slowest']:.3f} s (rank "
         f"{s['slowest_rank']}) / {s['epoch_time_s_fastest']:.3f} s (rank "
         f"{s['fastest_rank']})" + (f" = {ratio:.2f}x" if ratio else "")),
    ]
    if s.get("barrier_s_per_step") is not None:
        rows.insert(-2, ("barrier per step",
                         f"{1000 * s['barrier_s_per_step']:.2f} ms (what the last rank to "
                         f"arrive still waits: the barrier's own cost, median over steps)"))
    if s.get("client_cpu_s_per_sample") is not None:
        rows.insert(-2, ("client CPU per sample",
                         f"{1000 * s['client_cpu_s_per_sample']:.3f} ms (the ranks' process "
                         f"CPU, user + system, per sample delivered)"))
    if s.get("first_bucket_wait_s_mean"):
        rows.insert(-2, ("first-bucket wait (in compute)",
                         f"{1000 * s['first_bucket_wait_s_mean']:.2f} ms per step (DDP: its "
                         f"first gradient bucket ready -> reduced)"))
    w = max(len(k) for k, _ in rows)
    lines += [f"  {k:<{w}}  {v}" for k, v in rows]
    return "\n".join(lines)


def run_summary(head, per_rank, title, tail=None, empty="no step completed", more=None):
    """(summary.json's document, summary.txt's table) of a run, as ``hpcio.train`` writes
    them at its end and ``hpcio.results summarize`` from what the ranks flushed: the
    document is ``head`` (what the run was and how it ended, in order), ``metrics``
    (:func:`summarize` of ``per_rank``; None when ``per_rank`` is None or empty), then
    ``tail``; the table is :func:`format_table` of the figures under ``title`` (``title``
    and ``empty`` without figures). ``more``: figures measured across ranks (the
    barrier's cost per step), added to ``metrics``."""
    figures = summarize(per_rank) if per_rank else None
    if figures is not None and more:
        figures.update(more)
    doc = dict(head, metrics=figures)
    threshold = head.get("au_threshold_percent")
    if threshold is not None:     # MLPerf Storage's verdict: AU (its rule) >= threshold
        doc["au_pass"] = None if figures is None else figures["au_percent"] >= threshold
    doc.update(tail or {})
    text = format_table(figures, title) if figures else f"{title}\n  {empty}"
    if figures and threshold is not None:
        text += (f"\n  AU threshold{' of ' + head['workload'] if head.get('workload') else ''}"
                 f": {threshold:.0f}%: {'PASS' if doc['au_pass'] else 'FAIL'} (AU "
                 f"{figures['au_percent']:.1f}%, MLPerf Storage's rule)")
    return doc, text


SIDE_BY_SIDE_ROWS = [  # (label, summary.json metrics key, format or a function of the value)
    ("samples/s", "samples_per_s", "{:,.1f}"),
    ("MiB/s", "mib_per_s", "{:,.2f}"),
    ("AU % every step", "au_percent_all_steps", "{:.1f}"),
    ("AU % MLPerf rule", "au_percent", "{:.1f}"),
    ("first-step wait s, max", "first_step_wait_s_max", "{:.3f}"),
    ("stall %", "stall_percent", "{:.2f}"),
    ("  fetch %", "fetch_percent", "{:.2f}"),
    ("  prep %", "prep_percent", "{:.2f}"),
    ("straggler wait %", "straggler_wait_percent", "{:.2f}"),
    ("exchange %", "exchange_percent", "{:.2f}"),
    ("barrier ms/step", "barrier_s_per_step", lambda v: f"{1000 * v:.2f}"),
    ("client CPU ms/sample", "client_cpu_s_per_sample", lambda v: f"{1000 * v:.3f}"),
    ("compute %", "compute_percent", "{:.1f}"),
    ("epoch s, slowest rank", "epoch_s_mean", "{:.3f}"),
    ("all epochs s, slowest", "epoch_time_s_slowest", "{:.3f}"),
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
            text = "-" if v is None else fmt(v) if callable(fmt) else fmt.format(v)
            cells.append(text.rjust(width + 2))
        lines.append(label.ljust(24) + "".join(cells))
    return "\n".join(lines)
