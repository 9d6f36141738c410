"""The analysis of a set of runs, end to end, and the report it writes.

:func:`analyse` joins the runs' own figures (Table A, C) with what Darshan saw (Table B),
decides per run what the accelerator waits for (:mod:`hpcio.explain.verdict`'s table of
causes), applies the rules (:mod:`hpcio.explain.findings`) and compares, for every rank
count where the baseline reader ran beside another, which of them stalls more and why
(:mod:`hpcio.explain.verdict`: medians and ranges over repeats). :func:`write` renders
that into ``report.md``, a self-contained ``report.html`` (figures inline), one CSV per
table, the PNGs and ``summary.json``, all inside the report directory.

One forecast per reader: given a prediction of ``hpcio.simulate``
(:mod:`hpcio.explain.prediction`), the scaling part is its simulated curve, with what its
validation says of it, beside the measured points; without one, the scaling fit of
:mod:`hpcio.explain.model` (labelled a fit, and checked by leaving a rank count out).
Every measured value quoted is one statistic, :func:`hpcio.explain.tables.measured`.
"""

import base64
import csv
import html
import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..errors import HpcioError
from ..fsutil import jsonable
from . import figures as fig
from .checkpoints import CKPT_RULES, ckpt_figures, ckpt_findings, ckpt_table, from_training
from .drishti import LEVELS, DrishtiMissing, verdicts
from .findings import COVERAGE, RULES, findings
from .model import scaling
from .prediction import headline, prediction_table, short_validation, validation_text
from .tables import (MEASURED, Table, dataset_reads, dxt_shifts, measured, run_figures,
                     table_a, table_b, table_c)
from .verdict import (CAUSE_PCT, CAUSES, Verdict, cause, cause_text, compare, heading,
                      shares, spread)

__all__ = ["Analysis", "analyse", "write", "FORMATS"]

FORMATS = ("html", "md", "json")
_PRED_PNG = "prediction.png"  # drawn with its own part of the report, not at the end


@dataclass
class Analysis:
    runs: list
    figures: Dict[str, dict]
    tables: list
    models: Dict[str, dict]
    findings: list
    comparisons: List[tuple]   # [(heading, [comparison])]: the readers' stall compared
    problems: List[str]
    notes: List[str]
    baseline: str
    scaled: list = field(default_factory=list)   # the runs in the scaling part
    drishti: List[dict] = field(default_factory=list)   # Drishti's verdicts, one per row
    drishti_said: List[str] = field(default_factory=list)  # why Drishti is missing a log
    drishti_version: Optional[str] = None
    storage_mibs: Optional[float] = None          # measured and given, or None
    prediction: Optional[object] = None           # prediction.Prediction, or None
    causes: Optional[Table] = None                # what each run's accelerator waits for
    checkpoints: Optional[Table] = None           # the runs' checkpoints, if any
    ckpt_runs: list = field(default_factory=list)  # checkpoint runs (their logs for Drishti)

    @property
    def answers(self):
        return [c["text"] for _, cs in self.comparisons for c in cs]


def _storage(run):
    """Where the run read from: the file-system type and the data path."""
    return f"{(run.env.get('data') or {}).get('fs_type', '?')}:{run.data_path}"


def _series(run):
    return (run.dataset, _storage(run))


def _mixed(runs, allow_mixed, problems):
    """The runs that go into the scaling part: all with --allow-mixed (each dataset and
    storage its own series), else those of the first run's dataset and storage."""
    if allow_mixed or not runs:
        return list(runs)
    first = _series(runs[0])
    keep = [r for r in runs if _series(r) == first]
    for r in runs:
        if _series(r) != first:
            problems.append(f"{r.path}: data {r.dataset} on {_storage(r)} differs from "
                            f"{first[0]} on {first[1]} of {runs[0].name}; left out of the "
                            f"scaling tables (--allow-mixed keeps every dataset, each its own)")
    return keep


def _limits(runs, figures, storage_mibs):
    """(B1, Bagg) in B/s for the runs' storage: the given aggregate limit (B1: the most one
    rank alone delivered, at most that), else the most any run delivered (Bagg) and the
    most one rank alone delivered (B1): lower bounds."""
    fs = [(r, figures[r.path]) for r in runs if figures.get(r.path)]
    agg = max((f["mib_s"] for _, f in fs), default=0.0)
    one = max((f["mib_s"] for r, f in fs if r.ranks == 1), default=0.0)
    bagg = (storage_mibs or agg or 1.0) * 2 ** 20
    b1 = min(one * 2 ** 20, bagg) or bagg
    return b1, bagg


