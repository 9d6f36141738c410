"""A prediction of ``python -m hpcio.simulate predict``: its two files written
(:func:`write_prediction`) and read back for the report and the sweep's search
(:func:`load_prediction`, ``hpcio.analyze --prediction DIR``): the simulated points per
reader and rank count, what the validation says they are worth, and the simulation's
headline when it gives one. This module is the one place that names the files::

    prediction.json   the platform, the fit, the points, accelerators supported per reader
    validation.json   the measured points simulated back, and the held-out rank count

Both files are read through :mod:`hpcio.measure.schema`, as the runs' are: a directory
without them, or a file that cannot be used, is one line naming it (:class:`Invalid`); a bad
optional field (``dominant``, ``accelerators_supported``) is dropped and named, and the
report is made from the rest.
"""

import os
from dataclasses import dataclass, field
from typing import List, Optional

from ..fsutil import atomic_json
from ..measure import schema
from ..measure.schema import Invalid
from .tables import Table

__all__ = ["Prediction", "write_prediction", "load_prediction", "prediction_table",
           "validation_text", "short_validation", "headline", "FILES", "STALL_DEFINITION",
           "is_prediction"]

# kind (its schema in measure.schema) -> file name
FILES = {"prediction": "prediction.json", "validation": "validation.json"}
# what a point's stall_s_per_step is, written beside the points
STALL_DEFINITION = ("Table A's stall/step max-rank (tables.run_figures stall_max_s), each "
                    "epoch's first step left out")


@dataclass
class Prediction:
    path: str
    points: List[dict]              # prediction.json's, sorted by reader and ranks
    held_out: Optional[dict]        # validation.json's; None: nothing held out
    simulated_back: List[dict]
    accelerators: Optional[dict]    # {reader: {ranks, threshold_au_percent}} when given
    fit: str = ""
    definition: str = ""
    gaps: List[str] = field(default_factory=list)   # optional fields dropped, one line each

    @property
    def readers(self):
        return sorted({p["reader"] for p in self.points})


def write_prediction(path, platform, fit, points, supported, simulated_back, held_out,
                     **more):
    """Both files into directory ``path`` (made if need be), each atomically:
    ``platform`` (a platform's dict), ``fit`` (its line), the simulated ``points``,
    ``supported`` ({reader: accelerators supported}), the measured points simulated back
    and the held-out check (None: nothing held out); ``more``: prediction.json's other
    fields (the near-equal fits' tolerance, the runs that would narrow a range)."""
    os.makedirs(path, exist_ok=True)
    atomic_json(os.path.join(path, FILES["prediction"]), {
        "platform": platform, "fit": fit, "stall_s_per_step": STALL_DEFINITION,
        "accelerators_supported": supported, "points": points, **more})
    atomic_json(os.path.join(path, FILES["validation"]),
                {"simulated_back": simulated_back, "held_out": held_out})


def is_prediction(path, kind):
    """Whether file ``path`` is a ``kind`` file (:data:`FILES`) of an earlier prediction."""
    return not schema.load(path, kind)[1]


def load_prediction(path):
    """The prediction in directory ``path`` (``hpcio.simulate predict -o``). Raises
    :class:`Invalid` (one line naming the file) when the directory or either file is
    missing or cannot be used: a report that promised a prediction must not quietly lack
    it."""
    if not os.path.isdir(path):
        raise Invalid(f"{path}: {'not a directory' if os.path.exists(path) else 'missing'}"
                      f" (--prediction takes the -o DIR of python -m hpcio.simulate predict)")
    docs, gaps = {}, []
    for kind, name in FILES.items():
        f = os.path.join(path, name)
        try:
            docs[kind], g = schema.load(f, kind)
        except FileNotFoundError:
            raise Invalid(f"{f}: missing (python -m hpcio.simulate predict ... -o {path} "
                          f"writes it)") from None
        if g:
            gaps.append(schema.gap_line(f, g))
    p, v = docs["prediction"], docs["validation"]
    if not p["points"]:
        raise Invalid(f"{os.path.join(path, FILES['prediction'])}: points: empty")
    return Prediction(os.path.abspath(path),
                      sorted(p["points"], key=lambda x: (x["reader"], x["ranks"])),
                      v["held_out"], v.get("simulated_back") or [],
                      p.get("accelerators_supported"), p.get("fit") or "",
                      p.get("stall_s_per_step") or "", gaps)


