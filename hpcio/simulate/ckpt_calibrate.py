"""The checkpoint simulation's unknowns fitted to measured ``hpcio.checkpoint run``
directories, and the fit validated on the rank counts left out.

Two kinds of runs: **client runs** (``--client-runs``: one process writing and reading on
tmpfs, memory-speed storage) give each writer's own cost per byte (its write and read time
over its bytes, the mean of the run's checkpoints); **storage runs** on the platform give,
by least squares on log GiB/s over the runs at the ``--calibrate-on`` rank counts, the
storage's write and read bandwidth per server, one process's stream, the file-system
client's CPU per byte, the per-file create and open and the per-file fsync (a coordinate search over log-spaced values, each step a line of values
simulated at once in one engine). Every run at another rank count is then predicted and its
error printed: the held-out error.
"""

import json
import math
import os
from dataclasses import dataclass, replace

import numpy as np
import yaml

from ..checkpoint.layout import Layout, load_model
from ..errors import HpcioError
from .checkpoint import WriterCost, Case, simulate_cases

__all__ = ["Measured", "load_runs", "medians", "client_costs", "fit", "residuals",
           "summary_errors", "with_writers", "PARAMS"]


@dataclass(frozen=True)
class Measured:
    """One measured run: its layout, writer, shared files, and MLPerf's mean GiB/s of
    its checkpoints (write, read), and the mean seconds."""
    name: str
    layout: Layout
    writer: str
    files: int
    write_gib_s: float
    read_gib_s: float
    write_s: float
    read_s: float
    write_range: tuple = ()     # a point's rounds: (min, max) GiB/s
    read_range: tuple = ()
    rounds: int = 1

    @property
    def ranks(self):
        return self.layout.world


def _one(path):
    try:
        with open(os.path.join(path, "summary.json")) as f:
            s = json.load(f)
        with open(os.path.join(path, "checkpoint.yaml")) as f:
            c = yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise HpcioError(f"{path}: not an hpcio.checkpoint run directory (summary.json and "
                         f"checkpoint.yaml): {e}")
    if s.get("source") != "hpcio.checkpoint" or not s.get("complete"):
        raise HpcioError(f"{path}: not a complete hpcio.checkpoint run")
    lay = c.get("layout") or {}
    model = load_model(c.get("model_config") if c["model"] not in ("llama3_8b", "llama3_70b",
                       "llama3_405b", "llama3_1t") else c["model"])
    m = s["metric"]
    return Measured(os.path.basename(os.path.normpath(path)),
                    Layout(model, int(s["ranks"]), float(lay.get("scale", 1.0))),
                    s["writer"], int((c.get("coordinated") or {}).get("files", 1)),
                    m["save_checkpoint_io_mean_GB_per_second"],
                    m["load_checkpoint_io_mean_GB_per_second"],
                    m["save_checkpoint_duration_mean_seconds"],
                    m["load_checkpoint_duration_mean_seconds"])


def load_runs(paths):
    """Measured runs from run directories, or directories of them (sorted)."""
    out = []
    for p in paths:
        if os.path.isfile(os.path.join(p, "summary.json")):
            out.append(_one(p))
        elif os.path.isdir(p):
            subs = sorted(d for d in os.listdir(p)
                          if os.path.isfile(os.path.join(p, d, "summary.json")))
            if not subs:
                raise HpcioError(f"{p}: no hpcio.checkpoint run directory in it")
            out.extend(_one(os.path.join(p, d)) for d in subs)
        else:
            raise HpcioError(f"{p}: no such run directory")
    return out


def medians(runs):
    """One point per writer, layout and shared files: the median of its rounds' GiB/s
    (and seconds), their range kept (a round slowed by another job on the machine moves the
    median least)."""
    points = {}
    for r in runs:
        points.setdefault((r.writer, r.layout, r.files), []).append(r)
    out = []
    for (writer, layout, files), rs in sorted(points.items(), key=lambda kv: (
            kv[0][1].world, kv[0][0])):
        w = [r.write_gib_s for r in rs]
        rd = [r.read_gib_s for r in rs]
        out.append(Measured(f"{writer}-n{layout.world}", layout, writer, files,
                            float(np.median(w)), float(np.median(rd)),
                            float(np.median([r.write_s for r in rs])),
                            float(np.median([r.read_s for r in rs])),
                            (min(w), max(w)), (min(rd), max(rd)), len(rs)))
    return out


def client_costs(runs):
    """Each writer's own ns per byte (write, read), from one-process runs on memory-speed
    storage: the mean checkpoint time over the rank's bytes, the median over runs."""
    per = {}
    for r in runs:
        if r.ranks != 1:
            raise HpcioError(f"{r.name}: a client run is one process, not {r.ranks}")
        b = r.layout.rank_bytes(0)
        per.setdefault(r.writer, []).append((r.write_s / b * 1e9, r.read_s / b * 1e9))
    return {w: WriterCost(float(np.median([v[0] for v in vs])),
                          float(np.median([v[1] for v in vs]))) for w, vs in per.items()}


