"""``python -m hpcio.simulate published``: MLPerf Storage v3.0's published training results
predicted from the submitted systems' descriptions alone.

Each submission is a platform file under ``platforms/published/`` (this package's data): the
clients, their logical CPUs and network links, the storage servers and their bandwidth, every
value with its source (the result tree's system YAML or run ``summary.json``, or a stated
assumption) in a comment on its line. ``published.csv`` there holds what was published for
each (accelerators, AU, GiB/s) with the ``summary.json`` it comes from. The prediction
simulates DLIO as MLPerf Storage runs it (:data:`WORKLOADS`, the v3.0 configs): per
accelerator a rank whose ``read_threads`` loader workers each fetch a batch's files whole and
decode them on the client's CPUs, at most ``prefetch_factor x read_threads`` batches ahead,
the step's ``computation_time``, then DLIO's ``comm.barrier()``. The client CPU per sample is
DLIO's own, measured here by ``benchmarks/bench_dlio_cpu.py`` (``dlio_cpu.json``), the same
for every system. The answer is the most accelerators whose steady-state AU stays at the
workload's threshold, on the published number of clients, and the limit that stops one more:
storage, network, client CPU (the node's, or a rank's read threads) or the barrier.
"""

import csv
import io
import json
import math
import os
import time
from dataclasses import dataclass, replace

import numpy as np
import yaml

from ..errors import HpcioError
from ..fsutil import atomic_write
from ..readers.base import pattern
from .engine import Case, simulate
from .platform import parse_platform
from .workload import Workload

__all__ = ["WORKLOADS", "DlioWorkload", "check_sources", "load_described", "load_table",
           "load_cpu", "predict", "table", "add_parser", "DATA"]

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "platforms", "published")
TABLE = os.path.join(DATA, "published.csv")
DLIO_CPU = os.path.join(DATA, "dlio_cpu.json")
COLUMNS = ("system", "org", "workload", "accelerator", "clients", "accelerators",
           "au_percent", "throughput_gib_s", "platform", "summary", "description")


@dataclass(frozen=True)
class DlioWorkload:
    """One MLPerf Storage v3.0 training config as DLIO runs it."""
    name: str
    accelerator: str
    batch: int
    compute_s: float
    record_bytes: int
    read_threads: int
    au_percent: float
    source: str
    prefetch_factor: int = 2    # PyTorch DataLoader's default, which DLIO keeps (prefetch_size 0)

    @property
    def demand_bps(self):
        """Bytes per second one accelerator reads at 100% AU."""
        return self.batch / self.compute_s * self.record_bytes


#: (workload, accelerator) -> its config (mlcommons/storage configs/dlio/workload/*.yaml)
WORKLOADS = {
    ("unet3d", "b200"): DlioWorkload("unet3d", "b200", 7, 0.162, 146_600_628, 4, 90.0,
                                     "mlcommons/storage configs/dlio/workload/unet3d_b200.yaml"),
    ("retinanet", "b200"): DlioWorkload(
        "retinanet", "b200", 24, 0.04755, 322_957, 8, 85.0,
        "mlcommons/storage configs/dlio/workload/retinanet_b200.yaml"),
}

STEADY_STEPS = 32   # steps simulated past the loaders' warm-up (2 x batches in flight)


@pattern("dlio", "workers")
def dlio_requests(w, platform, params, ids):
    """DLIO's readers open each sample's file and read it whole: one request per record, to
    the server that holds it."""
    ids = np.asarray(ids, dtype=np.int64)
    srv = np.atleast_1d(platform.server_of(ids * w.record_bytes, w.records * w.record_bytes))
    return srv.astype(np.int64), np.full(len(ids), float(w.record_bytes))


def check_sources(path, text):
    """Every value of a platform file that describes a published system carries its source
    as a comment on its own line; HpcioError names the first key without one."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        raise HpcioError(f"{path}: not YAML ({str(e).splitlines()[0]})")
    lines = text.splitlines()

    def walk(node, where):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                walk(v, f"{where}.{k.value}" if where else str(k.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, f"{where}[{i}]")
        else:
            end = node.end_mark
            if "#" not in lines[end.line][end.column:]:
                raise HpcioError(f"{path}: {where} has no source (a comment on its line "
                                 f"saying where the value comes from)")
    walk(root, "")


def sourced_text(path):
    """A published system's platform file's text, every value's source checked."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise HpcioError(f"{path}: cannot read the platform: {e.strerror}")
    check_sources(path, text)
    return text


