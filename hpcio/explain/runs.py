"""Run directories and sweeps read back for analysis, with what each lacks said.

A run directory (:class:`hpcio.measure.rundir.RunDir`, which reads each of its files)
holds ``config.yaml``, ``env.json``, ``rank-R.npz``, ``rank-R.json``, ``summary.json``
and, when traced, ``darshan/*.darshan``;
a sweep directory (``python -m hpcio.sweep``) holds ``sweep.json`` naming its runs. Older
run directories miss files or fields; a run cut short has fewer steps or no summary. None
of that stops the analysis: each gap becomes one line in ``problems`` (bad input: printed
and reported) or ``notes`` (something this run format does not record: reported).
"""

import glob
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..errors import HpcioError
from ..measure.rundir import RunDir
from ..measure.steps import SINCE_EXCHANGE
from ..measure import schema
from ..measure.darshanlog import DarshanLog, read_log

__all__ = ["Run", "load_run", "expand", "load"]

SWEEP = "sweep.json"
STEP_COLUMNS = ("epoch", "step", "t0", "wall", "fetch", "prep", "stall_other", "h2d",
                "compute", "straggler_wait", "exchange", "ckpt", "other", "records", "nbytes")
# a log is the run's when it starts before the run's first step and ends after its last,
# within this slack (seconds: clocks of several nodes, the log's whole-second rounding)
_SLACK = 2.0


@dataclass
class Run:
    path: str
    config: dict
    env: dict
    summary: Optional[dict]
    rank_info: List[Optional[dict]]     # rank-R.json, None where missing
    steps: Dict[str, np.ndarray]        # column -> (ranks, steps); empty when no rank files
    logs: List[DarshanLog] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    repeat: int = 0

    @property
    def name(self):
        return os.path.basename(os.path.normpath(self.path))

    @property
    def reader(self):
        opts = self.config.get("reader_option") or []
        return self.config.get("reader", "?") + "".join(f" {o}" for o in opts)

    @property
    def ranks(self):
        return int(self.config.get("ranks") or len(self.rank_info))

    @property
    def format(self):
        return (self.config.get("dataset") or {}).get("format", "?")

    @property
    def dataset(self):
        """What makes two runs' data the same: the dataset's description and size."""
        d = self.config.get("dataset") or {}
        return (f"{d.get('format', '?')}/{d.get('encoding', '?')} {d.get('records', '?')} "
                f"records {self.config.get('dataset_bytes', '?')} B")

    @property
    def data_path(self):
        return self.config.get("data") or ""

    @property
    def measured(self):
        """Mask (steps,) of the steps that count: all but each epoch's first (as the run's
        own summary: hpcio.measure.steps), unless that leaves none."""
        if not self.steps:
            return np.zeros(0, bool)
        m = self.steps["step"][0] != 0
        return m if m.any() else np.ones_like(m)


def _problem(run, path, what):
    run.problems.append(f"{path}: {what}")


def _checked(run, path, kind, read, missing):
    """The file ``path`` read by ``read()`` (a :class:`RunDir` reader: checked against its
    schema): the value, its dropped fields said; None (with one line, or ``missing`` when
    absent) if unusable."""
    try:
        value, gaps = read()
    except FileNotFoundError:
        if missing:
            _problem(run, path, missing)
        return None
    except schema.Invalid as e:
        run.problems.append(f"{e}; {_UNUSABLE[kind]}")
        return None
    if gaps:
        run.problems.append(schema.gap_line(path, gaps))
    return value


_UNUSABLE = {  # what is left out when a file of this kind cannot be used
    "summary": "analysed from its rank files",
    "rank": "this rank's counters are left out",
    "env": "its environment is left out",
}
# step columns that are counts or durations: a negative one was not measured
_NONNEGATIVE = tuple(c for c in STEP_COLUMNS if c != "t0")


