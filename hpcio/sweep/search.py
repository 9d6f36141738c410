"""``--find-max-accelerators``: MLPerf Storage's accelerators-supported search run as sweep
points (the rules and the bisection are :mod:`hpcio.explain.accelerators`'), and the
simulation past the largest count when it passes."""

import subprocess
import sys

from ..errors import HpcioError
from ..explain import accelerators
from ..explain.prediction import load_prediction
from ..measure.rundir import RunDir
from ..measure.schema import Invalid
from .outcome import error_line
from .spec import Point

__all__ = ["find_max", "simulate_beyond"]


class _Stopped(Exception):
    """A signal stopped the search's current run: the sweep exits with its code."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _threshold(sweep):
    s = sweep.settings
    if len(s["readers"]) != 1 or len(s["data"]) != 1 or s["reader_options"] != [""]:
        raise HpcioError("--find-max-accelerators searches one reader on one dataset: give "
                         "one --reader and one --data", everywhere=True)
    return accelerators.threshold(sweep.train.au_threshold, sweep.train.workload)


def find_max(sweep):
    """The search over ``--ranks`` (one reader, one dataset): each probed count runs as a
    sweep point, warm-ups first; the answer and every probe go into sweep.json under
    ``search``. Returns the exit code."""
    s = sweep.settings
    threshold, source = _threshold(sweep)
    if s["dry_run"]:
        print(f"hpcio.sweep: would search {', '.join(map(str, s['ranks']))} ranks for AU >= "
              f"{threshold:.0f}% ({source})", flush=True)
        return 0
    sweep.dir.make()
    probes = {}

    def search_doc(answer):
        done = [dict(ranks=n, **probes[n]) for n in sorted(probes)]
        ok, why = accelerators.rules(s["warmup"], s["repeat"], done)
        return {"threshold_percent": threshold, "threshold_from": source,
                "candidates": s["ranks"], "warmup": s["warmup"], "runs": s["repeat"],
                "probes": done, "max_accelerators": answer,
                "rules": {"followed": ok, "reasons": why}}

    def probe(ranks):
        p = Point(s["data"][0], s["readers"][0], ranks)
        todo = [(rep, p) for rep in range(s["warmup"] + s["repeat"])]
        code, doc = sweep.run(todo, {"search": search_doc(None)})
        if code > 128:
            raise _Stopped(code)
        probes[ranks] = accelerators.judge(
            [r for r in doc["runs"] if r["point"]["ranks"] == ranks and not r.get("warmup")],
            threshold)
        sweep.dir.write_record(dict(doc, search=search_doc(None)))
        print(f"hpcio.sweep: {ranks} accelerator(s): {probes[ranks]['verdict']}", flush=True)
        return probes[ranks]["passed"]

    with sweep.dir.locked():
        try:
            answer = accelerators.search(s["ranks"], probe)
        except _Stopped as e:
            return e.code
        doc = sweep.dir.record()
        doc["search"] = search_doc(answer)
        print(accelerators.answer_line(doc["search"], s["readers"][0],
                                       sweep.dir.record_file), flush=True)
        if s["simulate_beyond"] and answer == max(s["ranks"]):
            doc["search"]["simulated"] = simulate_beyond(sweep, doc, answer, threshold)
            print(accelerators.simulated_line(doc["search"]["simulated"]), flush=True)
        sweep.dir.write_record(doc)
    return 0


def simulate_beyond(sweep, doc, answer, threshold):
    """``hpcio.simulate predict`` on the search's measured runs (warm-ups left out), at
    powers of two past ``answer`` that the data (the workload's full size, if any) hold:
    its accelerators-supported answer, marked simulated, or why there is none."""
    runs = [r["run_dir"] for r in doc["runs"] if r["status"] == "done" and not r.get("warmup")]
    config = RunDir(runs[0]).config()[0]
    records = accelerators.records_of(sweep.train.workload) or config["dataset"]["records"]
    beyond = [answer * 2 ** k for k in range(1, 7) if answer * 2 ** k * config["batch"]
              <= records]
    where, platform = sweep.dir.simulated_dir, sweep.settings["simulate_beyond"]
    base = {"platform": platform, "note": "simulated, not measured", "output": where}
    if not beyond:
        return dict(base, error=f"the data ({records:,} records) hold no more ranks of "
                                f"batch {config['batch']}")
    cmd = [sys.executable, "-m", "hpcio.simulate", "predict", "--platform", platform,
           "--from", *runs, "--ranks", ",".join(map(str, beyond)), "--records", str(records),
           "--au-threshold", str(threshold), "--scale-out", "-o", where]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        return dict(base, error=error_line(p.stderr))
    try:
        got = load_prediction(where).accelerators
    except Invalid as e:
        return dict(base, error=str(e))
    if not got:
        return dict(base, error=f"{where}: the prediction has no accelerators-supported "
                                f"answer")
    return dict(base, simulated_ranks=beyond, **next(iter(got.values())))
