"""What ``predict`` computes, apart from its command line: the runs as workloads, the fitted
model (or one from a calibration file), the held-out validation, the template each reader
is predicted from, the simulated points and the accelerators-supported count per reader
(the bisection of :func:`hpcio.explain.accelerators.bracket`, the sweep's own)."""

from dataclasses import replace

import numpy as np

from ..errors import HpcioError
from ..explain.accelerators import bracket
from ..explain.runs import expand
from ..measure import probes
from .calibrate import Fit, FLOOR_S, STALL_TARGET, TOLERANCE_S, calibrate, errors_of, run_cases
from .calibration import load_readers
from .engine import Case
from .pool import beside, together
from .platform import load_platform
from .workload import median_of_repeats, workload_from_run

__all__ = ["workloads", "fit_line", "held_out", "templates", "check_scale", "simulate_points",
           "supported", "dominant", "point", "spread", "WIDE", "check_one_workload",
           "near_line", "fit_from_calibration", "predict_platform", "simulate_all"]

WIDE = 0.25     # a point's stall range wider than +-25% of its best fit's names a run to make


def workloads(paths):
    """Every run under ``paths`` (run or sweep directories) as a workload."""
    dirs, problems, _ = expand(paths)
    if problems:
        raise HpcioError(problems[0])
    each = [workload_from_run(d) for d, _ in dirs]
    check_one_workload(each)
    return median_of_repeats(each)


#: what makes runs one workload, so one calibration fits them: (what, its value of a run)
WORKLOAD = (("dataset", lambda w: w.dataset), ("batch", lambda w: w.batch),
            ("cache", lambda w: "cold" if w.cold else "warm"))


def check_one_workload(ws):
    """HpcioError naming the first run whose workload (:data:`WORKLOAD`) is not the first
    run's: a calibration fits one workload's runs, not a mixture."""
    for w in ws[1:]:
        for what, of in WORKLOAD:
            if of(w) != of(ws[0]):
                raise HpcioError(f"{w.name}: runs of mixed workloads: its {what} is {of(w)}, "
                                 f"{ws[0].name}'s {of(ws[0])} (give runs of one workload)")


def fit_line(fit):
    """The fitted platform and readers' costs, in one line."""
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


def _row(w, f):
    return {"run": w.name, "reader": w.case, "ranks": w.ranks,
            "measured_stall_s": w.measured["stall_max_s"], "simulated_stall_s": f["stall_max_s"],
            "measured_au_percent": w.measured["au_pct"], "simulated_au_percent": f["au_pct"],
            **errors_of(f, w.measured)}


def _ranged(row, figs):
    """``row`` with the range of the near-equal fits' ``figs`` (the best's among them) and
    whether the measurement fell inside it."""
    st = [f["stall_max_s"] for f in figs]
    au = [f["au_pct"] for f in figs]
    lo, hi = min(st), max(st)
    row.update(simulated_stall_lo_s=lo, simulated_stall_hi_s=hi,
               simulated_au_lo_percent=min(au), simulated_au_hi_percent=max(au),
               near_fits=len(figs),
               half_width_rel=(hi - lo) / 2 / max(row["simulated_stall_s"], FLOOR_S),
               inside=bool(lo - 1e-9 <= row["measured_stall_s"] <= hi + 1e-9))
    return row


def near_line(fit):
    """How many fits are near-equal per reader and what their costs span, in one line."""
    parts = []
    for r, near in sorted(fit.near.items()):
        cpu = [n["params"]["cpu_s"] * 1e6 for n in near]
        mib = [n["params"].get("cpu_s_per_byte", 0.0) * 1e3 * 2 ** 20 for n in near]
        parts.append(f"{r}: {len(near)} (CPU {min(cpu):.0f}-{max(cpu):.0f} us/sample, "
                     f"{min(mib):.1f}-{max(mib):.1f} ms/MiB"
                     + (f", stall RMS {near[0]['rms_s'] * 1e3:.2f} ms at best" if "rms_s"
                        in near[0] else "") + ")")
    return (f"near-equal fits (stall/step RMS within {fit.tolerance_s * 1e3:g} ms of the "
            f"best's): " + ("; ".join(parts) or "none kept"))