def load_described(path):
    """(Platform, its ``published`` section) of a published system's platform file, its
    sources checked first."""
    d = yaml.safe_load(sourced_text(path))
    if not isinstance(d, dict) or not isinstance(d.get("published"), dict):
        raise HpcioError(f"{path}: no published section (the description it comes from)")
    return parse_platform(d, path), d["published"]


def read_table(path, columns, optional=()):
    """A published table's rows (CSV), each with every one of ``columns`` but ``optional``
    filled; else one line naming the row and the empty columns."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise HpcioError(f"{path}: cannot read the published table: {e.strerror}")
    for i, r in enumerate(rows, 2):
        missing = [c for c in columns if c not in optional and not (r.get(c) or "").strip()]
        if missing:
            raise HpcioError(f"{path}:{i}: {', '.join(missing)} empty")
    return rows


def load_table(path=TABLE):
    """The published rows (``published.csv``), each checked for its columns."""
    out = []
    for i, r in enumerate(read_table(path, COLUMNS), 2):
        if (r["workload"], r["accelerator"]) not in WORKLOADS:
            raise HpcioError(f"{path}:{i}: no DLIO config for {r['workload']} on "
                             f"{r['accelerator']} (have {sorted(WORKLOADS)})")
        try:
            out.append(dict(r, clients=int(r["clients"]), accelerators=int(r["accelerators"]),
                            au_percent=float(r["au_percent"]),
                            throughput_gib_s=float(r["throughput_gib_s"])))
        except ValueError as e:
            raise HpcioError(f"{path}:{i}: {e}")
    return out


@dataclass(frozen=True)
class DlioCpu:
    """DLIO's client CPU for one workload, measured here (``bench_dlio_cpu.py``)."""
    per_sample: float       # s: everything DLIO's loader and step loop spend per sample
    read_per_byte: float    # s/B: of which reading the file's bytes (the copy into a buffer)

    def split(self, record_bytes):
        """(s per sample after the bytes are in: decoding and the loader's own work,
        s per byte copied while they arrive)."""
        read = min(self.per_sample, self.read_per_byte * record_bytes)
        return self.per_sample - read, read / record_bytes


