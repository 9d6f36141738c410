"""What ``predict`` computes, apart from its command line: the runs as workloads, the fitted
model (or one from a calibration file), the held-out validation, the template each reader
is predicted from, the simulated points and the accelerators-supported count per reader
(the bisection of :func:`hpcio.explain.accelerators.bracket`, the sweep's own)."""

from dataclasses import replace

from ..errors import HpcioError
from ..explain.accelerators import bracket
from ..explain.runs import expand
from ..measure import probes
from .calibrate import calibrate, errors_of, run_cases
from .engine import Case
from .workload import median_of_repeats, workload_from_run

__all__ = ["workloads", "fit_line", "held_out", "templates", "check_scale", "simulate_points",
           "supported", "dominant", "point"]


def workloads(paths):
    """Every run under ``paths`` (run or sweep directories) as a workload."""
    dirs, problems, _ = expand(paths)
    if problems:
        raise HpcioError(problems[0])
    ws = median_of_repeats([workload_from_run(d) for d, _ in dirs])
    datasets = {w.dataset for w in ws}
    if len(datasets) > 1:
        raise HpcioError(f"runs of different datasets mixed: {' | '.join(sorted(datasets))}")
    return ws


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


def held_out(ws, platform):
    """Calibrate on every rank count but the largest, predict the largest: the validation
    that says what a prediction past the runs is worth. (None with one rank count, the
    largest count)."""
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
            "fit": fit_line(fit), "points": rows}, top


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


def simulate_points(fit, first, ranks, steps, records, validated, threshold, runs=()):
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

    def simulate_at(pairs):
        cases = [case_at(r, n) for r, n in pairs]
        return cases, run_cases(cases)

    pairs = [(r, n) for r in sorted(first) for n in ranks]
    back = {k: fit.simulated[ran[p].name] for k, p in enumerate(pairs)
            if p in ran and ran[p].name in fit.simulated}
    todo = [k for k in range(len(pairs)) if k not in back]
    cases, figs = simulate_at([pairs[k] for k in todo])
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
            "extrapolated": w.ranks > measured_max, "validated": validated}