def held_out(ws, platform, tolerance_s=TOLERANCE_S, label=None, costs=None):
    """Calibrate on every rank count but the largest, predict the largest: the validation
    that says what a prediction past the runs is worth, with the range of the near-equal
    fits and whether each measurement fell inside it. (None with one rank count, the
    largest count)."""
    top = max(w.ranks for w in ws)
    train = [w for w in ws if w.ranks < top]
    if not train or {w.case for w in train} != {w.case for w in ws}:
        return None, top
    fit = calibrate(train, platform, tolerance_s, label and f"{label}, held out", costs)
    held = [w for w in ws if w.ranks == top]
    cases, owner = [], []
    for i, w in enumerate(held):
        for n in fit.near[w.label]:
            cases.append(Case(n["platform"], w, n["params"]))
            owner.append(i)
    figs = run_cases(cases, label and f"{label}, held out's near-equal fits")
    rows = []
    for i, w in enumerate(held):
        mine = [f for f, o in zip(figs, owner) if o == i]
        rows.append(_ranged(_row(w, mine[0]), mine))     # the best fit is the first
    return {"calibrated_on_ranks": sorted({w.ranks for w in train}), "held_out_ranks": top,
            "fit": fit_line(fit), "tolerance_ms": fit.tolerance_s * 1e3, "points": rows}, top


def templates(ws, variants):
    """One template per reader to predict: each measured reader's largest run, and each
    ``--also`` variant ((reader, access, shuffle)) made from its reader's (cursor walks
    need shuffle none)."""
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


#: bytes the simulation holds per record of the dataset: the epoch's sample order (int64)
#: and the permutation it is drawn from
ORDER_BYTES = 16


def check_scale(ws, platform, ranks, records, scale_out):
    """Refuse, in one line, rank counts the platform or the dataset cannot hold, and a
    ``--records`` whose sample order cannot fit in this node's memory (before the
    calibration's minutes, not after them as a MemoryError)."""
    if records is not None:
        avail = probes.mem_available()
        if records < 1:
            raise HpcioError(f"--records {records}: must be at least 1")
        if avail is not None and records * ORDER_BYTES > avail:
            raise HpcioError(f"--records {records:,}: the simulation's sample order needs "
                             f"{records * ORDER_BYTES / 2**30:,.1f} GiB, more than the "
                             f"{avail / 2**30:.1f} GiB of memory available here")
    top = max(ranks)
    if top > platform.max_ranks and not scale_out:
        raise HpcioError(f"{top} ranks are more than {platform.name}'s {platform.nodes} nodes x "
                         f"{platform.ranks_per_node} ranks hold: give a platform with more "
                         f"nodes, or --scale-out to add nodes of the same kind")
    for w in ws:
        if top * w.batch > (records or w.records):
            raise HpcioError(f"{top} ranks x batch {w.batch} need more than the dataset's "
                             f"{records or w.records:,} records: give --records")


def simulate_points(fit, first, ranks, steps, records, validated, threshold, runs=(),
                    label=None):
    """(the points of every template at every count of ``ranks``, {reader: accelerators
    supported at ``threshold`` AU percent}). ``validated``: a held-out check was made
    (it covers the measured readers only). ``runs``: the measured workloads; at a rank
    count a reader ran at, its point is that run simulated back (its own steps and
    records), the very figures of the validation where the calibration made them
    (``fit.simulated``): the prediction and its validation say the same of that point."""
    measured_max = max(w.ranks for w in first.values() if w.measured is not None)
    ran = {(w.case, w.ranks): w for w in runs}

    def case_at(r, n):
        w = ran.get((r, n))
        if w is not None:
            return Case(fit.platform.fit_ranks(n), w, fit.params[w.label])
        return Case(fit.platform.fit_ranks(n), first[r].at(n, steps, records),
                    fit.params[first[r].reader if first[r].measured is None
                               and first[r].reader in fit.params else first[r].label])

    def simulate_at(pairs, label=None):
        cases = [case_at(r, n) for r, n in pairs]
        return cases, run_cases(cases, label)

    pairs = [(r, n) for r in sorted(first) for n in ranks]
    back = {k: fit.simulated[ran[p].name] for k, p in enumerate(pairs)
            if p in ran and ran[p].name in fit.simulated}
    todo = [k for k in range(len(pairs)) if k not in back]
    cases, figs = simulate_at([pairs[k] for k in todo], label)
    done = dict(back)
    done.update(zip(todo, zip(cases, figs)))
    points = [dict(point(r, *done[k], fit.platform, measured_max,
                         validated and first[r].measured is not None),
                   simulated_back=(r, n) in ran)
              for k, (r, n) in enumerate(pairs)]

    def passes(reader, n):
        _, (f,) = simulate_at([(reader, n)])
        return f["au_pct"] >= threshold
    return points, supported(points, passes, threshold, measured_max)


