"""The calibration file (``python -m hpcio.simulate calibrate -o``): the fitted platform
with each reader's costs, written and read back here only, so ``predict --reader-costs`` takes
what ``calibrate`` wrote."""

import os

import yaml

from ..errors import HpcioError
from ..fsutil import atomic_write
from .platform import platform_dict

__all__ = ["write_calibration", "load_readers", "is_calibration"]


def write_calibration(path, fit, runs, costs_file=None):
    """The fit as a platform YAML with ``readers`` (each one's costs) and
    ``calibrated_on`` (the run directories), atomically; with ``costs_file`` (``--costs``'s,
    a list), which costs it measured and which the grids fitted (``costs``)."""
    more = {}
    if costs_file:
        more["costs"] = {"files": [os.path.abspath(c) for c in costs_file], **fit.sources}
    d = platform_dict(fit.platform, readers={
        r: dict(_costs(v), near=_near_costs(fit.near.get(r) or [], v))
        for r, v in fit.params.items()}, calibrated_on=[os.path.abspath(d) for d in runs],
        tolerance_ms=fit.tolerance_s * 1e3, **more)
    data = yaml.safe_dump(d, sort_keys=False).encode()
    atomic_write(path, lambda f: f.write(data))


def _costs(v):
    return {"cpu_us_per_sample": v["cpu_s"] * 1e6,
            "cpu_ms_per_mib": round(v.get("cpu_s_per_byte", 0.0) * 1e3 * 2 ** 20, 3),
            "window_kib": (v["window"] or 0) // 1024}


def _near_costs(near, best):
    """The reader's costs of its near-equal fits, each once, the best's left out: what a
    prediction on another platform (its storage described, not fitted) ranges over."""
    out, seen = [], {tuple(_costs(best).items())}
    for n in near:
        c = _costs(n["params"])
        if tuple(c.items()) not in seen:
            seen.add(tuple(c.items()))
            out.append({k: c[k] for k in ("cpu_us_per_sample", "cpu_ms_per_mib")})
    return out


def is_calibration(path):
    """Whether ``path`` holds what :func:`write_calibration` writes (readers' costs and
    the runs they were fitted on): an earlier calibration may be replaced."""
    with open(path) as f:
        d = yaml.safe_load(f)
    return isinstance(d, dict) and isinstance(d.get("readers"), dict) and \
        "calibrated_on" in d


def load_readers(path):
    """Each reader's fitted costs from ``calibrate -o``'s YAML: ({label: {"best": params,
    "near": [params, the best's first]}}, runs)."""
    try:
        with open(path) as f:
            d = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise HpcioError(f"{path}: cannot read the calibration: "
                         f"{getattr(e, 'strerror', None) or str(e).splitlines()[0]}")
    rd = d.get("readers") if isinstance(d, dict) else None
    if not isinstance(rd, dict) or not rd:
        raise HpcioError(f"{path}: no readers section (write one with hpcio.simulate "
                         f"calibrate -o)")
    out = {}
    for r, v in rd.items():
        try:
            cpu, win = float(v["cpu_us_per_sample"]), int(v["window_kib"])
            per_mib = float(v.get("cpu_ms_per_mib", 0))
        except (TypeError, KeyError, ValueError, AttributeError):
            raise HpcioError(f"{path}: readers.{r} needs cpu_us_per_sample and window_kib")
        if cpu < 0 or win < 0 or per_mib < 0:
            raise HpcioError(f"{path}: readers.{r}: negative cost")
        best = {"cpu_s": cpu * 1e-6, "window": win * 1024 or None,
                "cpu_s_per_byte": per_mib * 1e-3 / 2 ** 20}
        near = [best]
        for k, n in enumerate(v.get("near") or []):
            try:
                c, m = float(n["cpu_us_per_sample"]), float(n["cpu_ms_per_mib"])
            except (TypeError, KeyError, ValueError):
                raise HpcioError(f"{path}: readers.{r}.near[{k}] needs cpu_us_per_sample and "
                                 f"cpu_ms_per_mib")
            if c < 0 or m < 0:
                raise HpcioError(f"{path}: readers.{r}.near[{k}]: negative cost")
            near.append(dict(best, cpu_s=c * 1e-6, cpu_s_per_byte=m * 1e-3 / 2 ** 20))
        out[r] = {"best": best, "near": near}
    return out, d.get("calibrated_on") or []
