"""The report's figures, drawn headless (matplotlib's Agg backend) into PNG files.

Each function takes plain numbers (no run objects) and the PNG path, and returns the path.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.colors import LogNorm  # noqa: E402
import numpy as np  # noqa: E402

from .model import predict  # noqa: E402

__all__ = ["stall_vs_ranks", "breakdown", "heatmap", "bandwidth", "os_counters", "dxt_steps",
           "simulated"]

_FLOOR = 1e-5  # seconds: where a stall of 0 is drawn on a log axis


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _ranged(ax, pts, color, label, fmt="o", floor=None):
    """Medians with their range over repeats as error bars. pts: [(P, median, min, max)]."""
    P, med, lo, hi = (np.array(c, float) for c in zip(*sorted(pts)))
    if floor is not None:
        med, lo, hi = (np.maximum(v, floor) for v in (med, lo, hi))
    ax.errorbar(P, med, yerr=[med - lo, hi - med], fmt=fmt, color=color, capsize=3,
                label=label)


def stall_vs_ranks(series, models, path):
    """Stall per step (max over ranks) against P, log-log, per reader, with the model's
    curve where it was fitted. series: {reader: [(P, median, min, max)]}; models:
    {reader: model}."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    top = max(p[0] for pts in series.values() for p in pts)
    for k, (reader, pts) in enumerate(sorted(series.items())):
        color = f"C{k}"
        _ranged(ax, pts, color, f"{reader} (measured)", floor=_FLOOR)
        m = models.get(reader) or {}
        if m.get("fitted"):
            grid = np.geomspace(1, max(1024, top), 200)
            coef = np.array(list(m["coef"].values()))
            y = predict(coef, grid, m["bytes_step_rank"], m["b1"], m["bagg"], m["cycle_s"])
            ax.plot(grid, np.maximum(y, _FLOOR), "-", color=color, alpha=0.7,
                    label=f"{reader} model ({m['dominant']})")
    computes = [m["compute_s"] for m in models.values() if m.get("compute_s")]
    if computes:
        ax.axhline(np.median(computes), color="grey", ls=":", label="compute per step")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks P")
    ax.set_ylabel("stall per step, slowest rank (s)")
    ax.set_title("Stall per step against ranks (steady state)")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _curve(ax, pts, color, label, floor=None):
    """A simulated curve, pts: [(P, value, extrapolated)]: solid with filled markers over
    the calibrated range, dashed with open markers past it (joined at the last point
    inside, so the curve stays one line)."""
    pts = sorted(pts)
    P = np.array([p[0] for p in pts], float)
    y = np.array([p[1] for p in pts], float)
    if floor is not None:
        y = np.maximum(y, floor)
    past = np.array([p[2] for p in pts], bool)
    inside = ~past
    if inside.any():
        ax.plot(P[inside], y[inside], "s-", color=color, label=label, ms=4)
        label = None
    if past.any():
        first = max(int(np.argmax(past)) - 1, 0)
        ax.plot(P[first:], y[first:], "--", color=color, label=label)
        ax.plot(P[past], y[past], "s", color=color, mfc="none", ms=4)