def validation_text(pred, reader):
    """What the held-out check says of ``reader``'s curve, in one phrase."""
    h = pred.held_out
    if h is None:
        return "unvalidated (nothing held out: one rank count to calibrate on)"
    rows = [r for r in h["points"] if r["reader"] == reader]
    if not rows:
        return f"unvalidated (no {reader} run at the held-out P={h['held_out_ranks']})"
    on = ", ".join(map(str, h["calibrated_on_ranks"]))
    parts = []
    for r in rows:
        ms = (f" ({1000 * r['simulated_stall_s']:.2f} against "
              f"{1000 * r['measured_stall_s']:.2f} ms per step measured)"
              if "simulated_stall_s" in r and "measured_stall_s" in r else "")
        parts.append(f"stall error {100 * r['stall_err_rel']:+.0f}%{ms}, AU "
                     f"{r['au_err_points']:+.1f} points")
    return (f"held out P={h['held_out_ranks']} (calibrated on P = {on}): "
            + "; ".join(parts))


def short_validation(pred, reader):
    """The held-out errors for a legend: ``stall -30%, AU +3.4 pts`` or ``unvalidated``."""
    h = pred.held_out
    rows = [r for r in h["points"] if r["reader"] == reader] if h else []
    if not rows:
        return "unvalidated"
    return "; ".join(f"held out P={r['ranks']}: stall {100 * r['stall_err_rel']:+.0f}%, "
                     f"AU {r['au_err_points']:+.1f} pts" for r in rows)


def headline(pred):
    """The accelerators-supported sentence, or None when the prediction has none."""
    acc = pred.accelerators
    if not acc:
        return None
    same = len({a["threshold_au_percent"] for a in acc.values()}) == 1
    parts = [f"{reader} " + (f"{a['ranks']:,}" + (" or more" if a.get("at_least") else "")
                             if a["ranks"] else "none of those simulated")
             + ("" if same else f" (AU at or above {a['threshold_au_percent']:g}%)")
             for reader, a in sorted(acc.items())]
    at = f" whose AU stays at or above {next(iter(acc.values()))['threshold_au_percent']:g}%" \
        if same else ""
    return (f"**Accelerators supported** (simulated: the most ranks{at}): "
            + "; ".join(parts) + ".")


def _range(p, key, scale, fmt):
    lo, hi = p.get(f"{key}_lo"), p.get(f"{key}_hi")
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        return "-"
    return f"{fmt.format(scale * lo)}-{fmt.format(scale * hi)}"


def _ms(v):
    return 1000 * v if isinstance(v, (int, float)) else float("nan")


def prediction_table(pred):
    """The simulated points as a table; the CSV carries every field of prediction.json's
    points, the stall in seconds as there."""
    cols = [("reader", "reader", "{}"), ("ranks", "P", "{}"),
            ("stall_ms", "stall ms/step (max rank)", "{:.2f}"),
            ("au_percent", "AU %", "{:.1f}"), ("samples_per_s", "samples/s", "{:,.1f}"),
            ("storage_mib_per_s", "storage MiB/s", "{:,.1f}"),
            ("extrapolated", "extrapolated", "{}"), ("validated", "validated", "{}")]
    if any("stall_s_lo" in p for p in pred.points):
        cols.insert(3, ("stall_range", "near-equal fits' stall ms", "{}"))
        cols.insert(5, ("au_range", "near-equal fits' AU %", "{}"))
    if any(p.get("barrier_s_per_step") is not None for p in pred.points):
        cols.append(("barrier_ms", "barrier ms/step (last rank's wait)", "{:.2f}"))
    if any(p.get("cpu_s_per_sample") is not None for p in pred.points):
        cols.append(("cpu_ms_per_sample", "client CPU ms/sample", "{:.3f}"))
    if any("simulated_back" in p for p in pred.points):
        cols.append(("simulated_back", "a run simulated back", "{}"))
    if any("dominant" in p for p in pred.points):
        cols.append(("dominant", "dominant", "{}"))
    rows = [dict(p, stall_ms=1000 * p["stall_s_per_step"],
                 stall_range=_range(p, "stall_s", 1000, "{:.2f}"),
                 au_range=_range(p, "au_percent", 1, "{:.1f}"),
                 barrier_ms=_ms(p.get("barrier_s_per_step")),
                 cpu_ms_per_sample=_ms(p.get("cpu_s_per_sample"))) for p in pred.points]
    return Table("table-prediction", "Simulated points (hpcio.simulate)", cols, rows,
                 note=f"From {pred.path}/prediction.json. Stall per step: "
                      f"{pred.definition or 'as prediction.json defines it'}. Extrapolated: "
                      f"past the largest rank count the simulation was calibrated on."
                      + (" A run simulated back: a rank count the runs were made at, whose "
                         "point is that run as the validation simulated it back."
                         if any("simulated_back" in p for p in pred.points) else ""))