def load_cpu(path=DLIO_CPU):
    """{workload: DlioCpu} as ``bench_dlio_cpu.py`` measured them."""
    try:
        with open(path) as f:
            d = json.load(f)
        return {k: DlioCpu(float(v["cpu_s_per_sample"]), float(v["read_s_per_byte"]))
                for k, v in d["workloads"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise HpcioError(f"{path}: no DLIO CPU per sample ({e}); run "
                         f"benchmarks/bench_dlio_cpu.py --json {path}")


def _case(platform, wl, n, clients, cpu):
    """``n`` accelerators on ``clients`` nodes (ranks spread evenly, the busiest node holding
    ceil(n / clients): as mpirun's round-robin, every node at the busiest one's pace behind
    the barrier)."""
    rpn = -(-n // clients)
    ahead = wl.prefetch_factor * wl.read_threads
    steps = 2 * ahead + STEADY_STEPS
    p = replace(platform, nodes=clients, ranks_per_node=rpn)
    w = Workload(name=f"{wl.name}-{n}", reader="dlio", ranks=n, batch=wl.batch, steps=steps,
                 records=n * wl.batch * steps, record_bytes=float(wl.record_bytes),
                 shuffle="global", seed=0, compute_s=wl.compute_s, rest_s=0.0, sync=True,
                 prefetch=wl.read_threads, steady_steps=1, faults_per_sample=float("nan"),
                 dataset="mlperf-storage", ahead=ahead)
    sample_s, byte_s = cpu.split(wl.record_bytes)
    return Case(p, w, {"cpu_s": sample_s, "cpu_s_per_byte": byte_s, "copy_overlaps": True,
                       "window": wl.record_bytes + 1})


def _figures(case, out, wl, cpu):
    """Steady-state AU, samples/s and each resource's use from one simulated case (the first
    2 x batches-in-flight steps left out: the loaders' warm-up)."""
    c, p, w = out["columns"], case.platform, case.workload
    warm = 2 * w.ahead
    wall, comp = c["wall"][:, warm:], c["compute"][:, warm:]
    t = float(wall.sum(axis=1).mean())
    au = 100.0 * float(np.mean(comp.sum(axis=1) / wall.sum(axis=1)))
    samples_s = w.ranks * w.batch * wall.shape[1] / t
    end = out["end_s"]
    nodes = -(-w.ranks // p.ranks_per_node)
    use = {
        "storage": float(out["server_bytes"].max()) / end / p.server_bps,
        "network": out["bytes"] / nodes / end / p.nic_bps,
        "client CPU": w.ranks * w.batch * w.steps * cpu.per_sample / end
        / (nodes * p.node_cores),
        "client CPU (read threads)": w.batch * w.steps * cpu.per_sample / end
        / wl.read_threads,
        "barrier": float(c["straggler"][:, warm:].sum() / c["wall"][:, warm:].sum()),
    }
    return {"au_percent": au, "samples_per_s": samples_s,
            "gib_s": samples_s * wl.record_bytes / 2 ** 30, "use": use}


def _run(platform, wl, ns, clients, cpu):
    cases = [_case(platform, wl, n, clients, cpu) for n in ns]
    return {n: _figures(k, o, wl, cpu) for n, k, o in zip(ns, cases, simulate(cases))}


def bound(platform, wl, clients, cpu):
    """The most accelerators the described limits could hold at the AU threshold (storage,
    the clients' links and CPUs; a fluid bound the simulation then searches below)."""
    thr, cpu_s = wl.au_percent / 100, cpu.per_sample
    per = thr * wl.demand_bps
    rate = thr * wl.batch / wl.compute_s       # samples/s one accelerator asks for
    # the busiest client holds ceil(n / clients) ranks: its link and its CPUs must carry them
    caps = [int(platform.servers * platform.server_bps / per),
            clients * int(platform.nic_bps / per),
            clients * int(platform.node_cores / (rate * cpu_s)) if cpu_s else math.inf]
    if cpu_s and wl.read_threads / cpu_s < rate:
        return 0
    return max(1, min(caps))


def predict(platform, wl, clients, cpu, at=None):
    """The most accelerators whose simulated AU stays at the workload's threshold on
    ``clients`` nodes, their figures, the limit that stops one more, and the figures at
    ``at`` accelerators (the published count) too."""
    thr = wl.au_percent
    seen = {}

    def passes(*ns):
        todo = [n for n in ns if n not in seen and n >= 1]
        if todo:
            seen.update(_run(platform, wl, todo, clients, cpu))
        return [seen[n]["au_percent"] >= thr for n in ns]

    ub = bound(platform, wl, clients, cpu)
    lo, hi = 0, None
    if ub >= 1:
        ok_ub, ok_next = passes(ub, ub + 1)
        if ok_ub and not ok_next:
            lo, hi = ub, ub + 1
        elif ok_ub:
            lo, step = ub + 1, 2
            while passes(lo + step)[0]:
                lo, step = lo + step, step * 2
            hi = lo + step
        else:
            hi, step = ub, 1
            while hi - step >= 1 and not passes(hi - step)[0]:
                hi, step = hi - step, step * 2
            lo = max(0, hi - step)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if passes(mid)[0] else (lo, mid)
    else:
        hi = 1
        passes(1)
    fail = seen[hi]
    limit = max(fail["use"], key=fail["use"].get)
    res = {"accelerators": lo, "limit": limit, "use_past": fail["use"],
           "at_supported": seen.get(lo), "simulations": len(seen)}
    if at:
        res["at_published"] = seen.get(at) or _run(platform, wl, [at], clients, cpu)[at]
    return res


def _rel(a, b):
    return (a - b) / b if b else float("nan")


def table(rows, cpu, data=DATA, progress=None):
    """Per published row: the prediction beside the published figures."""
    # every file checked before the first simulation: a bad one is said in a second
    platforms = [load_described(os.path.join(data, r["platform"]))[0] for r in rows]
    missing = sorted({r["workload"] for r in rows} - set(cpu))
    if missing:
        raise HpcioError(f"no DLIO CPU per sample measured for {', '.join(missing)}")
    out = []
    for r, platform in zip(rows, platforms):
        if progress:
            progress(r)
        wl = WORKLOADS[(r["workload"], r["accelerator"])]
        p = predict(platform, wl, r["clients"], cpu[wl.name], at=r["accelerators"])
        sup = p["at_supported"]
        out.append({
            "system": r["system"], "org": r["org"], "workload": wl.name,
            "accelerator": wl.accelerator, "clients": r["clients"],
            "published_accelerators": r["accelerators"],
            "predicted_accelerators": p["accelerators"],
            "accelerators_err": _rel(p["accelerators"], r["accelerators"]),
            "published_gib_s": r["throughput_gib_s"],
            "predicted_gib_s_at_published": p["at_published"]["gib_s"],
            "gib_s_err": _rel(p["at_published"]["gib_s"], r["throughput_gib_s"]),
            "predicted_gib_s_at_predicted": sup["gib_s"] if sup else 0.0,
            "predicted_au_at_published": p["at_published"]["au_percent"],
            "published_au": r["au_percent"], "limit": p["limit"],
            "simulations": p["simulations"]})
    return out


def text_table(res, markdown=False):
    """The comparison as aligned text, or a Markdown table."""
    head = ["system", "workload", "clients", "acc. published", "acc. predicted", "err",
            "GiB/s published", "GiB/s predicted", "err", "limit"]
    body = [[r["system"], r["workload"], str(r["clients"]), str(r["published_accelerators"]),
             str(r["predicted_accelerators"]), f"{100 * r['accelerators_err']:+.0f}%",
             f"{r['published_gib_s']:.1f}", f"{r['predicted_gib_s_at_published']:.1f}",
             f"{100 * r['gib_s_err']:+.0f}%", r["limit"]] for r in res]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body]) + "\n"
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:{'<' if i in (0, 1, 9) else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*x) for x in [head] + body) + "\n"


def summary_line(res, within=0.15):
    good = [r for r in res if abs(r["accelerators_err"]) <= within]
    return (f"{len(good)} of {len(res)} systems within {100 * within:.0f}% of the published "
            f"accelerators supported")


def _write_csv(path, res):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(res[0]), lineterminator="\n")
    w.writeheader()
    for r in res:
        w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()})
    data = buf.getvalue().encode()
    atomic_write(path, lambda f: f.write(data))


