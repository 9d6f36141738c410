"""``python -m hpcio.analyze``: Darshan traces and the runs' own counters explain how stall
scales.

    python -m hpcio.analyze sweeps/pfs -o reports/pfs
    python -m hpcio.analyze runs/a runs/b sweeps/s -o out --report-formats html,md --baseline naive
    python -m hpcio.analyze sweeps/pfs -o reports/pfs --prediction pred/pfs

Takes run directories, sweep directories (``python -m hpcio.sweep``) or directories holding
either, reads every run's step records, counters and Darshan logs (``RUN/darshan/*.darshan``)
and writes into ``-o`` only (a new or empty directory, or one of its earlier reports;
never an input): ``report.html`` (self-contained), ``report.md``, ``table-a.csv``
(per reader x format x ranks), ``table-b.csv`` (what Darshan saw), ``table-c.csv`` (the OS's
counters per sample), ``table-causes.csv`` (what the accelerator waits for, per run: one
rule per cause, ``hpcio.explain.verdict``), the PNG figures and ``summary.json``.
Checkpoint run directories (``python -m hpcio.checkpoint run``), checkpoint sweeps and
training runs that checkpoint a layout get a checkpoint table (``table-checkpoints.csv``)
and findings of their own (``hpcio.explain.checkpoints``). Runs at several rank counts
get the scaling fit (``hpcio.explain.model``) unless a prediction is given. Drishti
(drishti-io, the ``[analysis]`` extra) is run on every log and its verdicts go beside
the findings (one line instead for a log it fails on, or without it; ``--no-drishti``
skips it). ``--prediction DIR`` (the ``-o`` of ``python -m hpcio.simulate
predict``) makes its simulated curve per reader the report's one forecast, in place of the
scaling fit, beside the measured points, with its held-out validation error,
``prediction.png`` and ``table-prediction.csv``; a prediction directory it cannot use is
refused in one line before anything is written. Input it cannot use (a missing, truncated
or foreign log, a run cut short, an older run format, runs of several datasets without
``--allow-mixed``) is one line each on stderr and a gap stated in the report, which is made
from the rest; the exit code is then 1.
"""

import os
import sys

from .explain.prediction import load_prediction
from .explain.checkpoints import is_checkpoint_run, load_checkpoint_run, split_inputs
from .explain.runs import SWEEP, load
from .cli import ArgumentParser, ExamplesFormatter, add_renamed, number
from .errors import HpcioError, guard
from .measure.rundir import RunDir
from .outputs import holder

__all__ = ["build_parser", "main", "refuse_out", "REPORT_MARKER"]