def _models(scaled, figures, storage_mibs):
    """The scaling model per (reader, dataset, storage), with the limits of that storage
    from every reader's runs on it (without the largest P for the check)."""
    models, groups = {}, {}
    for r in scaled:
        if figures.get(r.path):
            groups.setdefault((r.reader, r.dataset, _storage(r)), []).append(r)
    multi = len({k[1:] for k in groups}) > 1
    for (reader, ds, st), rs in sorted(groups.items()):
        fs = [figures[r.path] for r in rs]
        on = [r for r in scaled if _storage(r) == st]
        top = max(r.ranks for r in rs)
        limits = _limits(on, figures, storage_mibs)
        x = float(np.mean([f["bytes_step_rank"] for f in fs]))
        compute = measured([f["compute_s"] for f in fs])
        rest = measured([f["rest_s"] for f in fs])
        m = scaling([(r.ranks, f["stall_max_s"]) for r, f in zip(rs, fs)], x, limits,
                    _limits([r for r in on if r.ranks < top], figures, storage_mibs),
                    compute, rest, bounded=bool(storage_mibs))
        at_top = [f for r, f in zip(rs, fs) if r.ranks == top]
        m.update(own_wait_s=measured([f["stall_mean_s"] for f in at_top]),
                 straggler_s=measured([f["straggler_s"] for f in at_top]))
        m.update(reader=reader, dataset=ds, storage=st, b1=limits[0], bagg=limits[1],
                 limits="given (--storage-mibs)" if storage_mibs else
                 "the most these runs delivered: lower bounds, not the storage's measured "
                 "limits (--storage-mibs)",
                 bytes_step_rank=x, compute_s=compute,
                 cycle_s=(compute + rest) if storage_mibs else None)
        models[f"{reader} | {ds} | {st}" if multi else reader] = m
    return models


def _fmt(x, spec="{:.1f}"):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return spec.format(x)


def _dxt_text(reader, d):
    if not d.get("dxt_io_s"):
        return ""
    return (f" DXT: of {reader}'s {d['dxt_io_s']:.3f} s of reads during the steps, "
            f"{d['dxt_exposed_first_s']:.3f} s were inside the wait of an epoch's first step "
            f"(pipeline start-up, outside AU), {d['dxt_exposed_s']:.3f} s inside later steps' "
            f"waits and {d['dxt_overlapped_s']:.3f} s overlapped compute.")


def _details(worse, better, fw, fbt):
    """Why one of two runs stalls more in steady state, in numbers from hpcio (stall, fetch,
    AU, faults) and from Darshan (coverage, requests, DXT)."""
    dw, dbt, ow = fw.get("darshan") or {}, fbt.get("darshan") or {}, fw.get("os") or {}
    text = (f"In steady state {worse.reader} waited {1000 * fw['stall_max_s']:.1f} ms per step "
            f"on the slowest rank (stall {fw['stall_pct_steady']:.1f}%, fetch "
            f"{fw['fetch_pct_steady']:.1f}%, AU {fw['au_pct']:.1f}% by MLPerf Storage's rule; "
            f"{worse.name}) against {1000 * fbt['stall_max_s']:.1f} ms for {better.reader} "
            f"(AU {fbt['au_pct']:.1f}%; {better.name}).")
    cov = dw.get("coverage", float("nan"))
    if cov < COVERAGE:  # the coverage finding's threshold
        text += (f" Darshan saw {100 * cov:.1f}% of the {fw['delivered_bytes'] / 2 ** 20:,.1f}"
                 f" MiB {worse.reader} delivered ({dw.get('posix_bytes_rank', 0):,.0f} B per "
                 f"rank in POSIX, the manifest, index and meta pages): its record reads are "
                 f"page faults on a memory map, taken one at a time inside the reader's call "
                 f"while the step waits; the OS counted {_fmt(ow.get('majflt'), '{:,.2f}')} "
                 f"major and {_fmt(ow.get('minflt'), '{:,.1f}')} minor faults per sample.")
    elif dw:
        text += (f" Darshan saw {worse.reader} read {_fmt(dw.get('reads'), '{:,.0f}')} times "
                 f"(mean {_fmt(dw.get('mean_request'), '{:,.0f}')} B, small share "
                 f"{_fmt(dw.get('small_share'), '{:.2f}')}, random share "
                 f"{_fmt(dw.get('random_share'), '{:.2f}')}), coverage {_fmt(cov, '{:.2f}')}.")
    text += _dxt_text(worse.reader, dw)
    if dbt:
        mp = dbt.get("mpiio_bytes_rank")
        text += (f" {better.reader}: Darshan saw {_fmt(dbt.get('reads'), '{:,.0f}')} POSIX "
                 f"reads of mean {_fmt(dbt.get('mean_request'), '{:,.0f}')} B"
                 + (f" under {dbt.get('mpiio_reads_rank', 0) * better.ranks:,.0f} MPI-IO "
                    f"reads ({dbt.get('mpiio_coll_reads', 0):,.0f} collective, "
                    f"{dbt.get('mpiio_indep_reads', 0):,.0f} independent; {mp:,.0f} B per "
                    f"rank)" if mp else "")
                 + f", coverage {_fmt(dbt.get('coverage'), '{:.2f}')}."
                 + _dxt_text(better.reader, dbt))
    return text


def _typical(rs, figures, key):
    """The repeat whose figure is nearest the repeats' measured value (the median): the one
    details are told of."""
    med = measured([figures[r.path][key] for r in rs])
    return min(rs, key=lambda r: abs(figures[r.path][key] - med))