def _main(args):
    rows = load_table(args.table)
    if args.only:
        wanted = set(args.only)
        rows = [r for r in rows if r["system"] in wanted]
        unknown = wanted - {r["system"] for r in rows}
        if unknown:
            raise HpcioError(f"--only: no published row for {', '.join(sorted(unknown))}")
    t0 = time.perf_counter()
    cpu = load_cpu(args.cpu)
    print("DLIO's CPU per sample (measured here, benchmarks/bench_dlio_cpu.py): "
          + ", ".join(f"{k} {v.per_sample * 1e3:.1f} ms (of which reading the file "
                      f"{v.read_per_byte * WORKLOADS[(k, 'b200')].record_bytes * 1e3:.1f} ms, "
                      f"overlapped with its transfer)" for k, v in sorted(cpu.items())),
          flush=True)
    res = table(rows, cpu, os.path.dirname(os.path.abspath(args.table)),
                progress=lambda r: print(f"  simulating {r['system']} ({r['workload']}) ...",
                                         flush=True))
    print(text_table(res), end="")
    print(summary_line(res))
    print(f"{sum(r['simulations'] for r in res)} simulated runs in "
          f"{time.perf_counter() - t0:.0f} s")
    if args.output:
        _write_csv(args.output, res)
        print(f"wrote {args.output}")
    if args.markdown:
        data = text_table(res, markdown=True).encode()
        atomic_write(args.markdown, lambda f: f.write(data))
        print(f"wrote {args.markdown}")
    return 0


def add_parser(sub):
    """``published``, as a subcommand of ``python -m hpcio.simulate``."""
    p = sub.add_parser("published", help="predict MLPerf Storage's published training results "
                       "from the systems' descriptions",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--table", default=TABLE,
                   help="published rows (CSV; default: the package's published.csv); "
                        "platform paths in it are relative to its folder")
    p.add_argument("--only", nargs="+", metavar="SYSTEM", help="just these systems")
    p.add_argument("--cpu", default=DLIO_CPU,
                   help="DLIO's CPU per sample (benchmarks/bench_dlio_cpu.py --json)")
    p.add_argument("-o", "--output", metavar="CSV", help="write the comparison here")
    p.add_argument("--markdown", metavar="MD", help="write the comparison as a Markdown table")
    p.set_defaults(func=_main)
    return p