def supported(points, passes, threshold, measured_max):
    """Per reader, MLPerf Storage's headline: the most ranks (accelerators) whose AU stays
    at or above ``threshold``: the points' counts, then those between the last that passes
    and the first that fails, each simulated by ``passes(reader, n)``."""
    out = {}
    for r in sorted({p["reader"] for p in points}):
        mine = [p for p in points if p["reader"] == r]
        known = {p["ranks"]: p["au_percent"] >= threshold for p in mine}
        lo, hi = bracket(known, lambda n: passes(r, n), known=known, between=True)
        out[r] = {"ranks": lo, "threshold_au_percent": threshold,
                  "at_least": lo is not None and hi is None,
                  "below_at": hi if lo is None else None,
                  "validated": all(p["validated"] for p in mine),
                  "extrapolated": lo is not None and lo > measured_max}
    return out


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


def point(reader, case, f, platform, measured_max, validated):
    """One simulated point as prediction.json keeps it."""
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
            # the mechanism of synchronous steps, as the runs' summary.json names it: the
            # barrier's own cost per step, and the client's CPU per sample (its cost per
            # sample, and per byte the storage sent, over the records delivered)
            "barrier_s_per_step": f["barrier_s"] if np.isfinite(f["barrier_s"]) else None,
            "cpu_s_per_sample": case.params.get("cpu_s", 0.0)
            + case.params.get("cpu_s_per_byte", 0.0) * f["storage_bytes"]
            / max(f["records"], 1.0),
            "extrapolated": w.ranks > measured_max, "validated": validated}


def _costs_key(fit, template):
    """The reader whose fitted costs ``template`` is simulated with (a ``--also`` variant
    takes its reader's)."""
    if template.measured is None and template.reader in fit.params:
        return template.reader
    return template.label


def _stall_gap(a, b):
    """How far apart two simulated outcomes are, in the validation's target units (15% of
    their mean stall, or 1 ms)."""
    mean = (a["stall_max_s"] + b["stall_max_s"]) / 2
    return abs(a["stall_max_s"] - b["stall_max_s"]) / max(STALL_TARGET * mean, FLOOR_S)


def _bearers(fit, template, near, probe_ranks, steps, records, label):
    """Of the near-equal fits (the best first), the two whose stall differs most from each
    other at ``probe_ranks`` (twice the largest run: the first count past the runs),
    either may be the best: they bear the range at every point (simulating every
    near-equal fit at every point would multiply a prediction's time by their number)."""
    if len({id(n["platform"]) for n in near}) == 1 or \
            all(n["platform"] == near[0]["platform"] for n in near):
        # one platform (a described one, with a calibration's reader costs): the fits
        # differ in CPU alone, and the more CPU per sample the more stall
        cpu = np.array([n["params"]["cpu_s"] + n["params"].get("cpu_s_per_byte", 0.0)
                        * template.record_bytes for n in near])
        return [near[k] for k in sorted({int(cpu.argmin()), int(cpu.argmax())})]
    w = template.at(probe_ranks, steps, records)
    figs = run_cases([Case(n["platform"].fit_ranks(probe_ranks), w, n["params"])
                      for n in near], label and f"{label}, near-equal fits at P={probe_ranks}")
    st = np.array([f["stall_max_s"] for f in figs])
    return [near[k] for k in sorted({int(st.argmin()), int(st.argmax())})]