def _waits_for(a, ra, b, rb, figures):
    """What each reader's accelerator waits for (the cause rule, per repeat), so that a
    comparison of stalls is read against what holds the step back."""
    def one(reader, rs):
        names = [cause(figures[r.path]) for r in rs]
        t = _typical(rs, figures, "stall_pct_steady")
        said = cause_text(figures[t.path])
        if len(set(names)) > 1:
            said += f" ({t.name}; its repeats: {', '.join(names)})"
        return f"{reader}: {said}"
    return (f"What the accelerator waits for (steady state; a part of the step from "
            f"{CAUSE_PCT:g}%): {one(a, ra)}. {one(b, rb)}.")


def _comparison(ra, rb, figures):
    """Two readers' repeats at one rank count compared: stall over every step and in steady
    state, each a verdict from medians and ranges, and the numbers behind them."""
    a, b, P = ra[0].reader, rb[0].reader, ra[0].ranks
    vals = lambda rs, k: [figures[r.path][k] for r in rs]
    every = compare(a, vals(ra, "stall_pct"), b, vals(rb, "stall_pct"))
    steady = compare(a, vals(ra, "stall_pct_steady"), b, vals(rb, "stall_pct_steady"))
    names = lambda rs: ", ".join(r.name for r in rs)
    text = (f"**{a} vs {b} at {P} rank(s)** ({names(ra)}; {names(rb)}): over every step (the "
            f"definition of the runs' summary.json and console), {every.text}. In steady "
            f"state (each epoch's first step left out), {steady.text}.")
    if every.more != steady.more:
        wa, wb = (float(np.median(vals(rs, "first_wait_s"))) for rs in (ra, rb))
        text += (f" The epochs' first steps make the difference: the first batch waited up "
                 f"to {wa:.3f} s for {a} and {wb:.3f} s for {b}.")
    worse, better = (ra, rb) if steady.more in (None, a) else (rb, ra)
    w, bt = (_typical(rs, figures, "stall_pct_steady") for rs in (worse, better))
    text += " " + _waits_for(a, ra, b, rb, figures)
    text += " " + _details(w, bt, figures[w.path], figures[bt.path])
    return {"readers": [a, b], "ranks": P, "every_step": asdict(every),
            "steady": asdict(steady), "text": text}


def _comparisons(runs, figures, baseline):
    """[(heading, [comparison])] for every other reader that ran beside the baseline at
    the same rank count on the same data; the heading is one that every verdict under it
    bears out."""
    by = {}
    for r in runs:
        if figures.get(r.path):
            by.setdefault((_series(r), r.ranks), {}).setdefault(r.reader, []).append(r)
    pairs = {}
    for _, readers in sorted(by.items()):
        for ka, ra in readers.items():
            for kb, rb in readers.items():
                if ra[0].config.get("reader") == baseline != rb[0].config.get("reader"):
                    pairs.setdefault((ka, kb), []).append(_comparison(ra, rb, figures))
    return [(heading([Verdict(**v[k]) for v in cs for k in ("every_step", "steady")], a, b),
             cs) for (a, b), cs in sorted(pairs.items())]


def analyse(runs, problems=(), notes=(), baseline="naive", allow_mixed=False,
            storage_mibs=None, drishti=False, prediction=None, checkpoints=()):
    """Everything the report says about ``runs`` (see the module docstring); ``prediction``:
    a :class:`hpcio.explain.prediction.Prediction` to set beside them, or None;
    ``drishti``: run Drishti on every log (False: the report says it was not asked);
    ``checkpoints``: checkpoint runs (:class:`hpcio.explain.checkpoints.CkptRun`), whose
    figures and findings join those of the training runs that checkpoint a layout."""
    ckpts = list(checkpoints) + [c for c in map(from_training, runs) if c is not None]
    problems = list(problems) + [p for r in runs for p in r.problems] + \
        [p for c in checkpoints for p in c.problems] + (prediction.gaps if prediction else [])
    notes = list(notes) + [f"{r.name}: {n}" for r in runs for n in r.notes] + \
        [f"{c.name}: {n}" for c in checkpoints for n in c.notes]
    figures = {r.path: run_figures(r) for r in runs}
    scaled = _mixed(runs, allow_mixed, problems)
    tables = [table_a(scaled, figures), table_b(runs, figures), table_c(runs, figures)]
    # one forecast: the simulation's when given, else the scaling fit
    models = {} if prediction else _models(scaled, figures, storage_mibs)
    a = Analysis(runs, figures, tables, models, findings(runs, figures),
                 _comparisons(runs, figures, baseline), problems, notes, baseline, scaled,
                 storage_mibs=storage_mibs, prediction=prediction,
                 causes=table_causes(runs, figures))
    if ckpts:
        cf = [ckpt_figures(c) for c in ckpts]
        a.checkpoints = ckpt_table(cf)
        a.findings += ckpt_findings(cf)
        a.ckpt_runs = list(checkpoints)
    if drishti:
        _drishti(a)
    else:
        a.drishti_said.append("Drishti not run (--no-drishti).")
    return a


