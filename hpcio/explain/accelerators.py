"""MLPerf Storage's headline figure: the largest number of simulated accelerators (ranks)
whose AU stays at or above the workload's threshold. What a probed rank count's runs say
(:func:`judge`), the search over the counts (:func:`bracket`, :func:`search`: the one
bisection, for the sweep's measured probes and the simulation's), and whether a search
kept to the rules (:func:`rules`): pure functions, so ``hpcio.sweep`` and
``hpcio.simulate`` run the probes and nothing here launches anything.

The rules, as MLPerf Storage's training rules state them: a warm-up run before the
measured ones, five measured runs per point, every measured run at or above the AU
threshold (its AU: each epoch's first step left out), and the runs agreeing: their
samples/s within 5% of each other (the spread, max - min, over the median). The figure
MLPerf Storage publishes for a point is the arithmetic mean of its measured runs
(``samples_per_s_mean``, ``au_percent_mean``).
"""

import statistics

from ..errors import HpcioError
from ..workloads import load as load_workload

__all__ = ["RUNS", "WARMUP", "AGREE", "threshold", "records_of", "judge", "bracket", "search",
           "rules", "answer_line", "simulated_line"]

RUNS, WARMUP = 5, 1          # measured runs per point, warm-ups before them
AGREE = 0.05                 # the measured runs' samples/s spread, over their median


def threshold(given, spec):
    """(AU threshold in percent, where it comes from): ``given`` (the train options'
    ``--au-threshold``, read by train's parser), else the workload ``spec``'s (their
    ``--workload``)."""
    if given is not None:
        return float(given), "--au-threshold"
    w = load_workload(spec) if spec else None
    if w is None or w.au_threshold is None:
        raise HpcioError("--find-max-accelerators needs an AU threshold: give the train "
                         "options a --workload (e.g. -- --workload unet3d_h100) or "
                         "--au-threshold PERCENT after --", everywhere=True)
    return w.au_threshold, f"workload {w.name}"


def records_of(spec):
    """The full record count of workload ``spec`` (None: no workload), or None."""
    return load_workload(spec).records if spec else None


def judge(runs, percent):
    """What the measured runs of one rank count say: passed (every run finished with AU
    >= the threshold), their AU and samples/s, whether they agree, and a verdict line."""
    done = [r for r in runs if r["status"] == "done" and
            (r.get("figures") or {}).get("au_percent") is not None]
    au = [r["figures"]["au_percent"] for r in done]
    rate = [r["figures"]["samples_per_s"] for r in done]
    out = {"runs": len(runs), "au_percent": au, "samples_per_s": rate}
    if len(done) < len(runs) or not runs:
        out.update(passed=False, agree=None, spread_percent=None,
                   verdict=f"{len(runs) - len(done)} of {len(runs)} runs did not finish: "
                           f"fails")
        return out
    spread = (max(rate) - min(rate)) / statistics.median(rate) if min(rate) > 0 else 0.0
    passed = min(au) >= percent
    out.update(passed=passed, agree=spread <= AGREE, spread_percent=100 * spread,
               au_percent_median=statistics.median(au), au_percent_mean=statistics.mean(au),
               samples_per_s_mean=statistics.mean(rate))
    out["verdict"] = (f"AU {statistics.median(au):.1f}% ({min(au):.1f}-{max(au):.1f}) over "
                      f"{len(au)} run(s) {'>=' if passed else 'not all >='} "
                      f"{percent:.0f}%: {'pass' if passed else 'fails'}; samples/s "
                      f"{statistics.mean(rate):,.1f} (the mean, MLPerf's figure), spread "
                      f"{100 * spread:.1f}%"
                      + ("" if spread <= AGREE else f" (> {100 * AGREE:.0f}%: disagree)"))
    return out


def bracket(candidates, probe, known=None, between=False):
    """(the largest count that passes, the smallest above it that fails), either None,
    assuming a count that fails makes every larger one fail (more ranks ask more of the
    storage). ``probe(n)`` says whether ``n`` passes; ``known`` ({count: passed}) holds
    counts already probed, which are not probed again (every count past a known failure
    fails). Over ``candidates``, the smallest first, then bisection; ``between``: then
    also the counts between the two (a simulation can probe any count, a sweep only those
    it was given)."""
    known = dict(known or {})

    def passes(n):
        if n not in known:
            known[n] = bool(probe(n))
        return known[n]
    failed = min((n for n, ok in known.items() if not ok), default=None)
    c = [n for n in sorted(set(candidates)) if failed is None or n <= failed] or [failed]
    if not passes(c[0]):
        return None, c[0]
    lo, hi = 0, len(c)                # c[lo] passes; c[hi:] fail or are unprobed above
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(c[mid]) else (lo, mid)
    lo, hi = c[lo], (c[hi] if hi < len(c) else None)
    while between and hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo, hi


def search(candidates, probe):
    """The largest of ``candidates`` for which ``probe(n)`` is true (:func:`bracket`); 0
    when the smallest already fails."""
    return bracket(candidates, probe)[0] or 0


def rules(warmup, runs, probes=()):
    """(followed, reasons): where a search left MLPerf Storage's rules."""
    why = []
    if warmup < WARMUP:
        why.append("no warm-up run before the measured ones")
    if runs < RUNS:
        why.append(f"{runs} measured run(s) per point, the rules ask {RUNS}")
    why += [f"the runs at {p['ranks']} ranks disagree: samples/s spread "
            f"{p['spread_percent']:.1f}% > {100 * AGREE:.0f}%"
            for p in probes if p.get("agree") is False]
    return not why, why


def answer_line(search_doc, reader, path):
    """The line that gives the answer, how it was found and whether the rules held."""
    n = search_doc["max_accelerators"]
    probes = {p["ranks"]: p for p in search_doc["probes"]}
    fails = [r for r in sorted(probes) if not probes[r]["passed"]]
    thr = f"AU >= {search_doc['threshold_percent']:.0f}% ({search_doc['threshold_from']})"
    if n == 0:
        first = probes[min(probes)]
        text = (f"hpcio.sweep: 0 accelerators supported with reader {reader}: the smallest "
                f"count, {min(probes)}, already fails {thr}: {first['verdict']}")
    else:
        text = (f"hpcio.sweep: {n} accelerator(s) supported with reader {reader}, {thr}"
                + (f"; {fails[0]} fails: {probes[fails[0]]['verdict']}" if fails else
                   "; the largest count given passes (more may pass)"))
    rules_ = search_doc["rules"]
    return text + ("; MLPerf Storage's rules followed" if rules_["followed"] else
                   f"; rules not followed: {'; '.join(rules_['reasons'])}") + f"; {path}"


def simulated_line(sim):
    """The line for the simulation past the measured counts (``search["simulated"]``)."""
    if sim.get("error"):
        return f"hpcio.sweep: no simulation past the measured counts: {sim['error']}"
    n = sim.get("ranks")
    if sim.get("at_least"):
        what = f"{n} or more"
    elif n is None:
        what = f"none past the measured ones (below at {sim.get('below_at')})"
    else:
        what = str(n)
    return (f"hpcio.sweep: simulated on {sim['platform']} (not measured"
            f"{'' if sim.get('validated') else ', unvalidated'}): {what} accelerator(s) "
            f"supported; {sim['output']}")
