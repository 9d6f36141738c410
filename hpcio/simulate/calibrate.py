"""Calibration and validation: the unknowns of the platform and the readers fitted to what
runs measured, and every fit checked by simulating points back and a held-out rank count.

Fitted: the storage's per-request latency and per-server bandwidth (shared by all readers),
each reader's CPU cost per sample, and the naive reader's read-around window (from the
runs' major faults per sample, replayed through the node cache: no timing needed). The
search is a grid around the platform file's figures, evaluated in one engine run, then on
the storage so fitted, in a second, the node's run-queue quantum and each reader's CPU
split between per sample and per byte fetched (its client's and the kernel's work for the
bytes it reads, which a cache hit does not cost). The objective counts each run's misses in units of the
validation's targets: Table A's stall/step max-rank in 15% of it or 1 ms, whichever is
larger (a stall of 0.1 ms measured against 0.0 simulated is a hit, not an infinite miss),
and AU in 3 points; squared and summed.

Every fit the two grids tried is kept beside the best when its stall misses the reader's
runs by no more than ``tolerance_s`` beyond the best's (the root mean square over the
reader's runs of stall/step max-rank simulated minus measured, in seconds): the
near-equal fits, whose spread a prediction carries (:mod:`.predict`). The runs cannot tell
them apart, so a prediction that differs between them is only as sure as that spread.

What the node measured (``calibrate --costs``: :mod:`.bench`, :mod:`.measured`) is not
searched blind: a measured figure's min, median and max replace its axis (the CPU per MiB,
the latency, the run queue's quantum), so the near-equal fits span only what measurement
leaves open.
"""

import math
import threading
from dataclasses import dataclass, field, fields, replace
from typing import Dict, List

import numpy as np

from ..explain.runs import Run
from ..explain.tables import run_figures
from ..errors import HpcioError
from . import engine
from .engine import Case, simulate
from .platform import barrier_rounds
from .workload import NodeCache

__all__ = ["Fit", "fit_window", "fit_exchange", "fit_barrier", "calibrate", "simulated_figures", "run_cases",
           "errors_of", "TOLERANCE_S", "check_tolerance", "measured_cpu", "cpu_grid",
           "FLOOR_S", "LATENCY_X", "BANDWIDTH_X", "CPU_S", "BYTE_CPU", "SAMPLE_SHARE", "QUANTA", "STALL_TARGET", "AU_TARGET", "miss"]

FLOOR_S = 1e-3
LATENCY_X = (0.25, 0.5, 1.0)          # x the platform file's latency
BANDWIDTH_X = (1.0, 2.0, 4.0)          # x its bandwidth per server
CPU_S = (0.0, 2.5e-4, 5e-4, 1e-3, 2e-3)  # per sample
CLIENTS = (1, 0)                       # a node's client: one request at a time, or any
BYTE_CPU = tuple(v * 1e-3 / 2 ** 20 for v in (0, 1, 2, 4, 8))  # s per byte (ms per MiB)
SAMPLE_SHARE = (0.5, 0.75, 1.0)        # of the CPU per sample, kept beside a cost per byte
QUANTA = (0.0, 1.5e-3, 4e-3, 8e-3)     # the node's run queue: fluid, or bursts of so long
STALL_TARGET, AU_TARGET = 0.15, 3.0   # the validation's targets (stall: or FLOOR_S)
TOLERANCE_S = 1e-3                    # near-equal fits: stall RMS within 1 ms of the best's
MAX_NEAR = 32                         # near-equal fits kept per reader, the closest first
WINDOWS = tuple(int(2 ** (k / 2)) for k in range(32, 44))   # 64 KiB .. 2.8 MiB


@dataclass
class Fit:
    platform: object
    params: Dict[str, dict]                 # reader -> {cpu_s, window}
    residuals: List[dict] = field(default_factory=list)
    # workload name -> (Case, figures): each run as the validation simulated it back
    simulated: Dict[str, tuple] = field(default_factory=dict)
    # reader -> the near-equal fits, the best first: [{"platform", "params", "rms_s"}]
    near: Dict[str, list] = field(default_factory=dict)
    tolerance_s: float = TOLERANCE_S
    # what measurement pinned and what the grids fitted, in words
    sources: Dict[str, list] = field(default_factory=dict)