def table_causes(runs, figures):
    """Per run: the step split into its parts (steady state) and the cause the rule of
    :mod:`hpcio.explain.verdict` names."""
    rows = []
    for r in runs:
        f = figures.get(r.path)
        if not f:
            continue
        rows.append({"run": r.name, "reader": r.reader, "ranks": r.ranks,
                     "au_pct": f["au_pct"], "compute_pct_steady": f["compute_pct_steady"],
                     **{f"{k}_pct": v for k, v in shares(f).items()},
                     "cause": cause(f), "why": cause_text(f)})
    cols = ([("run", "run", "{}"), ("reader", "reader", "{}"), ("ranks", "P", "{}"),
             ("au_pct", "AU % MLPerf rule", "{:.1f}"),
             ("compute_pct_steady", "compute %", "{:.1f}")]
            + [(f"{c.name}_pct", f"{c.name} %", "{:.1f}") for c in CAUSES]
            + [("cause", "waits for", "{}")])
    return Table("table-causes", "What the accelerator waits for, per run", cols, rows,
                 f"Shares of the step over the steady steps (each epoch's first left out, "
                 f"as AU), each rank's share of its wall, the mean over ranks; they add up "
                 f"to 100. storage: the rank's own wait for its batch outside preprocessing (the reader's call and the "
                 f"hand-over); preprocessing: the part of that wait in preprocessing; "
                 f"exchange: the gradient allreduce itself; straggler: the wait at the "
                 f"per-step barrier for slower ranks; rest: host-to-device copy, "
                 f"checkpoints and bookkeeping. A part from {CAUSE_PCT:g}% of the step is a "
                 f"cause (alone it keeps AU under MLPerf Storage's pass mark); a run waits "
                 f"for its largest cause, none when no part reaches {CAUSE_PCT:g}% (the "
                 f"accelerator is busy).", empty="No run with step records.")


def _drishti(a):
    """Drishti's verdicts on every run's logs, the most severe first within a log; a log
    it fails on is one line, and without drishti-io one line says so; checkpoint runs'
    logs too."""
    for r in list(a.runs) + a.ckpt_runs:
        for log in r.logs:
            try:
                a.drishti_version, rows = verdicts(log.path)
            except DrishtiMissing as e:
                a.drishti_said.append(str(e))
                return
            except HpcioError as e:
                a.drishti_said.append(str(e))
                continue
            where = r.name if len(r.logs) == 1 else f"{r.name}: {os.path.basename(log.path)}"
            rows.sort(key=lambda v: LEVELS.index(v["level"]) if v["level"] in LEVELS
                      else len(LEVELS))
            a.drishti += [dict(run=where, log=log.path, **v) for v in rows]


# --- figures ---------------------------------------------------------------------------


def _points(a, get):
    """{reader: [(P, median, min, max)]} of one figure over each point's repeats."""
    by = {}
    for r in a.scaled:
        f = a.figures.get(r.path)
        if f:
            by.setdefault(r.reader, {}).setdefault(r.ranks, []).append(get(f))
    return {rd: [(P, *spread(v)) for P, v in sorted(ps.items())] for rd, ps in by.items()}


def _simulated_figure(a, out):
    """The prediction's curves over the measured points: (file name, caption)."""
    pred = a.prediction
    curves = {rd: (f"{rd} simulated ({short_validation(pred, rd)})",
                   [(p["ranks"], p["stall_s_per_step"], p["storage_mib_per_s"],
                     p["extrapolated"]) for p in pred.points if p["reader"] == rd])
              for rd in pred.readers}
    path = fig.simulated(_points(a, lambda f: f["stall_max_s"]),
                         _points(a, lambda f: f["mib_s"]), curves, a.storage_mibs,
                         os.path.join(out, _PRED_PNG))
    return path, (f"Measured (points: {MEASURED}, and their range) and simulated (lines, "
                  "hpcio.simulate; dashed past the calibrated rank counts) against ranks: "
                  "stall per step on the slowest rank (left; a stall of 0 drawn at 10 us), "
                  "MiB/s (right: delivered by the runs, read from storage in the "
                  "simulation); "
                  + (f"the dotted line: the storage's limit as given, {a.storage_mibs:,.0f} "
                     f"MiB/s (--storage-mibs)" if a.storage_mibs else
                     "no storage limit drawn: none was given (--storage-mibs)"))


def _fit_caption(models, predicted):
    """What the stall figure's lines are: the fits drawn, and why any is missing (with a
    prediction: none, the simulation is the forecast)."""
    fitted = sorted(m["reader"] for m in models.values() if m.get("fitted"))
    missing = {m["reader"]: m["why"] for m in models.values() if not m.get("fitted")}
    text = ("Stall per step (slowest rank, steady state) against ranks: points, "
            f"{MEASURED}, and their range")
    if predicted:
        return text + ("; no fit drawn: the simulation is this report's forecast "
                       "(prediction.png)")
    if fitted:
        text += (f"; lines: the scaling fit for {', '.join(fitted)} (least squares over the "
                 f"measured points, extrapolated: a fit, not a simulation)")
    if missing:
        text += "; no fit for " + "; ".join(f"{r} ({w})" for r, w in sorted(missing.items()))
    return text