def simulated(stall, mib, curves, limit, path):
    """Measured against simulated, per reader: stall per step (max rank) and MiB/s against
    P, log2 x. stall, mib: measured {reader: [(P, median, min, max)]}; curves: {reader:
    (label, [(P, stall_s, mib_s, extrapolated)])}; limit: the storage's MiB/s as given, or
    None (then none is drawn, and the plot says so)."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    readers = sorted(set(curves) | set(stall))
    for k, reader in enumerate(readers):
        color = f"C{k}"
        if stall.get(reader):
            _ranged(ax, stall[reader], color, f"{reader} (measured)", floor=_FLOOR)
        if mib.get(reader):
            _ranged(bx, mib[reader], color, f"{reader} (measured)")
        if reader in curves:
            label, pts = curves[reader]
            _curve(ax, [(p[0], p[1], p[3]) for p in pts], color, label, floor=_FLOOR)
            _curve(bx, [(p[0], p[2], p[3]) for p in pts], color, f"{reader} (simulated)")
    if limit:
        bx.axhline(limit, color="grey", ls=":", label=f"storage limit {limit:,.0f} MiB/s "
                                                      f"(given)")
    else:
        bx.text(0.02, 0.98, "no storage limit drawn: none given (--storage-mibs)",
                transform=bx.transAxes, fontsize=7, va="top", color="grey")
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xlabel("ranks P")
        a.legend(fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("stall per step, slowest rank (s)")
    ax.set_title("Stall per step: measured and simulated (dashed: extrapolated)", fontsize=9)
    bx.set_ylabel("MiB/s, all ranks")
    bx.set_title("Bandwidth: delivered (measured), storage (simulated)", fontsize=9)
    return _save(fig, path)


def breakdown(rows, path):
    """Stacked bars per reader and P: compute and the parts of the step that are not (the
    causes of :mod:`hpcio.explain.verdict`), seconds per step. rows: [{reader, ranks,
    compute_s, reads_s, prep_s, exchange_s, straggler_s, other_s}]."""
    readers = sorted({r["reader"] for r in rows})
    fig, axes = plt.subplots(1, len(readers), figsize=(3.2 * len(readers) + 1, 3.8),
                             squeeze=False, sharey=True)
    parts = (("compute_s", "compute", "C2"), ("reads_s", "storage (reads)", "C3"),
             ("prep_s", "preprocessing", "C1"), ("exchange_s", "exchange", "C0"),
             ("straggler_s", "straggler wait", "C4"), ("other_s", "rest", "C7"))
    for ax, reader in zip(axes[0], readers):
        rs = sorted((r for r in rows if r["reader"] == reader), key=lambda r: r["ranks"])
        x = np.arange(len(rs))
        bottom = np.zeros(len(rs))
        for key, label, color in parts:
            v = np.array([r[key] for r in rs]) * 1000
            ax.bar(x, v, bottom=bottom, color=color, label=label)
            bottom += v
        ax.set_xticks(x, [str(r["ranks"]) for r in rs])
        ax.set_xlabel("ranks P")
        ax.set_title(reader, fontsize=9)
    axes[0][0].set_ylabel("ms per step (mean over ranks)")
    axes[0][-1].legend(fontsize=7)
    return _save(fig, path)


def heatmap(stall, title, path):
    """Rank x step stall (ms) of one run, on a log colour scale: a start-up spike on a
    linear one would leave every other step the same colour. Stalls below the scale's
    floor (1/10,000 of the largest, or 1 us) take the floor's colour."""
    ms = np.asarray(stall, float) * 1000
    top = max(float(ms.max()), 1e-3)
    floor = max(top * 1e-4, 1e-3)
    fig, ax = plt.subplots(figsize=(7, 1.6 + 0.35 * ms.shape[0]))
    im = ax.imshow(np.clip(ms, floor, top), aspect="auto", cmap="magma",
                   interpolation="nearest", norm=LogNorm(vmin=floor, vmax=top))
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    ax.set_yticks(range(ms.shape[0]))
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="stall ms (log)")
    return _save(fig, path)


def bandwidth(series, limit, path):
    """Aggregate MiB/s delivered against P, per reader (series: {reader: [(P, median,
    min, max)]}), with the storage's limit (MiB/s) when one was measured and given; else
    none, and the plot says so."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for k, (reader, pts) in enumerate(sorted(series.items())):
        _ranged(ax, pts, f"C{k}", reader, fmt="o-")
    if limit:
        ax.axhline(limit, color="grey", ls="--",
                   label=f"storage limit {limit:,.0f} MiB/s (given)")
    else:
        ax.text(0.02, 0.98, "no storage limit drawn: none given (--storage-mibs)",
                transform=ax.transAxes, fontsize=7, va="top", color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks P")
    ax.set_ylabel("MiB/s delivered, all ranks (every step)")
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def os_counters(series, path):
    """Faults and context switches per sample against P, per reader.
    series: {"minflt" | "majflt" | "ctx": {reader: [(P, median, min, max)]}} (NaN where
    not recorded)."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
    for ax, key, label in zip(axes, ("minflt", "majflt", "ctx"),
                              ("minor faults", "major faults", "context switches")):
        for k, (reader, pts) in enumerate(sorted(series[key].items())):
            _ranged(ax, pts, f"C{k}", reader, fmt="o-")
        ax.set_title(f"{label} per sample", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks P")
        ax.set_ylabel(f"{label} per sample (count)")
    axes[0].legend(fontsize=7)
    return _save(fig, path)


def dxt_steps(windows, reads, title, path):
    """One run's steps against its DXT reads, per rank: the waits for a batch (red) and
    each read (blue), seconds since the first step. windows/reads: {rank: (starts, ends)}."""
    ranks = sorted(windows)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(ranks)))
    for r in ranks:
        a, b = windows[r]
        ax.broken_barh(np.column_stack([a, b - a]), (r - 0.4, 0.35), color="C3",
                       label="wait for batch" if r == ranks[0] else None)
        a, b = reads.get(r, (np.zeros(0), np.zeros(0)))
        if len(a):
            ax.broken_barh(np.column_stack([a, np.maximum(b - a, 1e-4)]), (r + 0.05, 0.35),
                           color="C0", label="read (DXT)" if r == ranks[0] else None)
    end = max(float(b.max()) for _, b in windows.values())
    ax.set_xlim(-0.05 * end, 1.02 * end)
    ax.set_yticks(ranks)
    ax.set_ylabel("rank")
    ax.set_xlabel("seconds since the first step (reads before it are off the left)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    return _save(fig, path)
