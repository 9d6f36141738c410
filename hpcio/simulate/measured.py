"""The measured-costs file (``python -m hpcio.simulate bench -o``): what the node measured
that a prediction hangs on, each figure with its definition and its spread over repeats,
written and read back here only, so ``calibrate --costs`` takes what ``bench`` wrote.

A figure is ``{median, min, max, repeats: [...]}``; its unit is in its key (``_us``,
``_ms_per_mib``). Calibration replaces a grid axis by a figure's min, median and max (the
quartiles of its repeats, where several bench runs pooled give at least five), so the
near-equal fits span only what measurement leaves open (:func:`pinned`).
"""

import math

import numpy as np
import yaml

from ..errors import HpcioError
from ..fsutil import atomic_write

__all__ = ["FORMAT", "READER_FIGURES", "PLATFORM_FIGURES", "figure", "write_costs", "load_costs",
           "pinned", "check_costs", "check_keys", "merge_costs"]

FORMAT = 1
#: per reader: key -> (what calibration pins with it, seconds per unit of the key)
READER_FIGURES = {"cpu_us_per_sample": ("cpu_s", 1e-6),
                  "cpu_ms_per_mib": ("cpu_s_per_byte", 1e-3 / 2 ** 20),
                  "outside_cpu_ms_per_mib": ("cpu_s_per_byte_outside", 1e-3 / 2 ** 20)}
#: the storage's and the node's: section -> key -> (platform attribute pinned, seconds
#: per unit)
PLATFORM_FIGURES = {"storage": {"latency_us": ("latency_s", 1e-6)},
                    "node": {"run_queue_quantum_ms": ("cpu_quantum_s", 1e-3)}}
#: every figure: median, min, max (and the repeats they summarise)
PARTS = ("median", "min", "max")
#: repeats from which an axis takes the quartiles rather than min, median, max
QUARTILES_FROM = 5


def figure(values, nd=3):
    """``values`` (one per repeat) as a figure: median, min, max and the repeats (None
    where one did not measure it), rounded to ``nd`` decimals; None when none did."""
    each = [float(x) if x is not None and math.isfinite(x) else None for x in values]
    v = sorted(x for x in each if x is not None)
    if not v:
        return None
    n = len(v)
    med = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return {"median": round(med, nd), "min": round(v[0], nd), "max": round(v[-1], nd),
            "repeats": [None if x is None else round(x, nd) for x in each]}


def write_costs(path, costs):
    """``costs`` (as :func:`check_costs` takes it) as YAML at ``path``, atomically."""
    data = yaml.safe_dump(dict(costs, hpcio_costs=FORMAT), sort_keys=False).encode()
    atomic_write(path, lambda f: f.write(data))


def _figure_ok(path, key, v):
    if not isinstance(v, dict):
        raise HpcioError(f"{path}: {key}: not a figure (median, min, max), got {v!r}")
    got = {}
    for p in PARTS:
        x = v.get(p)
        if not _number(x):
            raise HpcioError(f"{path}: {key}.{p}: not a number >= 0 ({x!r})")
        got[p] = float(x)
    if not got["min"] <= got["median"] <= got["max"]:
        raise HpcioError(f"{path}: {key}: min <= median <= max does not hold "
                         f"({got['min']:g}, {got['median']:g}, {got['max']:g})")
    reps = v.get("repeats") or []
    if not isinstance(reps, list) or not all(x is None or _number(x) for x in reps):
        raise HpcioError(f"{path}: {key}.repeats: not a list of numbers >= 0 (or null)")
    got["repeats"] = [float(x) for x in reps if x is not None]
    return got


def _number(x):
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) \
        and x >= 0