def _most_stalled(runs, figures):
    """The run with the largest steady-state stall share (stall % of the step, the figure
    the verdicts compare), the larger rank count on a tie; None without runs."""
    return max(runs, key=lambda r: (figures[r.path]["stall_pct_steady"], r.ranks),
               default=None)


def _draw(a, out):
    """The PNGs: [(file name, caption)]."""
    made = []
    rows = a.tables[0].rows
    if rows:
        key = lambda r: f"{r['reader']}" if len({x['dataset'] for x in rows}) == 1 \
            else f"{r['reader']} {r['dataset']}"
        series = _points(a, lambda f: f["stall_max_s"])
        if len({p[0] for pts in series.values() for p in pts}) > 1:
            models = {m["reader"]: m for m in a.models.values()}
            made.append((fig.stall_vs_ranks(series, models,
                                            os.path.join(out, "stall-vs-ranks.png")),
                         _fit_caption(a.models, a.prediction is not None)))
            bw = _points(a, lambda f: f["mib_s"])
            made.append((fig.bandwidth(bw, a.storage_mibs, os.path.join(out, "bandwidth.png")),
                         f"Aggregate MiB/s delivered (every step) against ranks: {MEASURED}"
                         f" and their range; "
                         + (f"the line: the storage's limit as given, {a.storage_mibs:,.0f} "
                            f"MiB/s (--storage-mibs)" if a.storage_mibs else
                            "no storage limit drawn: none was given (--storage-mibs MIB_S, "
                            "the storage's measured bandwidth)")))
            osc = {k: _points(a, lambda f, k=k: (f.get("os") or {}).get(k, np.nan))
                   for k in ("minflt", "majflt")}
            osc["ctx"] = _points(a, lambda f: (f.get("os") or {}).get("nvcsw", np.nan)
                                 + (f.get("os") or {}).get("nivcsw", np.nan))
            made.append((fig.os_counters(osc, os.path.join(out, "os-counters.png")),
                         f"Page faults and context switches per sample delivered against "
                         f"ranks (all ranks, all epochs): {MEASURED} and their range"))
        made.append((fig.breakdown(
            [{"reader": key(r), "ranks": r["ranks"], "compute_s": r["compute_s"],
              "reads_s": r["fetch_s"] + r["stall_other_s"], "prep_s": r["prep_s"],
              "exchange_s": r["exchange_s"], "straggler_s": r["straggler_s"],
              "other_s": r["other_s"]}
             for r in rows],
            os.path.join(out, "breakdown.png")),
            f"Seconds per step by P (steady state, mean over ranks; {MEASURED}): "
            f"compute, and the parts of the table of causes: storage (the own wait outside "
            f"preprocessing), preprocessing, exchange, straggler wait, rest"))
    worst = _most_stalled([r for r in a.runs if a.figures.get(r.path)], a.figures)
    if worst is not None:
        s = worst.steps
        stall = s["fetch"] + s["prep"] + s["stall_other"]
        made.append((fig.heatmap(stall, f"own wait per rank and step: {worst.name}",
                                 os.path.join(out, "heatmap.png")),
                     f"Rank x step own wait for the batch (every step) of {worst.name}, the "
                     f"run with the largest steady-state stall: "
                     f"{a.figures[worst.path]['stall_pct_steady']:.1f}% of the step; log "
                     f"colour scale"))
    if a.prediction:
        made.append(_simulated_figure(a, out))
    traced = [r for r in a.runs if r.logs and len(r.logs[0].dxt) and a.figures.get(r.path)
              and all(i and "origin_unix" in i for i in r.rank_info)]
    if traced:  # the run that stalls most, and the one whose traced reads took longest
        most = _most_stalled(traced, a.figures)
        io = lambda r: (a.figures[r.path].get("darshan") or {}).get("dxt_io_s", 0.0)
        busiest = max(traced, key=io)
        why = {most.path: f"the traced run with the largest steady-state stall, "
                          f"{a.figures[most.path]['stall_pct_steady']:.1f}% of the step"}
        if busiest is not most:
            why[busiest.path] = f"the traced run with the longest reads, {io(busiest):.3f} s"
        for r in [most] + ([busiest] if busiest is not most else []):
            name = f"dxt-steps-{r.name}.png"
            made.append((_dxt_figure(r, os.path.join(out, name)),
                         f"{r.name} ({why[r.path]}): the waits for a batch (red) against "
                         f"the reads of the dataset DXT traced (blue), per rank"))
    return made


def _dxt_figure(run, path):
    """Every rank on rank 0's clock: each rank's times less its node's measured offset."""
    log, s = run.logs[0], run.steps
    d = dataset_reads(run, log)
    off = np.array([(i.get("clock") or {}).get("offset_s", 0.0) for i in run.rank_info])
    origin = np.array([i["origin_unix"] for i in run.rank_info]) - off
    start = dxt_shifts(run, log) - off
    t_first = min(origin[r] + s["t0"][r, 0] for r in range(len(origin)))
    windows, reads = {}, {}
    for r in range(len(origin)):
        t0 = s["t0"][r] + origin[r] - t_first
        windows[r] = (t0, t0 + s["fetch"][r] + s["prep"][r] + s["stall_other"][r])
        seg = d[d["rank"] == r]
        reads[r] = (seg["start"] + start[r] - t_first, seg["end"] + start[r] - t_first)
    return fig.dxt_steps(windows, reads, f"{run.name}: waits for a batch and DXT reads", path)