def _load_steps(run, rd, present):
    """Every rank's step arrays as (ranks, steps) matrices, cut to the shortest rank."""
    absent = [r for r in range(run.ranks) if r not in present]
    if absent:
        _problem(run, rd.rank_steps_file(absent[0]) if len(absent) == 1
                 else f"{run.path}: {RunDir.RANK_STEPS.format(rank='R')} of ranks "
                      f"{schema.spans(absent)}",
                 "missing; this run's step tables are left out")
        return {}
    cols, lengths = {c: [] for c in STEP_COLUMNS}, []
    required = [c for c in STEP_COLUMNS if c not in SINCE_EXCHANGE]
    optional = [c for c in STEP_COLUMNS if c in SINCE_EXCHANGE]
    for r in range(run.ranks):
        p = rd.rank_steps_file(r)
        try:
            z = rd.rank_steps(r, required, optional, _NONNEGATIVE)
        except FileNotFoundError:
            _problem(run, p, "missing; this run's step tables are left out")
            return {}
        except schema.MissingColumns as e:
            _problem(run, p, f"older step format without {', '.join(e.columns)}; "
                             f"this run's step tables are left out")
            return {}
        except schema.Invalid as e:
            run.problems.append(f"{e}; this run's step tables are left out")
            return {}
        # runs from before the exchange stepped independently: theirs were 0
        arrays = {c: z[c] if c in z else np.zeros(len(z["step"])) for c in STEP_COLUMNS}
        for c in STEP_COLUMNS:
            cols[c].append(arrays[c])
        lengths.append(len(arrays["step"]))
    if not lengths or min(lengths) == 0:
        _problem(run, run.path, "no step recorded; this run's step tables are left out")
        return {}
    n = min(lengths)
    if max(lengths) != n:
        run.notes.append(f"ranks recorded {min(lengths)}-{max(lengths)} steps; the first "
                         f"{n} of each are used")
    return {c: np.stack([a[:n] for a in v]) for c, v in cols.items()}


def _out_of(exe):
    """The ``--out`` of an hpcio.train command line, or None."""
    try:
        words = shlex.split(exe)
    except ValueError:
        words = exe.split()
    for k, w in enumerate(words):
        if w == "--out" and k + 1 < len(words):
            return words[k + 1]
        if w.startswith("--out="):
            return w.split("=", 1)[1]
    return None


def _log_mismatch(run, log):
    """Why ``log`` is not this run's trace, or None: another command, another ``--out``,
    other ranks, or a time span that does not contain the run's steps."""
    if "hpcio.train" not in log.exe:
        return f"a log of another program ({log.exe[:80]!r})"
    out, mine = _out_of(log.exe), run.config.get("out") or run.config.get("run_dir")
    if out and mine and os.path.normpath(out) != os.path.normpath(mine):
        return f"a log of another run (its command wrote to {out}, this run's to {mine})"
    if log.nprocs != run.ranks:
        return f"a log of another run ({log.nprocs} ranks, this run has {run.ranks})"
    origins = [i.get("origin_unix") for i in run.rank_info if i]
    if origins and all(o is not None for o in origins) and run.steps:
        # the log's start and end are a minimum and a maximum over the nodes' clocks
        skew = max(abs((i.get("clock") or {}).get("offset_s", 0.0)) for i in run.rank_info
                   if i)
        first = min(origins)
        last = max(o + float(run.steps["t0"][r, -1] + run.steps["wall"][r, -1])
                   for r, o in enumerate(origins))
        if log.start > first + _SLACK + skew or log.end < last - _SLACK - skew:
            return (f"a log of another run (it spans {log.end - log.start:.0f} s starting "
                    f"{log.start - first:+.1f} s from this run's first step; the steps end "
                    f"{last - first:.1f} s after it)")
    return None


def _load_logs(run, rd):
    paths = rd.darshan_logs()
    traced = bool(run.config.get("darshan") or run.env.get("darshan"))
    if not paths:
        if traced:
            _problem(run, rd.darshan_dir,
                     "no Darshan log although the run was traced; Darshan tables left out")
        else:
            run.notes.append("not traced with Darshan (no darshan/*.darshan)")
        return
    for p in paths:
        try:
            log = read_log(p)
        except HpcioError as e:
            run.problems.append(f"{e}; left out")
            continue
        why = _log_mismatch(run, log)
        if why:
            _problem(run, p, f"{why}; left out")
            continue
        if log.partial:
            run.notes.append(f"{p}: Darshan ran out of records or memory in "
                             f"{', '.join(log.partial)}: those counts are lower bounds")
        if log.counter_reader is None:
            run.notes.append(f"{p}: no Darshan counter reader (install hpcio[analysis] or "
                             f"put darshan-parser on PATH): only its DXT traces are used")
        run.logs.append(log)