def build_parser():
    p = ArgumentParser(prog="python -m hpcio.analyze", description=__doc__.split("\n\n")[0],
                       formatter_class=ExamplesFormatter,
                       epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("inputs", nargs="+", metavar="RUN_OR_SWEEP",
                   help="run directories, sweep directories, or directories of them")
    p.add_argument("-o", "--out", required=True, metavar="REPORT_DIR",
                   help="where the report goes (made if missing; nothing is written "
                        "elsewhere)")
    p.add_argument("--report-formats", default="html,md,json",
                   help="report formats: html, md, json (the CSV tables and PNGs always)")
    add_renamed(p, "--format", "--report-formats", ": --format names the storage format in "
                "hpcio.datagen", dest="report_formats")
    p.add_argument("--baseline", default="naive",
                   help="the reader the others are compared with")
    p.add_argument("--allow-mixed", action="store_true",
                   help="put runs of several datasets (or storages) in the scaling part, "
                        "each its own series")
    p.add_argument("--storage-mibs", type=number(0.0, 1e9, above=True), default=None,
                   metavar="MIB_S",
                   help="the storage's aggregate bandwidth as measured (e.g. "
                        "benchmarks/bench_pfs.py): drawn as the limit in bandwidth.png and "
                        "bounding the model's predictions (default: no limit drawn; the "
                        "model uses the most any analysed run delivered, a lower bound)")
    p.add_argument("--prediction", metavar="DIR", default=None,
                   help="a directory written by python -m hpcio.simulate predict -o DIR: "
                        "its simulated stall, AU, samples/s and MiB/s per reader and rank "
                        "count are the report's forecast, in place of the scaling fit "
                        "(figure prediction.png, table-prediction.csv), with their "
                        "validation error")
    p.add_argument("--no-drishti", action="store_true",
                   help="do not run Drishti (drishti-io) on the Darshan logs")
    return p


REPORT_MARKER = ".hpcio-report"  # a report directory of hpcio.analyze: it may write there


def refuse_out(out, inputs, runs):
    """Why the report may not go into ``out``, or None: it is an input or inside a run or
    sweep directory (the report's summary.json would replace the run's), or it holds files
    this command did not write (no marker)."""
    real = os.path.realpath(out)
    for p in list(inputs) + list(runs):
        p = os.path.realpath(p)
        is_run = RunDir.is_run(p) or os.path.isfile(os.path.join(p, SWEEP)) \
            or is_checkpoint_run(p)
        if real == p or (is_run and real.startswith(p + os.sep)):
            return (f"is {'' if real == p else 'inside '}the input {p}: the report never "
                    f"goes into what it reads; give another directory")
    h = holder(real)
    if h:
        return (f"is {'' if h[1] == real else 'inside '}the {h[0]} directory {h[1]}: a report "
                f"never goes into a run's or dataset's directory; give another one")
    try:
        names = sorted(os.listdir(real))
    except FileNotFoundError:
        return None
    except OSError as e:
        return e.strerror
    if names and REPORT_MARKER not in names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return (f"holds files hpcio.analyze did not write ({shown}); give a new or empty "
                f"directory, or a report directory of an earlier analysis")
    return None


def main(argv=None):
    a = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:  # matplotlib: the [analysis] extra (see hpcio/__init__.py)
        from .explain.report import FORMATS, analyse, write
    except ImportError as e:
        raise HpcioError(f"{e.name or e} is missing: pip install 'hpcio[analysis]'") from None

    formats = [f.strip() for f in a.report_formats.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise HpcioError(f"--report-formats {a.report_formats}: unknown {', '.join(bad)} (choose from "
                         f"{', '.join(FORMATS)})")
    prediction = load_prediction(a.prediction) if a.prediction else None
    out = os.path.abspath(a.out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise HpcioError(f"-o {a.out}: exists and is not a directory")
    ckpt_dirs, rest = split_inputs(a.inputs)
    runs, problems, notes = load(rest) if rest else ([], [], [])
    ckpts = []
    for d in ckpt_dirs:
        try:
            ckpts.append(load_checkpoint_run(d))
        except HpcioError as e:
            problems.append(f"{e}; left out")
    if not runs and not ckpts:
        raise HpcioError("no run to analyse: " + ("; ".join(problems) or
                                                  "no run directory under the inputs"))
    why = refuse_out(out, a.inputs, [r.path for r in runs] + ckpt_dirs)
    if why:
        raise HpcioError(f"-o {a.out}: {why}")
    try:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, REPORT_MARKER), "a"):
            pass
    except OSError as e:
        raise HpcioError(f"-o {a.out}: {e.strerror}") from None
    analysis = analyse(runs, problems, notes, baseline=a.baseline,
                       allow_mixed=a.allow_mixed, storage_mibs=a.storage_mibs,
                       prediction=prediction, checkpoints=ckpts,
                       drishti=not a.no_drishti)
    files = write(analysis, out, formats)
    for p in analysis.problems:
        print(f"hpcio.analyze: {p}", file=sys.stderr)
    n = len(runs) + len(ckpts)
    print(f"hpcio.analyze: {n} run(s), {len(analysis.findings)} finding(s), "
          f"{len(analysis.drishti)} Drishti verdict(s), {len(analysis.problems)} gap(s), "
          f"{len(analysis.notes)} note(s) on what the runs did not record; {len(files)} "
          f"files in {out}")
    for line in analysis.drishti_said:
        print(f"  {line}")
    for m in analysis.models.values():  # the scaling fit: only without a prediction
        if m.get("fitted") and m.get("loo"):
            loo = m["loo"]
            print(f"  {m['reader']}: scaling fit, leave-one-out at P={loo['P']}: the fit "
                  f"gives {1000 * loo['predicted_s']:.2f} ms, measured "
                  f"{1000 * loo['measured_s']:.2f} ms per step ({1000 * loo['error_s']:+.2f} "
                  f"ms)")
    return 1 if analysis.problems else 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.analyze"))