# --- rendering -------------------------------------------------------------------------


def _one(v, spec):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    try:
        return spec.format(v)
    except (ValueError, TypeError):
        return str(v)


def _cell(row, key, spec):
    """A table cell: the value, and its range over repeats where the row has one."""
    text = _one(row.get(key), spec)
    if f"{key}_min" in row and text != "-":
        text += f" ({_one(row[key + '_min'], spec)}-{_one(row[key + '_max'], spec)})"
    return text


def _blocks(a, pngs):
    """The report as blocks: ("h", text), ("p", text), ("ul", [text]), ("table", Table),
    ("img", file, caption), ("pre", text)."""
    b = [("h", "hpcio analysis"),
         ("p", f"{len(a.runs)} run(s); baseline reader: {a.baseline}. Definitions: "
               "hpcio.measure.steps (step accounting), hpcio.explain.tables (tables), "
               "hpcio.explain.verdict (verdicts and causes), "
               + ("hpcio.simulate (the forecast). " if a.prediction else
                  "hpcio.explain.model (the scaling fit). ")
               + f"A measured value of a point (a reader at a rank count) is {MEASURED}, "
                 f"wherever it is quoted.")]
    if a.problems:
        b += [("h", "Gaps in the input"), ("ul", a.problems)]
    if a.causes is not None:
        b += [("h", a.causes.title), ("table", a.causes), ("p", a.causes.note)]
    for title, cs in a.comparisons:
        b += [("h", title), ("ul", [c["text"] for c in cs])]
    if a.prediction:
        b += _prediction_blocks(a, dict(pngs).get(_PRED_PNG))
    else:
        b.append(("h", "Scaling fit (hpcio.explain.model)"))
        b.append(("p", "A least-squares fit of stall per step against ranks, extrapolated: "
                       "a fit to the measured points, not a simulation (python -m "
                       "hpcio.simulate predict, then --prediction, gives the simulated "
                       "forecast instead)."))
        if not a.models:
            b.append(("p", "No run with step records: nothing to fit."))
        for name, m in a.models.items():
            b.append(("p", _model_text(name, m)))
    b.append(("h", "Findings"))
    if a.findings:
        b.append(("table", _findings_table(a.findings)))
    else:
        b.append(("p", "No rule fired."))
    rules = RULES + (CKPT_RULES if a.checkpoints is not None else [])
    b.append(("p", "Rules and thresholds: " + "; ".join(
        f"{r.name} ({r.source}: {r.threshold})" for r in rules) + "."))
    if a.checkpoints is not None:
        b += [("h", a.checkpoints.title), ("table", a.checkpoints), ("p", a.checkpoints.note)]
    b += _drishti_blocks(a)
    for t in a.tables:
        b += [("h", t.title), ("table", t), ("p", t.note)]
    for name, caption in pngs:
        if name != _PRED_PNG:
            b.append(("img", name, caption))
    if a.notes:
        b += [("h", "Notes on the input"), ("ul", a.notes)]
    return b


def _drishti_blocks(a):
    """Drishti's own verdicts beside hpcio's findings: a table, and a line per log it gave
    none for."""
    b = [("h", "Drishti's verdicts")]
    if a.drishti_version:
        b.append(("p", f"Drishti {a.drishti_version} (drishti-io) on each run's Darshan log, "
                       f"the most severe first: {', '.join(LEVELS)}; the code is Drishti's "
                       f"(P: POSIX, M: MPI-IO, S: STDIO). The Drishti rules among the findings "
                       f"above are hpcio's own reading of its thresholds."))
        b.append(("table", Table(
            "drishti", "Drishti's verdicts",
            [("run", "run", "{}"), ("level", "level", "{}"), ("code", "code", "{}"),
             ("verdict", "Drishti says", "{}")],
            [dict(v, verdict="; ".join([v["message"]] + v["details"])) for v in a.drishti],
            empty="Drishti raised nothing.")))
    if a.drishti_said:
        b.append(("ul", a.drishti_said))
    elif not a.drishti_version:
        b.append(("p", "No Darshan log among the runs: nothing for Drishti to read."))
    return b


