"""The sweep's loop: every point not done yet run as one train job, each attempt recorded in
sweep.json before it starts and after it ends, so the record always names every run
directory there is and a rerun resumes where this one stopped."""

import argparse
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from functools import cached_property

from ..errors import HpcioError
from ..explain.summary import figures_line
from ..measure.schema import SWEEP_STATUSES as STATUSES
from . import checkpoints
from .outcome import outcome
from .spec import Point, train_options
from .supervise import Forward, run_job
from .sweepdir import SweepDir, recorded_dirs

__all__ = ["Sweep", "STATUSES", "HISTORY"]

# what an earlier attempt keeps in its point's "history"
HISTORY = ("run_dir", "status", "error", "signal", "stderr", "returncode", "seconds", "started")
# what a new attempt clears of the one before
CLEARED = ("error", "figures", "signal", "stderr")


@dataclass
class Sweep:
    """One sweep: its settings, its directory, and the cores and whether its points
    oversubscribe them (recorded)."""

    settings: dict
    dir: SweepDir
    cores: int
    oversubscribed: bool = False

    @cached_property
    def train(self) -> argparse.Namespace:
        """The train options as hpcio.train reads them (:func:`.spec.train_options`), on
        first use: a sweep refused at the lock does not wait for train's imports."""
        return train_options(self.settings["train"])

    @property
    def emulated(self) -> bool:
        """Whether the runs emulate compute (a ``--workload``'s model is emulate)."""
        t = self.train
        return t.model == "emulate" or (t.model is None and t.workload is not None)

    def check(self):
        """The options after ``--`` read as their command reads them (one line if bad)."""
        if self.settings.get("checkpoint"):
            checkpoints.check_options(self.settings["train"])
        else:
            self.train

    def command(self, point, run_dir):
        """The launcher's words for one job of ``point`` into ``run_dir``: a checkpoint
        job in a checkpoint sweep; else a train job, with a cold cache unless the train
        options give one."""
        s = self.settings
        if s.get("checkpoint"):
            return checkpoints.command(s["launcher"], point, run_dir,
                                       checkpoints.checkpoint_dir(self.dir.path, run_dir),
                                       s["train"])
        words = shlex.split(s["launcher"]) + [
            "-n", str(point.ranks), sys.executable, "-m", "hpcio.train", "--data", point.data,
            "--reader", point.reader, "--out", run_dir]
        if self.train.cache is None:
            words += ["--cache", "cold"]
        if point.reader_option:
            words += ["--reader-option", point.reader_option]
        if s["darshan"]:
            words += ["--darshan", s["darshan"]]
        return words + s["train"]

    def record(self, todo, extra=None):
        """(the record, this call's runs): sweep.json as found, checked to be this sweep's,
        with an entry per run of ``todo`` (the existing one, or a pending one) and
        ``extra`` beside them; runs the record has that ``todo`` lacks are kept with
        ``extra`` (a search's earlier probes), dropped without."""
        found = self.dir.record()
        settings = {k: v for k, v in self.settings.items() if k not in ("out", "dry_run")}
        if found is not None and found.get("settings") != settings:
            raise HpcioError(f"{self.dir.path}: holds a sweep with other settings; choose "
                             f"another --out or rerun the same command to resume it")
        runs = {(r["point"]["data"], r["point"]["reader"], r["point"]["ranks"],
                 r["point"]["reader_option"], r["repeat"]): r
                for r in (found or {}).get("runs", [])}
        doc = {"settings": settings, "cores": self.cores,
               "oversubscribed": self.oversubscribed, "runs": [], **(extra or {})}
        mine = []
        for rep, p in todo:
            key = (p.data, p.reader, p.ranks, p.reader_option, rep)
            mine.append(runs.pop(key, None) or {"point": asdict(p), "repeat": rep,
                                                "status": "pending", "attempts": 0})
            if rep < self.settings.get("warmup", 0):
                mine[-1]["warmup"] = True
        doc["runs"] = (list(runs.values()) if extra is not None else []) + mine
        for r in doc["runs"]:
            if r["status"] == "running":  # the sweep that ran it ended first (SIGKILL)
                r.update(status="interrupted",
                         error="the sweep ended while it ran; its results are as it left them")
        return doc, mine

    def run(self, todo, extra=None):
        """Run every point of ``todo`` (``(repeat, Point)`` pairs) not done yet. Returns
        (exit code, the record): 128 + a signal that stopped it, 1 when a run is not
        done, else 0."""
        doc, mine = self.record(todo, extra)
        self.dir.write_record(doc)
        done = sum(r["status"] == "done" for r in mine)
        if done:
            print(f"hpcio.sweep: resuming {self.dir.path}: {done} of {len(todo)} runs done",
                  flush=True)
        recorded = recorded_dirs(doc)
        with Forward() as forward:
            for k, r in enumerate(mine):
                if forward.signum is not None:
                    break
                if r["status"] != "done":
                    self._attempt(doc, r, forward, recorded)
                    print(f"[{k + 1}/{len(todo)}] {_point_text(r)}: {_line(r)} "
                          f"({r['seconds']:.1f} s)", flush=True)
        if extra is None:
            print(_totals(doc, self.dir.record_file, forward.signum), flush=True)
        if forward.signum is not None:
            return 128 + forward.signum, doc
        return (0 if all(r["status"] == "done" for r in doc["runs"]) else 1), doc

    def _attempt(self, doc, r, forward, recorded):
        """One attempt of run ``r``: in a fresh run directory, recorded before it starts
        (before the run makes its directory) and after it ends."""
        if r.get("run_dir"):  # an earlier attempt: kept on disk and in the record
            r.setdefault("history", []).append({x: r.pop(x) for x in HISTORY if x in r})
        r["attempts"] += 1
        for x in CLEARED:
            r.pop(x, None)
        p = Point(**r["point"])
        run_dir = self.dir.fresh_run_dir(r, f"{p.name}-r{r['repeat']}", recorded)
        cmd = self.command(p, run_dir)
        r.update(status="running", run_dir=run_dir,
                 command=" ".join(shlex.quote(w) for w in cmd),
                 started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        recorded.add(run_dir)
        self.dir.write_record(doc)
        t = time.monotonic()
        rc, err = run_job(cmd, forward)
        if self.settings.get("checkpoint"):  # large; the run directory keeps the figures
            shutil.rmtree(checkpoints.checkpoint_dir(self.dir.path, run_dir),
                          ignore_errors=True)
        status, details = outcome(rc, run_dir, err)
        if status != "done":
            details["stderr"] = self.dir.keep_stderr(run_dir, err)
        r.update(status=status, seconds=round(time.monotonic() - t, 2), returncode=rc,
                 **details)
        self.dir.write_record(doc)


def _point_text(r):
    p = r["point"]
    return (f"{p['reader']} n={p['ranks']} {os.path.basename(p['data'])}"
            f"{' ' + p['reader_option'] if p['reader_option'] else ''} repeat {r['repeat']}")


def _line(r):
    """What a finished run measured, or why it did not, for its progress line."""
    f = r.get("figures") or {}
    if r["status"] == "done":
        if any(k in f for k in checkpoints.FIGURES):
            return checkpoints.line(f)
        return figures_line(f) if f.get("au_percent") is not None else "no step measured"
    return f"{r['status'].upper().replace('_', ' ')}: {r.get('error')}"


def _totals(doc, path, stopped):
    runs = doc["runs"]
    count = {st: sum(r["status"] == st for r in runs) for st in STATUSES}
    text = (f"hpcio.sweep: {count['done']} of {len(runs)} runs done, {count['failed']} "
            f"failed")
    for st in ("cut_short", "interrupted"):
        if count[st]:
            text += f", {count[st]} {st.replace('_', ' ')}"
    left = count["pending"] + count["running"]
    if stopped:
        text += (f", {left} not run: stopped by {signal.Signals(stopped).name} (the same "
                 f"command resumes)")
    return text + f"; {path}"