def _extra_run(fit, template, ran_counts, bearers, label):
    """The run that would narrow a reader's range most: of the rank counts the runs'
    platform holds and no run made (up to 4x the largest run's), the other cache state and records 4x larger or
    smaller (at the template's ranks), the one whose simulated stall differs most between
    the fits bearing the range; (what to run, the two stalls) or None."""
    if len(bearers) < 2:
        return None
    n, counts = 1, []
    while n <= min(fit.platform.max_ranks, 4 * max(ran_counts | {template.ranks})):
        if n not in ran_counts and n * template.batch <= template.records:
            counts.append(n)
        n *= 2
    variants = [(f"{n} ranks", template.at(n)) for n in counts]
    cache = "warm" if template.cold else "cold"
    variants.append((f"{template.ranks} ranks, cache {cache}",
                     replace(template.at(template.ranks), cold=not template.cold)))
    for k, words in ((4, "4x larger"), (0.25, "4x smaller")):
        variants.append((f"{template.ranks} ranks, records {words} "
                         f"({template.record_bytes * k / 1024:,.0f} KiB)",
                         replace(template.at(template.ranks),
                                 record_bytes=template.record_bytes * k)))
    cases = [Case(b["platform"].fit_ranks(w.ranks), w, b["params"])
             for _, w in variants for b in bearers]
    figs = run_cases(cases, label and f"{label}, runs that would narrow the range")
    gaps = [_stall_gap(figs[2 * i], figs[2 * i + 1]) for i in range(len(variants))]
    i = int(np.argmax(gaps))
    a, b = sorted((figs[2 * i]["stall_max_s"], figs[2 * i + 1]["stall_max_s"]))
    return {"run": variants[i][0], "stall_s_lo": a, "stall_s_hi": b,
            "gap_targets": gaps[i]}


def _range_fits(fit, template, steps, records, measured_max, label=None):
    """(the near-equal fits of ``template``'s reader, the two bearing its range, those of
    them that are not the best)."""
    near = fit.near.get(_costs_key(fit, template)) or []
    probe = 2 * measured_max
    if probe * template.batch > (records or template.records):
        probe = measured_max
    extremes = _bearers(fit, template, near, probe, steps, records, label) \
        if len(near) > 1 else []
    return near, extremes, [b for b in extremes if b is not near[0]]


def simulate_all(fit, first, ranks, steps, records, runs=(), label=None):
    """Every case :func:`simulate_points` and :func:`spread` will ask for at ``ranks`` (each
    reader's best fit and the fits bearing its range), in one go: the best fits' cases
    start beside the runs that choose the fits bearing the ranges, then the bearers'
    join them, the engines sharing the cores (what they ask for later is then found done:
    :func:`~.calibrate.run_cases` runs a case once per process)."""
    ran = {(w.case, w.ranks): w for w in runs}
    measured_max = max(w.ranks for w in first.values() if w.measured is not None)

    def cases_of(r, fits):
        return [Case(b["platform"].fit_ranks(n), ran.get((r, n)) or first[r].at(n, steps,
                                                                               records),
                     b["params"]) for b in fits for n in ranks]
    best = [c for r, t in sorted(first.items())
            for c in cases_of(r, [{"platform": fit.platform,
                                   "params": fit.params[_costs_key(fit, t)]}])]
    with beside(run_cases, best, label and f"{label}, best fits"):
        fits = together((_range_fits, (fit, t, steps, records, measured_max, label))
                        for _, t in sorted(first.items()))
        cases = [c for (r, _), (_, _, bearers) in zip(sorted(first.items()), fits)
                 for c in cases_of(r, bearers)]
        run_cases(cases, label and f"{label}, fits bearing the ranges")