def _prediction_blocks(a, caption):
    """The simulated scaling: where it comes from, the headline, per reader the curve's
    range and validation (and the storage's limit against it where one was given), the
    figure and the table."""
    pred = a.prediction
    b = [("h", "Simulated scaling (hpcio.simulate)"),
         ("p", f"From {pred.path}" + (f" ({pred.fit})" if pred.fit else "") + ". Stall per "
               f"step: {pred.definition or 'as prediction.json defines it'}. The validation "
               f"is the simulation's own: calibrated without the largest measured rank "
               f"count, then predicting it."
               + (" At the rank counts the runs were made at, a point is that run simulated "
                  "back, as the validation did (the same figures)."
                  if any(p.get("simulated_back") for p in pred.points) else "")
               + f" The measured points are {MEASURED}; this is the report's one forecast "
                 f"(no scaling fit beside it).")]
    line = headline(pred)
    if line:
        b.append(("p", line))
    items = []
    for rd in pred.readers:
        pts = [p for p in pred.points if p["reader"] == rd]
        inside = [p["ranks"] for p in pts if not p["extrapolated"]]
        text = (f"**{rd}**: simulated at P = {', '.join(str(p['ranks']) for p in pts)}"
                + (f" (extrapolated past P = {max(inside)})" if inside and
                   len(inside) < len(pts) else
                   " (all extrapolated)" if not inside else "")
                + f"; {validation_text(pred, rd)}.")
        top = pts[-1]
        if top.get("dominant"):
            text += f" Dominant at P={top['ranks']}: **{top['dominant']}**."
        if a.storage_mibs:
            share = top["storage_mib_per_s"] / a.storage_mibs
            text += (f" At P={top['ranks']} it reads {top['storage_mib_per_s']:,.0f} MiB/s "
                     f"from storage, {100 * share:.0f}% of the limit given "
                     f"({a.storage_mibs:,.0f} MiB/s, --storage-mibs)"
                     + ("; the simulated platform's servers allow more than was measured."
                        if share > 1 else "."))
        items.append(text)
    b.append(("ul", items))
    if caption:
        b.append(("img", _PRED_PNG, caption))
    t = prediction_table(pred)
    return b + [("table", t), ("p", t.note)]


def _model_text(name, m):
    if not m["fitted"]:
        return f"**{name}**: not fitted: {m['why']}."
    c = m["coef"]
    pred = ", ".join(f"P={p['P']}: {1000 * p['stall_s']:.1f} ms, AU {p['au_pct']:.0f}%"
                     + (" (storage bound)" if p["storage_bound"] else "")
                     for p in m["predict"])
    terms = ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in m["terms_at_max_P"].items())
    at = m["stall_exceeds_compute_at"]
    text = (f"**{name}** ({m['points']} runs at P = {', '.join(map(str, m['ranks']))}; "
            f"storage {m['storage']}, BW(P) = min({m['b1'] / 2 ** 20:,.0f}, "
            f"{m['bagg'] / 2 ** 20:,.0f}/P) MiB/s, {m['limits']}): t_stall(P) = max(0, "
            f"{1000 * c['a_s']:.3f} ms + {c['b']:.3f} (x/BW(P) - x/B1) + "
            f"{1000 * c['c_s_per_rank']:.4f} ms x P + {1000 * c['d_s_per_doubling']:.3f} ms x "
            f"log2 P), x = "
            f"{m['bytes_step_rank']:,.0f} B per step and rank; RMS error "
            f"{1000 * m['rms_error_s']:.2f} ms. At P={m['max_P']}: {terms}; dominant: "
            f"**{m['dominant']}**. The fit extrapolated: {pred}. Stall exceeds compute "
            f"({1000 * m['compute_s']:.1f} ms per step) "
            + (f"from P = {at}." if at else "at no P up to 2^20.")
            + ("" if m["cycle_s"] else " The storage's limit is unknown (no --storage-mibs):"
               " the extrapolation assumes it keeps up."))
    if m.get("straggler_s"):  # synchronous steps: what the slowest rank costs the others
        text += (f" Measured at P={m['max_P']} (synchronous steps): each rank's own wait "
                 f"{1000 * m['own_wait_s']:.2f} ms per step (mean over ranks), then "
                 f"{1000 * m['straggler_s']:.2f} ms waiting in the exchange for the slowest "
                 f"rank; the synchronisation term fits "
                 f"{1000 * m['terms_at_max_P']['synchronisation']:.2f} ms of the max-rank "
                 f"stall.")
    loo = m.get("loo")
    if loo:
        text += (f" Check (leave-one-out): fitted on P = {', '.join(map(str, loo['fitted_on']))}"
                 f" only, the fit gives {1000 * loo['predicted_s']:.2f} ms at "
                 f"P={loo['P']} against {1000 * loo['measured_s']:.2f} ms measured: error "
                 f"{1000 * loo['error_s']:+.2f} ms ({_fmt(loo['error_pct'], '{:+.0f}')}%).")
    else:
        text += " No leave-one-out check: too few rank counts below the largest."
    return text


def _findings_table(fs):
    return Table("findings", "Findings",
                 [("run", "run", "{}"), ("rule", "rule", "{}"), ("source", "source", "{}"),
                  ("what", "numbers", "{}"), ("advice", "recommendation", "{}")],
                 [asdict(f) for f in fs])