def check_costs(d, path="costs"):
    """The costs file's content ``d`` checked: {"readers": {label: {key: figure}},
    "storage": {key: figure}, "node": {key: figure}}, figures as (median, min, max) floats;
    HpcioError in one line naming the key otherwise."""
    if not isinstance(d, dict) or d.get("hpcio_costs") != FORMAT:
        raise HpcioError(f"{path}: hpcio_costs: not a measured-costs file of format {FORMAT} "
                         f"(write one with python -m hpcio.simulate bench -o)")
    out = {"readers": {}}
    readers = d.get("readers") or {}
    if not isinstance(readers, dict):
        raise HpcioError(f"{path}: readers: not a mapping of reader to figures")
    for r, figs in readers.items():
        if not isinstance(figs, dict):
            raise HpcioError(f"{path}: readers.{r}: not a mapping of figures")
        out["readers"][r] = {k: _figure_ok(path, f"readers.{r}.{k}", figs[k])
                             for k in READER_FIGURES if figs.get(k) is not None}
    for sec, known in PLATFORM_FIGURES.items():
        got = d.get(sec) or {}
        if not isinstance(got, dict):
            raise HpcioError(f"{path}: {sec}: not a mapping of figures")
        out[sec] = {k: _figure_ok(path, f"{sec}.{k}", got[k]) for k in known
                    if got.get(k) is not None}
    if not any(out["readers"].values()) and not any(out[s] for s in PLATFORM_FIGURES):
        raise HpcioError(f"{path}: readers, storage, node: no measured figure to calibrate "
                         f"with")
    return out


def load_costs(path):
    """The checked content of a costs file (:func:`check_costs`)."""
    try:
        with open(path) as f:
            d = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise HpcioError(f"{path}: cannot read the measured costs: "
                         f"{getattr(e, 'strerror', None) or str(e).splitlines()[0]}")
    return check_costs(d, path)


def merge_costs(each):
    """Several checked costs files (bench runs at different times) as one: each figure's
    spread the envelope of theirs (least min, greatest max), its median the median of
    theirs, so a calibration spans what the node measured at every one of them."""
    if len(each) == 1:
        return each[0]

    def merged(figs):
        meds = sorted(f["median"] for f in figs)
        n = len(meds)
        return {"median": meds[n // 2] if n % 2 else (meds[n // 2 - 1] + meds[n // 2]) / 2,
                "min": min(f["min"] for f in figs), "max": max(f["max"] for f in figs),
                "repeats": [x for f in figs for x in f.get("repeats", [])]}
    out = {"readers": {}}
    for r in {r for c in each for r in c["readers"]}:
        keys = {k for c in each for k in c["readers"].get(r, {})}
        out["readers"][r] = {k: merged([c["readers"][r][k] for c in each
                                        if k in c["readers"].get(r, {})]) for k in keys}
    for sec in PLATFORM_FIGURES:
        keys = {k for c in each for k in c.get(sec, {})}
        out[sec] = {k: merged([c[sec][k] for c in each if k in c.get(sec, {})])
                    for k in keys}
    return out


def _axis(fig, unit):
    """A figure as a grid axis: the quartiles of its repeats (min, 25%, median, 75%, max:
    several bench runs pooled) where it has at least :data:`QUARTILES_FROM`, else its min,
    median and max."""
    reps = fig.get("repeats") or []
    if len(reps) >= QUARTILES_FROM:
        return sorted({float(v) * unit for v in np.percentile(reps, [0, 25, 50, 75, 100])})
    return sorted({fig[p] * unit for p in PARTS})


def pinned(costs, keys=None):
    """What calibration takes from measured ``costs`` (only the figures named in ``keys``,
    e.g. ``cpu_ms_per_mib``, ``latency_us``; None: all): ({reader: {param: values}},
    {platform attribute: values}), each axis in seconds (per sample, per byte, per request,
    per quantum) as :func:`_axis` makes it."""
    use = (lambda k: True) if keys is None else (lambda k: k in keys)
    readers = {r: {READER_FIGURES[k][0]: _axis(f, READER_FIGURES[k][1])
                   for k, f in figs.items() if use(k)}
               for r, figs in costs["readers"].items()}
    platform = {known[k][0]: _axis(f, known[k][1]) for sec, known in PLATFORM_FIGURES.items()
                for k, f in costs.get(sec, {}).items() if use(k)}
    return {r: v for r, v in readers.items() if v}, platform


def check_keys(text):
    """``--pin``'s comma-separated figure names, each one the costs file may hold."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    known = list(READER_FIGURES) + [k for v in PLATFORM_FIGURES.values() for k in v]
    for k in keys:
        if k not in known:
            raise HpcioError(f"--pin {k}: not a measured figure (one of {', '.join(known)})")
    return set(keys)