def simulated_figures(case, out):
    """Table A's figures of a simulated case, by the very function that gives a measured
    run's (tables.run_figures), so the two compare like for like."""
    w, c = case.workload, out["columns"]
    actors = c["wall"].shape[0]
    steps = np.arange(w.steps) % w.steps_per_epoch
    zero = np.zeros_like(c["wall"])
    t0 = np.cumsum(c["wall"], axis=1) - c["wall"]
    cols = {"epoch": np.tile(np.arange(w.steps) // w.steps_per_epoch, (actors, 1)),
            "step": np.tile(steps, (actors, 1)), "t0": t0, "wall": c["wall"],
            "fetch": c["stall"], "prep": zero, "stall_other": zero, "h2d": zero,
            "compute": c["compute"], "straggler_wait": c["straggler"],
            "exchange": c["exchange"], "ckpt": zero,
            "other": c["wall"] - c["stall"] - c["compute"] - c["straggler"] - c["exchange"],
            "records": c["records"], "nbytes": c["nbytes"]}
    run = Run(path=w.name, config={"ranks": actors}, env={}, summary=None,
              rank_info=[None] * actors, steps=cols)
    return run_figures(run)


#: figures of the cases simulated in this process, by what defines a case: a held-out
#: calibration and a prediction's ranges ask again for many a case the calibration ran
_DONE = {}
_DONE_MAX = 50_000
#: cases a thread of this process is simulating now (threads side by side: pool.beside),
#: each with the Event set when it is in _DONE or failed
_RUNNING = {}
_LOCK = threading.Lock()


def _key(case):
    w = case.workload
    return (engine.MAX_ACTORS, engine.AGGREGATE_ABOVE, case.platform, tuple(getattr(w, f.name) for f in fields(w) if f.name != "measured"),
            tuple(sorted(case.params.items())))


def run_cases(cases, label=None):
    """Simulate ``cases`` (each once: one simulated before in this process, or by another
    of its threads now, is not run again, the simulation being deterministic); their
    figures, with how many requests and whether aggregated (``label``: a progress line
    under it while they run)."""
    keys = [_key(c) for c in cases]
    while True:
        with _LOCK:
            todo, others = {}, set()
            for k, c in zip(keys, cases):
                if k in _RUNNING:
                    others.add(_RUNNING[k])
                elif k not in _DONE:
                    todo.setdefault(k, c)
            mine = threading.Event()
            _RUNNING.update((k, mine) for k in todo)
        try:
            outs = simulate(list(todo.values()), label) if todo else []
            figs = [_figures(case, out) for case, out in zip(todo.values(), outs)]
            with _LOCK:
                if len(_DONE) + len(todo) > _DONE_MAX:
                    _DONE.clear()
                _DONE.update(zip(todo, figs))
        finally:
            with _LOCK:
                for k in todo:
                    del _RUNNING[k]
            mine.set()
        for done in others:
            done.wait()
        with _LOCK:     # else one another thread ran failed, or _DONE was cleared: again
            if all(k in _DONE for k in keys):
                return [_DONE[k] for k in keys]


def _figures(case, out):
    f = simulated_figures(case, out)
    f["requests"] = out["requests"]
    f["aggregated"] = out["aggregated"] or out["group"] > 1
    f["group"] = out["group"]
    f["storage_bytes"] = out["bytes"]
    f["storage_bps"] = out["bytes"] / out["end_s"] if out["end_s"] else 0.0
    # the busiest server's share of its bandwidth over the run
    f["server_utilisation"] = float(out["server_bytes"].max()) / out["end_s"] / \
        case.platform.server_bps if out["end_s"] else 0.0
    return f


def _rel(sim, meas):
    return (sim - meas) / max(abs(meas), FLOOR_S)


def miss(sim, meas):
    """A simulated run's miss in units of the targets, squared and summed: stall/step
    max-rank over 15% of the measured or 1 ms, AU points over 3."""
    stall = (sim["stall_max_s"] - meas["stall_max_s"]) / max(
        STALL_TARGET * abs(meas["stall_max_s"]), FLOOR_S)
    return stall ** 2 + ((sim["au_pct"] - meas["au_pct"]) / AU_TARGET) ** 2


def errors_of(sim, meas):
    """The errors a validation prints: stall/step max-rank (s and relative, floor 1 ms),
    AU (points), samples/s (relative)."""
    return {"stall_err_s": sim["stall_max_s"] - meas["stall_max_s"],
            "stall_err_rel": _rel(sim["stall_max_s"], meas["stall_max_s"]),
            "au_err_points": sim["au_pct"] - meas["au_pct"],
            "samples_err_rel": (sim["samples_s"] - meas["samples_s"]) / meas["samples_s"]
            if meas["samples_s"] else float("nan")}


def _faults_per_sample(w, platform, window):
    """Major faults per sample of naive ``w`` replayed through node caches (no timing:
    ranks interleave step by step, as they run abreast)."""
    caches = [NodeCache(platform.cache_bytes, window)
              for _ in range(-(-w.ranks // platform.ranks_per_node))]
    plans = w.plans()
    params = {"window": window}
    states = [{} for _ in range(w.ranks)]
    faults = 0
    for s in range(w.steps):
        for r in range(w.ranks):
            cache = caches[r // platform.ranks_per_node] if platform.cache_bytes else None
            if w.cold and cache is not None:
                cache.enter(s // w.steps_per_epoch)
            faults += len(w.pattern[1](w, platform, params, plans[r][s], cache, states[r])[0])
    return faults / (w.ranks * w.steps * w.batch)


def fit_window(workloads, platform):
    """The read-around window (bytes) whose replay best gives the runs' faults per sample;
    None when no run counted faults."""
    counted = [w for w in workloads if w.faults_per_sample > 0]
    if not counted:
        return None
    err = {win: sum(math.log(_faults_per_sample(w, platform, win) / w.faults_per_sample) ** 2
                    for w in counted) for win in WINDOWS}
    return min(err, key=err.get)


def fit_exchange(workloads, platform):
    """``platform`` with the allreduce bandwidth the runs' exchanges measured (the median
    over runs that had one), so a prediction's exchange costs what this machine's did;
    unchanged when no run exchanged."""
    got = []
    for w in workloads:
        if w.exchange_bytes and w.ranks > 1 and w.exchange_s > 0:
            hops = 2 * (w.ranks - 1) * platform.nic_latency_s
            moved = 2 * (w.ranks - 1) / w.ranks * w.exchange_bytes
            got.append(moved / max(w.exchange_s - hops, 1e-9))
    return replace(platform, exchange_bps=float(np.median(got))) if got else platform


def fit_barrier(workloads, platform):
    """``platform`` with the barrier round the runs measured: the last rank to arrive at a
    step's barrier waits its log2 P rounds (gloo's dissemination), so that wait over the
    rounds, the median over runs; unchanged when no run had a barrier."""
    got = [w.barrier_s / barrier_rounds(w.ranks) for w in workloads
           if w.sync and w.ranks > 1 and w.barrier_s > 0]
    return replace(platform, barrier_round_s=float(np.median(got))) if got else platform


def _best(cases, figs, key, value):
    """Per ``key(case)``, each reader's summed miss per ``value(case)``; the key
    with the smallest total when each reader takes its best value, and that value per
    reader."""
    score = {}
    for case, f in zip(cases, figs):
        r = score.setdefault(key(case), {}).setdefault(case.workload.label, {})
        v = value(case)
        r[v] = r.get(v, 0.0) + miss(f, case.workload.measured)
    best = min(score, key=lambda k: sum(min(v.values()) for v in score[k].values()))
    return best, {r: min(v, key=v.get) for r, v in score[best].items()}


def measured_cpu(workloads):
    """Per reader, the CPU per sample its runs measured (the ranks' process CPU, getrusage
    user + system, per record: the median over its runs), where they did: the floor of its
    CPU per sample, which a cache hit costs too (the step loop's and the decode's work in
    the rank); what the calibration fits is the rest (the file-system client's per MiB,
    work outside the rank's process)."""
    got = {}
    for w in workloads:
        if math.isfinite(w.cpu_s_per_sample):
            got.setdefault(w.label, []).append(w.cpu_s_per_sample)
    return {r: float(np.median(v)) for r, v in got.items()}


def cpu_grid(floor):
    """The CPU per sample values tried: :data:`CPU_S` at or above ``floor``, and
    ``floor`` itself."""
    return sorted({max(c, floor) for c in CPU_S})


def check_tolerance(tolerance_s, unit="s"):
    """``tolerance_s`` as a float, or HpcioError in one line when it keeps no fit
    (``unit``: what the caller gave it in, for the line)."""
    try:
        t = float(tolerance_s)
    except (TypeError, ValueError):
        t = float("nan")
    if not math.isfinite(t) or t < 0:
        raise HpcioError(f"tolerance {tolerance_s!r} {unit} keeps no fit, not even the best: "
                         f"give 0 (the best alone) or more")
    return t


def _near(cases, figs, best, tolerance_s):
    """Per reader, the fits (platform and the reader's costs) whose stall RMS over the
    reader's runs is within ``tolerance_s`` of the best fit's (``best``: reader -> (platform,
    params)); the best first, then by RMS, at most MAX_NEAR."""
    each = {}   # fit -> {run: squared stall miss} (the two grids may share a case)
    for case, f in zip(cases, figs):
        w = case.workload
        key = (w.label, case.platform, tuple(sorted(case.params.items())))
        each.setdefault(key, {})[w.name] = (f["stall_max_s"] - w.measured["stall_max_s"]) ** 2
    sq = {k: sum(v.values()) for k, v in each.items()}
    n = {k: len(v) for k, v in each.items()}
    runs = {}
    for c in cases:
        runs.setdefault(c.workload.label, set()).add(c.workload.name)
    out = {}
    for r, (plat, params) in best.items():
        rms = {k: math.sqrt(sq[k] / n[k]) for k in sq if k[0] == r and n[k] == len(runs[r])}
        top = (r, plat, tuple(sorted(params.items())))
        keep = sorted(((v, k) for k, v in rms.items()
                       if k != top and v <= rms[top] + tolerance_s + 1e-12),
                      key=lambda vk: vk[0])
        out[r] = [{"platform": plat, "params": dict(params), "rms_s": rms[top]}] + [
            {"platform": k[1], "params": dict(k[2]), "rms_s": v}
            for v, k in keep[:MAX_NEAR - 1]]
    return out


def _spread(workloads, r):
    """The min, median and max over reader ``r``'s runs of their measured process CPU per
    sample."""
    v = sorted(w.cpu_s_per_sample for w in workloads
               if w.label == r and math.isfinite(w.cpu_s_per_sample))
    return sorted({v[0], float(np.median(v)), v[-1]})


def _axes(workloads, platform, costs):
    """The grid axes a calibration searches: (latencies, run-queue quanta, {reader: its CPU
    per sample {values, pinned, floor}}, {reader: per-byte values or None}, what was
    measured, what fitted). A measured figure (``costs``: :func:`.measured.pinned`'s pair)
    replaces its axis by its min, median and max. Where the runs measured their process
    CPU, the CPU per MiB is the one outside the rank's process, and then the node's CPU is
    all measured: the CPU per sample is pinned too, to the spread of the runs' process CPU.
    Otherwise that process CPU (and the bench's hot data path) is the floor of a fitted
    CPU per sample."""
    readers, plat = costs or ({}, {})
    floor = measured_cpu(workloads)
    measured, fitted = [], []
    lat, quanta = plat.get("latency_s"), plat.get("cpu_quantum_s")
    if lat:
        measured.append(f"latency {lat[0] * 1e6:.0f}-{lat[-1] * 1e6:.0f} us/request")
    else:
        lat = [platform.latency_s * lx for lx in LATENCY_X]
        fitted.append("latency")
    if quanta:
        measured.append(f"run queue quantum {quanta[0] * 1e3:.2f}-{quanta[-1] * 1e3:.2f} ms")
    else:
        quanta = list(QUANTA)
        fitted.append("run queue quantum")
    fitted += ["server bandwidth", "client requests at once"]
    cpu, per_byte = {}, {}
    for r in sorted({w.label for w in workloads}):
        pin = readers.get(r, {})
        outside = r in floor and "cpu_s_per_byte_outside" in pin
        per_byte[r] = pin.get("cpu_s_per_byte_outside" if outside else "cpu_s_per_byte")
        if outside:
            v = _spread(workloads, r)
            cpu[r] = {"values": v, "pinned": True, "floor": v[0]}
            measured.append(f"{r} CPU per sample {v[0] * 1e6:.0f}-{v[-1] * 1e6:.0f} us (the "
                            f"runs' process CPU)")
        else:
            f = max(floor.get(r, 0.0), pin["cpu_s"][0] if "cpu_s" in pin else 0.0)
            cpu[r] = {"values": cpu_grid(f), "pinned": False, "floor": f}
            fitted.append(f"{r} CPU per sample (>= {f * 1e6:.0f} us)")
        if per_byte[r]:
            b = [v * 1e3 * 2 ** 20 for v in per_byte[r]]
            measured.append(f"{r} CPU {b[0]:.2f}-{b[-1]:.2f} ms/MiB"
                            + (" outside the rank" if outside else ""))
        else:
            fitted.append(f"{r} CPU per MiB")
    return lat, quanta, cpu, per_byte, measured, fitted


def _split(best, cpu, per_byte):
    """Per reader, the (CPU per sample, per byte) pairs of the second grid: every measured
    pair where both are measured; else the first grid's best CPU per sample split with a
    cost per byte (the measured values where measured, the blind grid otherwise)."""
    out = {}
    for r, (c, _) in best.items():
        ax, f = cpu[r], cpu[r]["floor"]
        if ax["pinned"] and per_byte[r]:
            out[r] = sorted({(s, b) for s in ax["values"] for b in per_byte[r]})
        elif per_byte[r]:
            out[r] = sorted({(max(c * k, f), b) for k in SAMPLE_SHARE + (1.25,)
                             for b in per_byte[r]})
        else:
            out[r] = sorted({(max(c * k, f), b) for k in SAMPLE_SHARE for b in BYTE_CPU})
    return out


def calibrate(workloads, platform, tolerance_s=TOLERANCE_S, label=None, costs=None):
    """Fit latency, bandwidth, the node client's requests at once, the node's run queue, each
    reader's CPU per sample and per byte, and the naive window on ``workloads``; a
    :class:`Fit` with the residual of every run, and per reader the fits within
    ``tolerance_s`` (seconds of stall RMS) of the best (``label``: progress lines under it).
    ``costs`` (:func:`.measured.pinned`'s pair): measured figures that replace their grid
    axes (``Fit.sources`` says which were measured and which fitted)."""
    tolerance_s = check_tolerance(tolerance_s)
    if not workloads:
        raise HpcioError("nothing to calibrate on")
    for w in workloads:
        if w.ranks > platform.max_ranks:
            raise HpcioError(f"{w.name}: {w.ranks} ranks, more than the platform's "
                             f"{platform.nodes} nodes x {platform.ranks_per_node} hold")
    kinds = {w.label: w.pattern[0] for w in workloads}
    window = {r: fit_window([w for w in workloads if w.label == r], platform)
              if kinds[r] == "demand" else None for r in kinds}
    platform = fit_barrier(workloads, fit_exchange(workloads, platform))
    lat, quanta, cpu_axis, per_byte, measured, fitted = _axes(workloads, platform, costs)
    mid = {r: (v[len(v) // 2] if v else 0.0) for r, v in per_byte.items()}

    # the storage, each reader with its best CPU per sample (and its measured CPU per byte;
    # the run queue as measured, where it was, so no near-equal fit has one measurement
    # rules out)
    q0 = quanta[len(quanta) // 2] if "cpu_quantum_s" in (costs or ({}, {}))[1] else None
    cases = [Case(platform.with_storage(lt, platform.server_bps * bx, client_threads=ct,
                                        cpu_quantum_s=q0), w,
                  {"cpu_s": cpu, "window": window[w.label], "cpu_s_per_byte": mid[w.label]})
             for lt in lat for bx in BANDWIDTH_X for ct in CLIENTS
             for w in workloads for cpu in cpu_axis[w.label]["values"]]
    first = run_cases(cases, label and f"{label}, storage")
    costs_of = lambda c: (c.params["cpu_s"], c.params["cpu_s_per_byte"])  # noqa: E731
    storage, cpu = _best(cases, first, lambda c: c.platform, costs_of)
    grid, grid_figs = cases, first
    # then the node's run queue on that storage, each reader's CPU split between a cost per
    # sample (paid on a cache hit too) and one per byte the storage sends (its file-system
    # client's and the kernel's work, not paid on a hit): runs whose later steps hit the
    # node's cache tell the two apart, a measured cost per byte pins it
    split = _split(cpu, cpu_axis, per_byte)
    cases = [Case(storage.with_storage(storage.latency_s, storage.server_bps,
                                       cpu_quantum_s=q), w,
                  {"cpu_s": s, "window": window[w.label], "cpu_s_per_byte": b})
             for q in quanta for w in workloads for s, b in split[w.label]]
    figs = run_cases(cases, label and f"{label}, run queue and CPU split")
    fitted_platform, split = _best(cases, figs, lambda c: c.platform, costs_of)
    fit = Fit(fitted_platform, {r: {"cpu_s": split[r][0], "window": window[r],
                                    "cpu_s_per_byte": split[r][1]} for r in cpu})
    fit.sources = {"measured": measured, "fitted": fitted}
    for case, f in zip(cases, figs):
        w = case.workload
        if case.platform == fitted_platform and costs_of(case) == split[w.label]:
            fit.simulated[w.name] = (case, f)
            fit.residuals.append({"run": w.name, "reader": w.case, "ranks": w.ranks,
                                  "measured_stall_s": w.measured["stall_max_s"],
                                  "simulated_stall_s": f["stall_max_s"],
                                  "measured_au_percent": w.measured["au_pct"],
                                  "simulated_au_percent": f["au_pct"],
                                  **errors_of(f, w.measured)})
    best = {r: (fitted_platform, fit.params[r]) for r in cpu}
    fit.near = _near(grid + cases, grid_figs + figs, best, tolerance_s)
    fit.tolerance_s = tolerance_s
    return fit
