"""``python -m hpcio.sweep``: one ``hpcio.train`` job per point of a sweep (ranks x reader x
data x reader option), repeats interleaved, into one sweep directory.

    python -m hpcio.sweep --data /mnt/pfs/inet --ranks 1,2,4,8 --reader naive,coordinated \\
        --repeat 3 --out sweeps/pfs -- --model emulate --compute-time 0.02 --batch 16
    python -m hpcio.sweep analysis/lmdbio-scaling/sweep.yaml      # the same from a spec

Every point is its own job (``--launcher``, default the ``mpiexec`` beside this Python; or
``'srun --mpi=pmi2'`` inside an allocation), with a cold cache unless the train options say
otherwise. Repeats are interleaved (every point once, then again), so a slow minute of a
shared machine hits all points alike. ``sweep.json`` in the sweep directory lists every
run with its point, run directory, status and, for a failed run, its error line; it is
rewritten atomically after each run. Rerunning the same command resumes: runs already
done are skipped, failed ones are tried again in a new run directory.

Options after ``--`` (or any option this command does not know) go to every
``hpcio.train`` job. A spec file holds the same keys as the options (``ranks``,
``reader``, ``data``, ``reader_option``, ``repeat``, ``launcher``, ``darshan``, ``out``)
and ``train`` (a mapping or list of train options); flags given here override it.
"""

import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from .cli import ArgumentParser, load_config
from .errors import HpcioError, guard
from .fsutil import atomic_json
from .mpiutil import launcher

__all__ = ["Point", "points", "build_parser", "main"]

SWEEP = "sweep.json"


@dataclass(frozen=True)
class Point:
    """One configuration of the sweep, run ``repeat`` times."""

    data: str
    reader: str
    ranks: int
    reader_option: str = ""

    @property
    def name(self):
        opt = f"-{self.reader_option.replace('=', '_')}" if self.reader_option else ""
        return f"{os.path.basename(os.path.normpath(self.data))}-{self.reader}{opt}-n{self.ranks}"


def points(data, readers, ranks, reader_options=("",)):
    """Every combination, in a fixed order (data, reader option, reader, ranks)."""
    return [Point(d, r, n, o) for d, o, r, n in
            itertools.product(data, reader_options or ("",), readers, ranks)]


def _ints(text):
    try:
        out = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise HpcioError(f"--ranks {text!r}: expected a comma-separated list of integers",
                         everywhere=True)
    if not out or min(out) < 1:
        raise HpcioError(f"--ranks {text!r}: every rank count must be >= 1", everywhere=True)
    return out


def _words(text):
    return [v.strip() for v in str(text).split(",") if v.strip()]


def build_parser():
    p = ArgumentParser(prog="python -m hpcio.sweep", description=__doc__.split("\n\n")[0],
                       epilog="Options after -- go to every hpcio.train job.")
    p.add_argument("spec", nargs="?", help="sweep spec (YAML); flags override it")
    p.add_argument("--data", nargs="+", help="dataset directories")
    p.add_argument("--ranks", default=None, help="rank counts, e.g. 1,2,4,8")
    p.add_argument("--reader", default=None, help="readers, e.g. naive,coordinated")
    p.add_argument("--reader-option", action="append", default=None, metavar="KEY=VALUE",
                   help="a reader option to sweep over (repeatable: one point each)")
    p.add_argument("--repeat", type=int, default=None, help="runs per point (default 1)")
    p.add_argument("--launcher", default=None,
                   help="MPI launcher (default: the mpiexec beside this Python), e.g. "
                        "'srun --mpi=pmi2'")
    p.add_argument("--darshan", metavar="LIB", default=None,
                   help="trace every run with this libdarshan.so (hpcio.train --darshan)")
    p.add_argument("--out", default=None, help="sweep directory (default: runs/sweep-<time>)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and stop")
    return p


def _settings(argv):
    """The sweep's settings: spec file, then flags; unknown options go to hpcio.train."""
    if "--" in argv:
        k = argv.index("--")
        argv, extra = argv[:k], argv[k + 1:]
    else:
        extra = []
    a, unknown = build_parser().parse_known_args(argv)
    spec = load_config(a.spec) if a.spec else {}
    known = {"ranks", "reader", "data", "reader_option", "repeat", "launcher", "darshan",
             "out", "train"}
    bad = sorted(set(spec) - known)
    if bad:
        raise HpcioError(f"spec {a.spec}: unknown key(s): {', '.join(bad)}", everywhere=True)

    def pick(name, default=None):
        v = getattr(a, name)
        return v if v is not None else spec.get(name, default)

    train = spec.get("train") or []
    if isinstance(train, dict):
        train = [x for k, v in train.items() for x in _flag(k, v)]
    elif isinstance(train, str):
        train = shlex.split(train)
    data = pick("data")
    if isinstance(data, str):
        data = [data]
    if not data:
        raise HpcioError("--data DIR... is required (or data: in the spec)", everywhere=True)
    ranks = _ints(",".join(map(str, pick("ranks")))) if isinstance(pick("ranks"), list) \
        else _ints(pick("ranks", "1"))
    readers = pick("reader", "naive,coordinated")
    readers = readers if isinstance(readers, list) else _words(readers)
    ropts = pick("reader_option", [""]) or [""]
    ropts = [ropts] if isinstance(ropts, str) else list(ropts)
    repeat = int(pick("repeat", 1))
    if repeat < 1:
        raise HpcioError("--repeat must be at least 1", everywhere=True)
    return {"data": [os.path.abspath(d) for d in data], "ranks": ranks, "readers": readers,
            "reader_options": ropts, "repeat": repeat,
            "launcher": pick("launcher") or launcher(), "darshan": pick("darshan"),
            "out": pick("out") or os.path.join("runs", time.strftime("sweep-%Y%m%d-%H%M%S")),
            "train": [str(x) for x in train] + unknown + extra, "dry_run": a.dry_run}


