"""The reader benchmark's table: medians and spreads of ``python -m hpcio.bench`` runs, as
ratios to the machine's own limits measured in the same repeat."""

import statistics

__all__ = ["RATIOS", "COLUMNS", "summarize", "table"]

#: every column of :func:`table`, defined once (printed under it)
COLUMNS = {
    "rec/s/rank": "records a rank delivered / that rank's time, mean over ranks",
    "MB/s": "all ranks' record bytes / the run's time (slowest rank), 10^6 bytes",
    "x seq": "MB/s / one sequential stream of the same files (seq: rank 0 reads every "
             "file in 8 MiB preadv calls, like dd bs=8M), same repeat and cache state",
    "x ranks": "MB/s / every rank reading its contiguous share at once (seq-ranks)",
    "[min..max]": "the ratio's range over the repeats (the figure is their median)",
    "dev/rec": "bytes the data's disk read (/proc/diskstats, node-wide) / record bytes "
               "delivered: read amplification",
    "stall s": "seconds the consumer waited for batches, mean over ranks",
    "res": "fraction of the files in the page cache just before the run (mincore)",
    "load": "1-minute load average before the run",
}


def _med(xs):
    xs = [x for x in xs if x is not None]
    return (statistics.median(xs), min(xs), max(xs)) if xs else (None, None, None)


#: the ratio columns: key in a run / summary row -> the limit it divides by
RATIOS = {"x_seq": "seq", "x_seq_ranks": "seq-ranks"}


def summarize(runs):
    """Median and spread per (dataset, cache, shuffle, what), with ratios to the limits of
    the same repeat: ``x_seq`` to ``seq`` (one sequential stream, ``dd bs=8M``),
    ``x_seq_ranks`` to ``seq-ranks`` (every rank its contiguous share at once)."""
    lim = {}
    for r in runs:
        if r["what"] in RATIOS.values() and "mb_s" in r:
            lim[(r["dataset"], r["cache"], r["shuffle"], r["repeat"], r["what"])] = r["mb_s"]
    groups = {}
    for r in runs:
        if "mb_s" not in r:
            continue
        key = (r["dataset"], r["cache"], r["shuffle"], r["what"])
        for col, what in RATIOS.items():
            s = lim.get((r["dataset"], r["cache"], r["shuffle"], r["repeat"], what))
            r[col] = r["mb_s"] / s if s else None
        groups.setdefault(key, []).append(r)
    rows = []
    for key, rs in groups.items():
        row = dict(zip(("dataset", "cache", "shuffle", "what"), key))
        for k in ("rec_s_rank", "mb_s", *RATIOS, "stall_s", "amplification", "resident"):
            row[k] = _med([r.get(k) for r in rs])
        row["load"] = _med([r["loadavg"][0] for r in rs if r.get("loadavg")
                            and r["loadavg"][0] is not None])
        row["n"] = len(rs)
        rows.append(row)
    return rows


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _ratio(t):
    m, lo, hi = t
    return f"{_fmt(m, '.2f')} [{_fmt(lo, '.2f')}..{_fmt(hi, '.2f')}]"


def table(rows):
    """The summary as text: ``x seq`` against one sequential stream (``seq``), ``x ranks``
    against every rank reading its share at once (``seq-ranks``)."""
    head = (f"{'dataset':<22} {'cache':<5} {'shuffle':<7} {'what':<40} {'rec/s/rank':>11} "
            f"{'MB/s':>8} {'x seq [min..max]':>19} {'x ranks [min..max]':>19} "
            f"{'dev/rec':>7} {'stall s':>8} {'res':>5} {'load':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['dataset'][:22]:<22} {r['cache']:<5} {r['shuffle']:<7} "
                     f"{r['what'][:40]:<40} {_fmt(r['rec_s_rank'][0], ',.0f'):>11} "
                     f"{_fmt(r['mb_s'][0], ',.0f'):>8} {_ratio(r['x_seq']):>19} "
                     f"{_ratio(r['x_seq_ranks']):>19} "
                     f"{_fmt(r['amplification'][0], '.2f'):>7} "
                     f"{_fmt(r['stall_s'][0], '.3f'):>8} {_fmt(r['resident'][0], '.2f'):>5} "
                     f"{_fmt(r['load'][0], '.2f'):>5}")
    w = max(map(len, COLUMNS))
    lines += [""] + [f"{k:>{w}}  {v}" for k, v in COLUMNS.items()]
    return "\n".join(lines)