def load_run(path, repeat=0):
    """A run directory read back (see the module docstring); raises HpcioError only when
    ``path`` is not a run directory at all or its config.yaml cannot be used."""
    path = os.path.abspath(path)
    rd = RunDir(path)
    try:
        config, gaps = rd.config()
    except FileNotFoundError:
        raise HpcioError(f"{path}: not a run directory (no {RunDir.CONFIG})") from None
    run = Run(path, config, {}, None, [], {}, repeat=repeat)
    if gaps:
        run.problems.append(schema.gap_line(rd.config_file, gaps))
    run.env = _checked(run, rd.env_file, "env", rd.env, None) or {}
    if not os.path.lexists(rd.env_file):
        run.notes.append(f"{RunDir.ENV}: No such file or directory")
    run.summary = _checked(run, rd.summary_file, "summary", rd.summary,
                           "missing or unreadable: the run did not finish (killed or cut "
                           "short); analysed from its rank files")
    if run.summary and run.summary.get("cut_short"):
        _problem(run, path, f"cut short (signal {run.summary.get('signal')}) after "
                            f"{(run.summary.get('metrics') or {}).get('steps_per_rank')} of "
                            f"{run.summary.get('steps_per_epoch')} steps per epoch; its "
                            f"figures cover the steps it ran")
    present = rd.rank_files(run.ranks)
    absent = [r for r in range(run.ranks) if r not in present["json"]]
    if len(absent) > 1:
        _problem(run, f"{path}: {RunDir.RANK_INFO.format(rank='R')} of ranks "
                      f"{schema.spans(absent)}", "missing; their counters are left out")
    for r in range(run.ranks):
        p = rd.rank_info_file(r)
        if r not in present["json"]:
            run.rank_info.append(None)
            if len(absent) == 1:
                _problem(run, p, "missing; this rank's counters are left out")
            continue
        run.rank_info.append(_checked(run, p, "rank", lambda r=r: rd.rank_info(r), None))
    run.steps = _load_steps(run, rd, present["npz"])
    if run.rank_info and any(i and "origin_unix" not in i for i in run.rank_info):
        run.notes.append(f"older format: no origin_unix in "
                         f"{RunDir.RANK_INFO.format(rank='R')}, so steps cannot be aligned "
                         f"with Darshan's traces")
    _load_logs(run, rd)
    return run


def _sweep_runs(sweep, notes, problems):
    path = os.path.join(sweep, SWEEP)
    doc, gaps = schema.load(path, "sweep")
    if gaps:
        problems.append(schema.gap_line(path, gaps) + " (those runs are not analysed)")
    out = []
    for r in doc["runs"]:
        point = r["point"]
        what = (f"{point.get('reader')} n={point.get('ranks')} repeat {r.get('repeat')}")
        if r["status"] != "done":
            notes.append(f"{sweep}: {what} {r['status']}"
                         + (f": {r['error']}" if r.get("error") else ""))
            continue
        d = r.get("run_dir") or ""
        if not os.path.isdir(d):  # a sweep moved as a whole: its runs moved with it
            d = os.path.join(sweep, "runs", os.path.basename(d))
        out.append((d, int(r.get("repeat") or 0)))
    return out


def expand(paths):
    """(run dirs with their repeat index, problems, notes) for RUN_OR_SWEEP arguments: a
    run directory, a sweep directory, or a directory of run directories."""
    runs, problems, notes = [], [], []
    for p in paths:
        p = os.path.abspath(p)
        if os.path.isfile(os.path.join(p, SWEEP)):
            try:
                runs += _sweep_runs(p, notes, problems)
            except (FileNotFoundError, schema.Invalid) as e:
                problems.append(f"{e}; this sweep is left out")
        elif RunDir.is_run(p):
            runs.append((p, _repeat_of(p)))
        elif os.path.isdir(p):
            subs = sorted(d for d in glob.glob(os.path.join(p, "*"))
                          if RunDir.is_run(d)
                          or os.path.isfile(os.path.join(d, SWEEP)))
            if not subs:
                problems.append(f"{p}: neither a run nor a sweep directory, nor holds any")
            sub = expand(subs)
            runs += sub[0]
            problems += sub[1]
            notes += sub[2]
        else:
            problems.append(f"{p}: no such directory")
    return runs, problems, notes


def _repeat_of(path):
    m = re.search(r"-r(\d+)(?:-a\d+)?$", os.path.normpath(path))
    return int(m.group(1)) if m else 0


def load(paths):
    """Every run under ``paths``: (runs, problems, notes). Each run carries its own
    problems and notes too."""
    dirs, problems, notes = expand(paths)
    runs, seen = [], set()
    for d, rep in dirs:
        if d in seen:
            continue
        seen.add(d)
        try:
            runs.append(load_run(d, rep))
        except HpcioError as e:
            problems.append(f"{e}; left out")
    return runs, problems, notes