def _md(blocks):
    out = []
    for blk in blocks:
        kind = blk[0]
        if kind == "h":
            out.append(("# " if blk[1] == "hpcio analysis" else "## ") + blk[1])
        elif kind == "p":
            out.append(blk[1])
        elif kind == "ul":
            out.append("\n".join(f"- {x}" for x in blk[1]))
        elif kind == "pre":
            out.append("```\n" + blk[1] + "\n```")
        elif kind == "img":
            out.append(f"![{blk[2]}]({blk[1]})\n\n*{blk[2]}*")
        elif kind == "table":
            t = blk[1]
            head = [lbl for _, lbl, _ in t.columns]
            rows = [[_cell(r, k, spec).replace("|", "/") for k, _, spec in t.columns]
                    for r in t.rows]
            out.append("\n".join(["| " + " | ".join(head) + " |",
                                  "|" + "---|" * len(head)]
                                 + ["| " + " | ".join(r) + " |" for r in rows])
                       if rows else t.empty)
    return "\n\n".join(out) + "\n"


def _inline(text):
    """Markdown's **bold** as HTML, the rest escaped."""
    parts = html.escape(text).split("**")
    return "".join(f"<b>{p}</b>" if k % 2 else p for k, p in enumerate(parts))


def _html(blocks, out):
    body = []
    for blk in blocks:
        kind = blk[0]
        if kind == "h":
            tag = "h1" if blk[1] == "hpcio analysis" else "h2"
            body.append(f"<{tag}>{html.escape(blk[1])}</{tag}>")
        elif kind == "p":
            body.append(f"<p>{_inline(blk[1])}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in blk[1]) + "</ul>")
        elif kind == "pre":
            body.append(f"<pre>{html.escape(blk[1])}</pre>")
        elif kind == "img":
            with open(os.path.join(out, blk[1]), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            body.append(f'<figure><img src="data:image/png;base64,{data}" alt="'
                        f'{html.escape(blk[2])}"><figcaption>{html.escape(blk[2])}'
                        f"</figcaption></figure>")
        elif kind == "table":
            t = blk[1]
            head = "".join(f"<th>{html.escape(lbl)}</th>" for _, lbl, _ in t.columns)
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r, k, spec))}</td>"
                                            for k, _, spec in t.columns) + "</tr>"
                           for r in t.rows)
            body.append(f"<table><tr>{head}</tr>{rows}</table>" if t.rows else
                        f"<p>{html.escape(t.empty)}</p>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
             "table{border-collapse:collapse;font-size:12px;margin:.5em 0}"
             "td,th{border:1px solid #ccc;padding:2px 5px;text-align:right}"
             "th{background:#eee}img{max-width:100%}figcaption{font-size:13px;color:#444}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpcio analysis</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def _clean(x):
    """JSON-safe: NaN and inf as null, numpy scalars as Python numbers (any other value
    left as it is: the CSV writer writes its text)."""
    return jsonable(x, finite=True, other=lambda v: v)


def _csv(t, path):
    keys = [k for k, _, _ in t.columns]
    keys += sorted({k for r in t.rows for k in r} - set(keys))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for r in t.rows:
            w.writerow(["" if _clean(r.get(k)) is None else _clean(r.get(k)) for k in keys])


def write(a, out, formats=FORMATS):
    """Write the report into ``out`` (see the module docstring); returns the files."""
    os.makedirs(out, exist_ok=True)
    files = []
    for t in a.tables + ([a.causes] if a.causes is not None else []) + \
            ([a.checkpoints] if a.checkpoints is not None else []) + \
            ([prediction_table(a.prediction)] if a.prediction else []):
        files.append(os.path.join(out, f"{t.name}.csv"))
        _csv(t, files[-1])
    pngs = [(os.path.basename(p), c) for p, c in _draw(a, out)]
    files += [os.path.join(out, p) for p, _ in pngs]
    blocks = _blocks(a, pngs)
    if "md" in formats:
        files.append(os.path.join(out, "report.md"))
        with open(files[-1], "w") as f:
            f.write(_md(blocks))
    if "html" in formats:
        files.append(os.path.join(out, "report.html"))
        with open(files[-1], "w") as f:
            f.write(_html(blocks, out))
    if "json" in formats:
        files.append(os.path.join(out, "summary.json"))
        doc = {"runs": [r.path for r in a.runs], "baseline": a.baseline,
               "problems": a.problems, "notes": a.notes, "answers": a.answers,
               "comparisons": [{"heading": h, "points": cs} for h, cs in a.comparisons],
               "storage_mibs": a.storage_mibs, "measured": MEASURED,
               "causes": {r["run"]: {k: v for k, v in r.items() if k != "run"}
                          for r in (a.causes.rows if a.causes is not None else [])},
               "forecast": "simulation" if a.prediction else "fit" if a.models else None,
               "models": a.models, "findings": [asdict(f) for f in a.findings],
               "tables": {t.name: t.rows for t in a.tables},
               "checkpoints": a.checkpoints.rows if a.checkpoints is not None else [],
               "drishti": {"version": a.drishti_version, "verdicts": a.drishti,
                           "not_given": a.drishti_said},
               "prediction": None if a.prediction is None else {
                   "path": a.prediction.path, "fit": a.prediction.fit,
                   "points": a.prediction.points, "held_out": a.prediction.held_out,
                   "accelerators_supported": a.prediction.accelerators}}
        with open(files[-1], "w") as f:
            json.dump(_clean(doc), f, indent=1)
    return files