#: fitted per phase: name -> (CkptCosts/Platform attribute, unit, start, low, high)
PARAMS = {"write": {"write_bps": (1e6, "MB/s", 200.0, 5.0, 1e5),
                    "process_write_bps": (1e6, "MB/s", 1000.0, 5.0, 1e5),
                    "client_write_ns": (1.0, "ns/B", 0.5, 0.01, 100.0),
                    "create_s": (1e-6, "us", 1000.0, 1.0, 1e5),
                    "fsync_s": (1e-3, "ms", 10.0, 0.01, 1e3)},
          "read": {"server_bps": (1e6, "MB/s", 200.0, 5.0, 1e5),
                   "process_read_bps": (1e6, "MB/s", 1000.0, 5.0, 1e5),
                   "client_read_ns": (1.0, "ns/B", 0.5, 0.01, 100.0),
                   "open_s": (1e-6, "us", 500.0, 1.0, 1e5)}}


def _apply(platform, costs, values):
    """(platform, costs) with ``values`` (name -> value in its unit) set."""
    for name, v in values.items():
        for params in PARAMS.values():
            if name in params:
                scaled = v * params[name][0]
                if name == "server_bps":
                    platform = replace(platform, server_bps=scaled)
                else:
                    costs = replace(costs, **{name: scaled})
    return platform, costs


def _cases(platform, costs, runs, phase):
    return [Case(platform.fit_ranks(r.ranks), costs, r.layout, r.writer, phase, r.files)
            for r in runs]


def _loss(sim, runs, phase):
    meas = [r.write_gib_s if phase == "write" else r.read_gib_s for r in runs]
    return float(sum(math.log(s["GiB_per_s"] / m) ** 2 for s, m in zip(sim, meas)))


def _line(platform, costs, runs, phase, values, name, grid):
    """The loss at each of ``grid``'s values of ``name``, all simulated in one engine."""
    cases = []
    for g in grid:
        p, c = _apply(platform, costs, {**values, name: g})
        cases.extend(_cases(p, c, runs, phase))
    sim = simulate_cases(cases)
    n = len(runs)
    return [_loss(sim[k * n:(k + 1) * n], runs, phase) for k in range(len(grid))]


def fit(platform, costs, runs, sweeps=4, points=17):
    """(platform, costs) with the write and read unknowns fitted to ``runs`` by a
    coordinate search on log scales (each sweep narrows every value's range 4x), and the
    fitted values in their units."""
    fitted = {}
    for phase, params in PARAMS.items():
        values = {k: v[2] for k, v in params.items()}
        span = {k: math.log(v[4] / v[3]) for k, v in params.items()}
        for _ in range(sweeps):
            for name, (_, _, _, lo, hi) in params.items():
                c = math.log(values[name])
                grid = sorted({min(hi, max(lo, math.exp(c + span[name] * (x - 0.5))))
                               for x in np.linspace(0, 1, points)})
                losses = _line(platform, costs, runs, phase, values, name, grid)
                values[name] = grid[int(np.argmin(losses))]
                span[name] /= 4
        fitted.update(values)
    p, c = _apply(platform, costs, fitted)
    return p, c, fitted


def residuals(platform, costs, runs):
    """Per run: measured and simulated write and read GiB/s, the errors, and the limits."""
    sim_w = simulate_cases(_cases(platform, costs, runs, "write"))
    sim_r = simulate_cases(_cases(platform, costs, runs, "read"))
    out = []
    for r, w, rd in zip(runs, sim_w, sim_r):
        out.append({"run": r.name, "writer": r.writer, "ranks": r.ranks, "rounds": r.rounds,
                    "write_range": r.write_range, "read_range": r.read_range,
                    "write_gib_s": r.write_gib_s, "sim_write_gib_s": w["GiB_per_s"],
                    "write_err": w["GiB_per_s"] / r.write_gib_s - 1, "write_limit": w["limit"],
                    "read_gib_s": r.read_gib_s, "sim_read_gib_s": rd["GiB_per_s"],
                    "read_err": rd["GiB_per_s"] / r.read_gib_s - 1, "read_limit": rd["limit"]})
    return out


def summary_errors(rows):
    """Mean absolute error (%) of write and read GiB/s over ``rows``."""
    if not rows:
        return None, None
    return (100 * float(np.mean([abs(r["write_err"]) for r in rows])),
            100 * float(np.mean([abs(r["read_err"]) for r in rows])))


def with_writers(costs, writers):
    return replace(costs, writers={**costs.writers, **writers})