def _flag(key, value):
    """A spec's ``train:`` mapping entry as command-line words."""
    opt = "--" + str(key).replace("_", "-")
    if value is True:
        return [opt]
    if value is False or value is None:
        return []
    if isinstance(value, list):
        return [w for v in value for w in (opt, str(v))]
    return [opt, str(value)]


def _option(train, name):
    """The value of ``--name`` among the train words, or None."""
    for k, w in enumerate(train):
        if w == name and k + 1 < len(train):
            return train[k + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def _command(s, point, run_dir):
    words = shlex.split(s["launcher"]) + ["-n", str(point.ranks), sys.executable, "-m",
                                          "hpcio.train", "--data", point.data, "--reader",
                                          point.reader, "--out", run_dir]
    if _option(s["train"], "--cache") is None:
        words += ["--cache", "cold"]
    if point.reader_option:
        words += ["--reader-option", point.reader_option]
    if s["darshan"]:
        words += ["--darshan", s["darshan"]]
    return words + s["train"]


def _last_error(stderr):
    lines = [ln for ln in stderr.splitlines() if ln.startswith("hpcio.")]
    if lines:
        return lines[0]
    tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return tail[-1] if tail else "failed with no message"


def _figures(run_dir):
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            m = json.load(f).get("metrics") or {}
    except (OSError, ValueError):
        return {}
    return {k: m.get(k) for k in ("au_percent", "stall_percent", "straggler_wait_percent",
                                  "samples_per_s", "mib_per_s")}


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise HpcioError(f"{path}: unreadable sweep record ({e}); move it away to start over")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    s = _settings(argv)
    pts = points(s["data"], s["readers"], s["ranks"], s["reader_options"])
    out = os.path.abspath(s["out"])
    cores = os.cpu_count() or 1
    emulate = _option(s["train"], "--model") == "emulate"
    over = [p.ranks for p in pts if p.ranks > cores]
    if over and not emulate:
        raise HpcioError(f"{max(over)} ranks on {cores} cores: only emulated compute "
                         f"(--model emulate) may oversubscribe the cores", everywhere=True)
    todo = [(rep, p) for rep in range(s["repeat"]) for p in pts]
    if s["dry_run"]:
        for rep, p in todo:
            print(" ".join(shlex.quote(w) for w in _command(
                s, p, os.path.join(out, "runs", f"{p.name}-r{rep}"))))
        return 0
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    path = os.path.join(out, SWEEP)
    record = _load(path)
    settings = {k: v for k, v in s.items() if k not in ("out", "dry_run")}
    if record is not None and record.get("settings") != settings:
        raise HpcioError(f"{out}: holds a sweep with other settings; choose another --out "
                         f"or rerun the same command to resume it")
    runs = {(r["point"]["data"], r["point"]["reader"], r["point"]["ranks"],
             r["point"]["reader_option"], r["repeat"]): r
            for r in (record or {}).get("runs", [])}
    doc = {"settings": settings, "cores": cores,
           "oversubscribed": bool(over), "runs": []}
    for rep, p in todo:
        key = (p.data, p.reader, p.ranks, p.reader_option, rep)
        doc["runs"].append(runs.get(key) or {"point": asdict(p), "repeat": rep,
                                             "status": "pending", "attempts": 0})
    atomic_json(path, doc)
    done = sum(r["status"] == "done" for r in doc["runs"])
    if done:
        print(f"hpcio.sweep: resuming {out}: {done} of {len(todo)} runs done", flush=True)
    for k, r in enumerate(doc["runs"]):
        if r["status"] == "done":
            continue
        p = Point(**r["point"])
        r["attempts"] += 1
        name = f"{p.name}-r{r['repeat']}" + (f"-a{r['attempts']}" if r["attempts"] > 1
                                             else "")
        run_dir = os.path.join(out, "runs", name)
        cmd = _command(s, p, run_dir)
        t = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        r.update(run_dir=run_dir, seconds=round(time.monotonic() - t, 2),
                 command=" ".join(shlex.quote(w) for w in cmd), returncode=proc.returncode)
        if proc.returncode == 0 and os.path.exists(os.path.join(run_dir, "summary.json")):
            r["status"], r["figures"] = "done", _figures(run_dir)
            r.pop("error", None)
            f = r["figures"]
            fig = (f"AU {f['au_percent']:.1f}%  stall {f['stall_percent']:.1f}%  straggler "
                   f"wait {f.get('straggler_wait_percent') or 0.0:.1f}%"
                   if f.get("au_percent") is not None else "no step measured")
        else:
            r["status"], r["error"] = "failed", _last_error(proc.stderr)
            fig = f"FAILED: {r['error']}"
        atomic_json(path, doc)
        print(f"[{k + 1}/{len(todo)}] {p.reader} n={p.ranks} "
              f"{os.path.basename(p.data)}{' ' + p.reader_option if p.reader_option else ''}"
              f" repeat {r['repeat']}: {fig} ({r['seconds']:.1f} s)", flush=True)
    failed = sum(r["status"] == "failed" for r in doc["runs"])
    print(f"hpcio.sweep: {len(todo) - failed} of {len(todo)} runs done, {failed} failed; "
          f"{path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.sweep"))