def spread(fit, first, ranks, steps, records, points, supported_, threshold, runs=(),
           label=None):
    """Each point with the range of the near-equal fits (``fit.near``): its stall, AU and
    samples/s as the best fit and the two fits that disagree most simulate it
    (``*_lo``/``*_hi``, ``half_width_rel`` of the stall), the accelerators supported as
    each of them counts them, and per reader whose range is wider than +-WIDE at some
    point, the run that would narrow it most (``{reader: {...}}``, returned; only for
    a fit calibrated here, on the platform the runs were made on)."""
    ran = {(w.case, w.ranks): w for w in runs}
    measured_max = max(w.ranks for w in first.values() if w.measured is not None)
    by = {}
    for p in points:
        by.setdefault(p["reader"], []).append(p)
    extra = {}
    for r, template in sorted(first.items()):
        near, extremes, bearers = _range_fits(fit, template, steps, records, measured_max,
                                              label)

        def case(b, n):
            w = ran.get((r, n)) or template.at(n, steps, records)
            return Case(b["platform"].fit_ranks(n), w, b["params"])
        mine = by.get(r, [])
        figs = run_cases([case(b, p["ranks"]) for b in bearers for p in mine],
                         label and f"{label}, {r}'s range") if bearers else []
        k = len(mine)
        for i, p in enumerate(mine):
            alt = [figs[j * k + i] for j in range(len(bearers))]
            st = [p["stall_s_per_step"]] + [f["stall_max_s"] for f in alt]
            au = [p["au_percent"]] + [f["au_pct"] for f in alt]
            sp = [p["samples_per_s"]] + [f["samples_s"] for f in alt]
            p.update(stall_s_lo=min(st), stall_s_hi=max(st), au_percent_lo=min(au),
                     au_percent_hi=max(au), samples_per_s_lo=min(sp),
                     samples_per_s_hi=max(sp), near_fits=len(near),
                     half_width_rel=(max(st) - min(st)) / 2
                     / max(p["stall_s_per_step"], FLOOR_S))
        counts = [supported_[r]["ranks"]]
        for j, b in enumerate(bearers):
            bp = [dict(p, au_percent=figs[j * k + i]["au_pct"]) for i, p in enumerate(mine)]

            def passes(_, n, b=b):
                (f,) = run_cases([case(b, n)])
                return f["au_pct"] >= threshold
            counts.append(supported(bp, passes, threshold, measured_max)[r]["ranks"])
        known = [c for c in counts if c is not None]
        supported_[r].update(ranks_lo=None if None in counts else min(known),
                             ranks_hi=max(known) if known else None)
        if fit.residuals and any(p["half_width_rel"] > WIDE for p in mine):
            extra[r] = _extra_run(fit, template, {n for (c, n) in ran if c == r}, extremes,
                                  label)
    return extra


def fit_from_calibration(platform, path):
    """(a :class:`~.calibrate.Fit` of ``platform`` as described, its storage not fitted, with
    each reader's costs from calibration file ``path`` (``calibrate -o``) and the
    near-equal fits' costs beside them, the run directories it was calibrated on)."""
    params, where = load_readers(path)
    fit = Fit(platform, {r: v["best"] for r, v in params.items()},
              near={r: [{"platform": platform, "params": c} for c in v["near"]]
                    for r, v in params.items()})
    return fit, where


def predict_platform(platform, calibration, runs, ranks, steps=None, records=None,
                     threshold=90.0, scale_out=True, also=(), label=None):
    """A described platform predicted in one call, as ``predict --reader-costs`` does:
    ``platform`` (a YAML path or a :class:`~.platform.Platform`), ``calibration`` (a
    ``calibrate -o`` file), ``runs`` (run or sweep directories: the workload's templates),
    ``ranks`` (the counts to predict). Returns {"fit": its line, "points": [one dict per
    reader and count, as prediction.json's, with the near-equal fits' range],
    "accelerators_supported": {reader: {"ranks", "ranks_lo", "ranks_hi", ...}},
    "narrowing_runs": {}} (nothing validated: the storage is described, not measured)."""
    if isinstance(platform, str):
        platform = load_platform(platform)
    ws = workloads(runs)
    check_scale(ws, platform, ranks, records, scale_out)
    first = templates(ws, list(also))
    fit, _ = fit_from_calibration(platform, calibration)
    missing = sorted({_costs_key(fit, w) for w in first.values()} - set(fit.params))
    if missing:
        raise HpcioError(f"{calibration}: no fitted costs for {', '.join(missing)}")
    simulate_all(fit, first, sorted(ranks), steps, records, ws, label)
    points, sup = simulate_points(fit, first, sorted(ranks), steps, records, False, threshold,
                                  ws, label)
    extra = spread(fit, first, sorted(ranks), steps, records, points, sup, threshold, ws,
                   label)
    return {"fit": fit_line(fit), "points": points, "accelerators_supported": sup,
            "narrowing_runs": extra}
