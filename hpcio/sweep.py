"""``python -m hpcio.sweep``: one ``hpcio.train`` job per point of a sweep (ranks x reader x
data x reader option), repeats interleaved, into one sweep directory.

    python -m hpcio.sweep --data /mnt/pfs/inet --ranks 1,2,4,8 --reader naive,coordinated \\
        --repeat 3 --out sweeps/pfs -- --model emulate --compute-time 0.02 --batch 16
    python -m hpcio.sweep analysis/lmdbio-scaling/sweep.yaml      # the same from a spec

Every point is its own job (``--launcher``, default the ``mpiexec`` beside this Python; or
``'srun --mpi=pmi2'`` inside an allocation), with a cold cache unless the train options say
otherwise. Repeats are interleaved (every point once, then again), so a slow minute of a
shared machine hits all points alike. ``sweep.json`` in the sweep directory lists every
run with its point, run directory, status (``done``; ``cut_short``: a signal stopped it
after it wrote what it measured; ``interrupted``: ended before it wrote a summary;
``failed``; ``running``, ``pending``) and why, with earlier attempts in its ``history``,
so it names every run directory there is; it is rewritten atomically before each run
starts and after it ends. Rerunning the same command resumes: runs done are skipped, every
other one runs again in a fresh run directory. One sweep at a time writes into a sweep
directory (``sweep.lock``, flock: released when the sweep ends, however it ends); a second
is refused in one line. SIGINT or SIGTERM to the sweep goes to the run in progress, which
stops and writes what it measured; the sweep records it and exits 128 + the signal.

``--find-max-accelerators`` answers MLPerf Storage's question instead: the most ranks
(simulated accelerators) among ``--ranks`` whose AU stays at or above the threshold (the
``--workload``'s or ``--au-threshold``, among the train options), by bisection over the
counts, each probed with a warm-up run and five measured runs (:mod:`hpcio.explain.
accelerators` has the rules); the answer, every probe and whether the rules held go into
``sweep.json`` under ``search``.

Options after ``--`` go to every ``hpcio.train`` job (a train option before it is refused
in one line saying so). A spec file holds the same keys as the options (``ranks``,
``reader``, ``data``, ``reader_option``, ``repeat``, ``launcher``, ``darshan``, ``out``)
and ``train`` (a mapping or list of train options); flags given here override it.
"""

import ctypes
import fcntl
import itertools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from .cli import (COMMANDS, UNRECOGNIZED, ArgumentParser, command_options, load_config,
                  misplaced_hint)
from .errors import HpcioError, guard, interrupt_on
from .explain import accelerators
from .measure.schema import Invalid
from .fsutil import atomic_json
from .measure.rundir import RunDir
from .mpiutil import launcher

__all__ = ["Point", "points", "outcome", "error_line", "keep_stderr", "build_parser", "main",
           "STATUSES"]

SWEEP = "sweep.json"
LOCK = "sweep.lock"
# a run's status in sweep.json: only "done" is skipped on resume
STATUSES = ("pending", "running", "done", "cut_short", "interrupted", "failed")
# what an earlier attempt keeps in its point's "history"
HISTORY = ("run_dir", "status", "error", "signal", "stderr", "returncode", "seconds", "started")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


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


class _Bad(ValueError):
    """A value of the wrong type or range; the caller names where it came from."""


def _ints(text):
    try:
        out = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise _Bad("expected a comma-separated list of integers")
    if not out or min(out) < 1:
        raise _Bad("every rank count must be >= 1")
    return out


def _words(text):
    return [v.strip() for v in str(text).split(",") if v.strip()]


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _strings(v, split=False):
    """A string (comma-separated with ``split``) or a list of strings -> a list."""
    if isinstance(v, str):
        return _words(v) if split else [v]
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        return [w for x in v for w in (_words(x) if split else [x])]
    raise _Bad("expected a string or a list of strings")


def _check_ranks(v):
    if _is_int(v) or isinstance(v, str):
        return _ints(v)
    if isinstance(v, list) and v and all(_is_int(x) for x in v):
        return _ints(",".join(map(str, v)))
    raise _Bad("expected a comma-separated list of integers")


def _check_data(v):
    out = _strings(v)
    if not all(x.strip() for x in out):
        raise _Bad("expected dataset directories, not empty names")
    return out


def _check_readers(v):
    from .readers import READERS
    out = _strings(v, split=True)
    bad = [r for r in out if r not in READERS]
    if bad or not out:
        raise _Bad(f"unknown reader(s) {', '.join(bad) or '(none)'}; choose from "
                   f"{', '.join(READERS)}")
    return out


def _check_reader_options(v):
    out = _strings(v)
    bad = [o for o in out if o and "=" not in o]
    if bad:
        raise _Bad(f"expected KEY=VALUE, got {bad[0]!r}")
    return out or [""]


def _check_repeat(v):
    if not _is_int(v):
        raise _Bad("expected an integer")
    if v < 1:
        raise _Bad("must be at least 1")
    return v


def _check_warmup(v):
    if not _is_int(v) or v < 0:
        raise _Bad("expected an integer >= 0")
    return v


def _check_flag(v):
    if not isinstance(v, bool):
        raise _Bad("expected true or false")
    return v


def _check_text(v):
    if not isinstance(v, str) or not v.strip():
        raise _Bad("expected a non-empty string")
    return v


SCALARS = (str, int, float, bool, type(None))


def _check_train(v):
    """``train:`` as command-line words: a mapping of option: value (a scalar or a list
    of scalars), a list of words, or one string."""
    if isinstance(v, str):
        return shlex.split(v)
    if isinstance(v, list) and all(isinstance(x, SCALARS) and x is not None for x in v):
        return [str(x) for x in v]
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, list) and all(isinstance(y, SCALARS) for y in x) or \
                    isinstance(x, SCALARS):
                continue
            raise _Bad(f"{k}: expected a value or a list of values, got {x!r}")
        return [w for k, x in v.items() for w in _flag(k, x)]
    raise _Bad("expected a mapping of option: value, a list of words or a string")


# spec key -> check: turns a value (from the spec, or a flag's string) into the setting,
# or says in _Bad what is wrong with it
CHECKS = {"data": _check_data, "reader": _check_readers, "ranks": _check_ranks,
          "reader_option": _check_reader_options, "repeat": _check_repeat,
          "launcher": _check_text, "darshan": _check_text, "out": _check_text,
          "train": _check_train, "find_max_accelerators": _check_flag,
          "warmup": _check_warmup, "simulate_beyond": _check_text}


def _checked(key, value, spec_path=None):
    """``value`` through ``CHECKS[key]``; a bad one is one line naming the key (the flag,
    or the spec file and key)."""
    try:
        return CHECKS[key](value)
    except _Bad as e:
        where = f"spec {spec_path}: {key}" if spec_path else "--" + key.replace("_", "-")
        raise HpcioError(f"{where} {value!r}: {e}", everywhere=True) from None


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
    p.add_argument("--find-max-accelerators", action="store_true", default=None,
                   help="MLPerf Storage's headline: the most ranks (simulated accelerators) "
                        "among --ranks whose AU stays at or above the threshold (the "
                        "workload's, or --au-threshold, after --), by a search over them: "
                        "at each count --warmup runs, then --repeat runs (default 5) that "
                        "must all pass and agree within 5%%")
    p.add_argument("--simulate-beyond", metavar="PLATFORM.yaml", default=None,
                   help="with --find-max-accelerators, when the largest count given passes: "
                        "hpcio.simulate, calibrated on the search's measured runs, "
                        "predicts the counts beyond it on this platform (marked simulated)")
    p.add_argument("--warmup", type=int, default=None,
                   help="with --find-max-accelerators: runs not counted before each point's "
                        "(default 1, as MLPerf Storage)")
    return p


def _settings(argv):
    """The sweep's settings: spec file, then flags; unknown options go to hpcio.train.
    Every value is checked, and a bad one named in one line."""
    if "--" in argv:
        k = argv.index("--")
        argv, extra = argv[:k], argv[k + 1:]
    else:
        extra = []
    parser = build_parser()
    a, unknown = parser.parse_known_args(argv)
    if unknown:  # before any file is read: "--model emulate" would make "emulate" the spec
        raise HpcioError(_misplaced(parser, argv, unknown, extra), everywhere=True)
    spec = load_config(a.spec) if a.spec else {}
    bad = sorted(set(spec) - set(CHECKS))
    if bad:
        raise HpcioError(f"spec {a.spec}: unknown key(s): {', '.join(bad)}", everywhere=True)

    def pick(name, default=None):
        flag = getattr(a, name, None)
        if flag is not None:
            return _checked(name, flag)
        if spec.get(name) is not None:
            return _checked(name, spec[name], a.spec)
        return default

    data = pick("data")
    if not data:
        raise HpcioError("--data DIR... is required (or data: in the spec)", everywhere=True)
    search = bool(pick("find_max_accelerators", False))
    return {"data": [os.path.abspath(d) for d in data], "ranks": pick("ranks", [1]),
            "readers": pick("reader", ["naive", "coordinated"]),
            "reader_options": pick("reader_option", [""]),
            "repeat": pick("repeat", search and accelerators.RUNS or 1),
            "find_max_accelerators": search,
            "warmup": pick("warmup", accelerators.WARMUP) if search else 0,
            "simulate_beyond": pick("simulate_beyond") if search else None,
            "launcher": pick("launcher") or launcher(), "darshan": pick("darshan"),
            "out": pick("out") or os.path.join("runs", time.strftime("sweep-%Y%m%d-%H%M%S")),
            "train": (pick("train") or []) + extra, "dry_run": a.dry_run}


def _misplaced(parser, argv, unknown, extra):
    """The line for options this command does not know, given before ``--``: a train
    option is said to go after ``--``, with the command so rearranged."""
    train = command_options(COMMANDS["train"][1])
    opt = next((w.split("=", 1)[0] for w in unknown if w.startswith("-")), None)
    if opt not in train:
        return UNRECOGNIZED + " ".join(unknown) + misplaced_hint(parser, unknown)
    own, moved, k = [], [], 0
    while k < len(argv):
        w = argv[k]
        name = w.split("=", 1)[0]
        if w in unknown and name in train:
            moved.append(w)
            if "=" not in w and train[name] and k + 1 < len(argv) and \
                    not argv[k + 1].startswith("-"):
                k += 1
                moved.append(argv[k])
        else:
            own.append(w)
        k += 1
    return (f"{opt} is a hpcio.train option: put train options after --, e.g. python -m "
            f"hpcio.sweep {' '.join(map(shlex.quote, own + ['--'] + moved + extra))}")


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


# the line that says why, by kind: hpcio's own, then MPI's fatal error (an abort inside
# MPI_Init is followed by the launcher's lines about killing the others)
WHY = (lambda ln: ln.startswith("hpcio."), lambda ln: "Fatal error" in ln)


def error_line(stderr):
    """The line of a failed run's stderr that says why."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    for kind in WHY:
        first = next((ln for ln in lines if kind(ln)), None)
        if first:
            return first
    return lines[-1] if lines else "failed with no message"


def keep_stderr(out, run_dir, stderr):
    """A run that did not finish: its stderr in full, as logs/<run>.stderr of the sweep's
    own directory (the run's may not exist). Returns the path, or None."""
    if not stderr.strip():
        return None
    path = os.path.join(out, "logs", os.path.basename(run_dir) + ".stderr")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(stderr)
    return path


def _summary(run_dir):
    """The run's summary.json, or None."""
    try:
        return RunDir(run_dir).summary()[0]
    except (OSError, Invalid):
        return None


def _figures(summary):
    m = (summary or {}).get("metrics") or {}
    return {k: m.get(k) for k in ("au_percent", "stall_percent", "straggler_wait_percent",
                                  "samples_per_s", "mib_per_s")}


def _signalled(returncode):
    """The signal a run's exit code says ended it (128 + n, as hpcio.train and shells
    report it; -n from a launcher a signal ended), or None."""
    n = returncode - 128 if returncode > 128 else -returncode
    try:
        return signal.Signals(n) if n > 0 else None
    except ValueError:
        return None


def outcome(returncode, run_dir, stderr):
    """(status, details) of a finished run: ``done`` only for exit 0 with a complete
    summary; ``cut_short`` for a run a signal stopped after writing what it measured;
    ``interrupted`` for one a signal ended before it wrote a summary; ``failed`` else."""
    summary = _summary(run_dir)
    cut = bool(summary and summary.get("cut_short"))
    if returncode == 0 and summary is not None and not cut:
        return "done", {"figures": _figures(summary)}
    sig = _signalled(returncode)
    if cut or (sig is not None and summary is not None):
        name = (summary or {}).get("signal_name") or (sig.name if sig else None)
        return "cut_short", {"signal": name, "error": error_line(stderr),
                             "figures": _figures(summary)}
    if sig is not None:
        return "interrupted", {"signal": sig.name, "error": error_line(stderr)}
    return "failed", {"error": error_line(stderr)}


def _load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise HpcioError(f"{path}: unreadable sweep record ({e}); move it away to start over")
    why = None
    try:
        if not isinstance(doc["settings"], dict) or not isinstance(doc["runs"], list):
            raise TypeError
        for r in doc["runs"]:
            Point(**r["point"]), int(r["repeat"]), int(r["attempts"])
            if r["status"] not in STATUSES:
                raise ValueError
    except KeyError as e:
        why = f"no {e} field"
    except (TypeError, ValueError):
        why = "a field of the wrong type"
    if why:
        raise HpcioError(f"{path}: not a sweep record hpcio wrote ({why}); move it away to "
                         f"start over")
    return doc


def _lock(out):
    """Hold ``out/sweep.lock`` (flock, exclusive) until this process ends: a second sweep
    into ``out`` is refused in one line. The kernel releases it when the holder dies, even
    by SIGKILL, so no stale lock outlives a sweep; the file stays (removing it would race
    with a sweep opening it). Its descriptor is not inherited by the runs, which do not
    hold the lock after the sweep is gone. Returns the descriptor, or None where the file
    system has no locks (said in one line)."""
    path = os.path.join(out, LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise HpcioError(f"{out}: another sweep is running into it ({holder}); wait for it "
                         f"to end or choose another --out") from None
    except OSError as e:
        os.close(fd)
        print(f"hpcio.sweep: warning: {path}: cannot lock ({e.strerror}): make sure no other "
              f"sweep writes into {out}", file=sys.stderr, flush=True)
        return None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return fd


def _recorded_dirs(doc):
    """Every run directory the record lists, the current attempts' and earlier ones'."""
    return {d for r in doc["runs"] for d in [r.get("run_dir")] +
            [h.get("run_dir") for h in r.get("history", [])] if d}


def _fresh_run_dir(out, r, name, recorded):
    """The directory of this attempt: ``name``, ``name-aN`` from the attempt number on,
    the first one not on disk (hpcio.train refuses an existing --out). One on disk that
    the record does not list (a sweep killed before it said so) goes into the history,
    so the record names every run directory there is."""
    k = r["attempts"]
    while True:
        d = os.path.join(out, "runs", name + (f"-a{k}" if k > 1 else ""))
        if not os.path.lexists(d):
            return d
        if d not in recorded:
            r.setdefault("history", []).append(
                {"run_dir": d, "status": "interrupted",
                 "error": "found on disk, not in the record: a sweep ended while it ran"})
            recorded.add(d)
        k += 1


class _Forward:
    """While a run is going, SIGINT and SIGTERM to the sweep are passed to its launcher
    (mpiexec forwards them to the ranks, which stop at the same step and write what they
    measured); the sweep then records the run, and stops. Runs start in a session of their
    own, so a Ctrl-C at the terminal reaches them once, through here."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum, self.child = None, None
        self._old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}

    def _handle(self, signum, frame):
        self.signum = signum
        if self.child is not None and self.child.poll() is None:
            try:
                self.child.send_signal(signum)
            except ProcessLookupError:
                pass

    def restore(self):
        for s, h in self._old.items():
            signal.signal(s, h)


def _parent_death_signal():
    """A function for ``preexec_fn``: the run gets SIGTERM if the sweep dies (SIGKILL
    included), so it stops and writes what it measured instead of running on unrecorded.
    None where there is no prctl (not Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm():
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the sweep died before the line above
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def _run(cmd, forward):
    """Run one job, signals forwarded; returns (returncode, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=_parent_death_signal())
    forward.child = proc
    try:
        if forward.signum is not None:  # it came while the job was starting
            proc.send_signal(forward.signum)
        _, err = proc.communicate()
    finally:
        forward.child = None
    return proc.returncode, err


def _line(r):
    """What a finished run measured, or why it did not, for its progress line."""
    f = r.get("figures") or {}
    if r["status"] == "done":
        return (f"AU {f['au_percent']:.1f}%  stall {f['stall_percent']:.1f}%  straggler "
                f"wait {f.get('straggler_wait_percent') or 0.0:.1f}%"
                if f.get("au_percent") is not None else "no step measured")
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


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    s = _settings(argv)
    pts = points(s["data"], s["readers"], s["ranks"], s["reader_options"])
    out = os.path.abspath(s["out"])
    cores = os.cpu_count() or 1
    model = _option(s["train"], "--model")      # a --workload's is emulate
    emulate = model == "emulate" or (model is None and _option(s["train"], "--workload"))
    over = [p.ranks for p in pts if p.ranks > cores]
    if over and not emulate:
        raise HpcioError(f"{max(over)} ranks on {cores} cores: only emulated compute "
                         f"(--model emulate) may oversubscribe the cores", everywhere=True)
    if s["find_max_accelerators"]:
        return _find_max(s, out, cores, bool(over))
    todo = [(rep, p) for rep in range(s["repeat"]) for p in pts]
    if s["dry_run"]:
        for rep, p in todo:
            print(" ".join(shlex.quote(w) for w in _command(
                s, p, os.path.join(out, "runs", f"{p.name}-r{rep}"))))
        return 0
    try:
        os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    except OSError as e:
        raise HpcioError(f"--out {out}: cannot make the sweep directory "
                         f"({e.strerror}: {e.filename})") from None
    lock = _lock(out)
    try:
        return _sweep(s, out, todo, cores, bool(over))[0]
    finally:
        if lock is not None:
            os.close(lock)


def _sweep(s, out, todo, cores, over, extra=None):
    """Run every point of ``todo`` not done yet, recording each attempt before it starts
    and after it ends (sweep.json, atomically; the record's other runs and ``extra``
    kept beside them). Returns (exit code, the record)."""
    path = os.path.join(out, SWEEP)
    record = _load(path)
    settings = {k: v for k, v in s.items() if k not in ("out", "dry_run")}
    if record is not None and record.get("settings") != settings:
        raise HpcioError(f"{out}: holds a sweep with other settings; choose another --out "
                         f"or rerun the same command to resume it")
    runs = {(r["point"]["data"], r["point"]["reader"], r["point"]["ranks"],
             r["point"]["reader_option"], r["repeat"]): r
            for r in (record or {}).get("runs", [])}
    doc = {"settings": settings, "cores": cores, "oversubscribed": over, "runs": []}
    doc.update(extra or {})
    mine = []
    for rep, p in todo:
        key = (p.data, p.reader, p.ranks, p.reader_option, rep)
        mine.append(runs.pop(key, None) or {"point": asdict(p), "repeat": rep,
                                            "status": "pending", "attempts": 0})
        if rep < s.get("warmup", 0):
            mine[-1]["warmup"] = True
    if extra is not None:    # a search: the points probed before this one stay recorded
        doc["runs"] += list(runs.values())
    doc["runs"] += mine
    for r in doc["runs"]:
        if r["status"] == "running":  # the sweep that ran it ended first (SIGKILL)
            r.update(status="interrupted",
                     error="the sweep ended while it ran; its results are as it left them")
    atomic_json(path, doc)
    done = sum(r["status"] == "done" for r in mine)
    if done:
        print(f"hpcio.sweep: resuming {out}: {done} of {len(todo)} runs done", flush=True)
    recorded = _recorded_dirs(doc)
    forward = _Forward()
    try:
        for k, r in enumerate(mine):
            if forward.signum is not None:
                break
            if r["status"] == "done":
                continue
            p = Point(**r["point"])
            if r.get("run_dir"):  # an earlier attempt: kept on disk and in the record
                r.setdefault("history", []).append(
                    {x: r.pop(x) for x in HISTORY if x in r})
            r["attempts"] += 1
            for x in ("error", "figures", "signal", "stderr"):
                r.pop(x, None)
            run_dir = _fresh_run_dir(out, r, f"{p.name}-r{r['repeat']}", recorded)
            cmd = _command(s, p, run_dir)
            r.update(status="running", run_dir=run_dir,
                     command=" ".join(shlex.quote(w) for w in cmd),
                     started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            recorded.add(run_dir)
            atomic_json(path, doc)  # before the run makes its directory
            t = time.monotonic()
            rc, err = _run(cmd, forward)
            status, details = outcome(rc, run_dir, err)
            if status != "done":
                details["stderr"] = keep_stderr(out, run_dir, err)
            r.update(status=status, seconds=round(time.monotonic() - t, 2), returncode=rc,
                     **details)
            atomic_json(path, doc)
            print(f"[{k + 1}/{len(todo)}] {p.reader} n={p.ranks} "
                  f"{os.path.basename(p.data)}"
                  f"{' ' + p.reader_option if p.reader_option else ''} repeat "
                  f"{r['repeat']}: {_line(r)} ({r['seconds']:.1f} s)", flush=True)
    finally:
        forward.restore()
    if extra is None:
        print(_totals(doc, path, forward.signum), flush=True)
    if forward.signum is not None:
        return 128 + forward.signum, doc
    return (0 if all(r["status"] == "done" for r in doc["runs"]) else 1), doc


def _find_max(s, out, cores, over):
    """MLPerf Storage's accelerators-supported search over ``--ranks`` (one reader, one
    dataset): each probed count runs as a sweep point, warm-ups first; the answer and every
    probe go into sweep.json under ``search``."""
    if len(s["readers"]) != 1 or len(s["data"]) != 1 or s["reader_options"] != [""]:
        raise HpcioError("--find-max-accelerators searches one reader on one dataset: give "
                         "one --reader and one --data", everywhere=True)
    threshold, source = accelerators.threshold(_option(s["train"], "--au-threshold"),
                                               _option(s["train"], "--workload"))
    if s["dry_run"]:
        print(f"hpcio.sweep: would search {', '.join(map(str, s['ranks']))} ranks for AU >= "
              f"{100 * threshold:.0f}% ({source})", flush=True)
        return 0
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    lock = _lock(out)
    probes = {}

    def probe(ranks):
        p = Point(s["data"][0], s["readers"][0], ranks)
        todo = [(rep, p) for rep in range(s["warmup"] + s["repeat"])]
        code, doc = _sweep(s, out, todo, cores, over, {"search": search(None)})
        if code > 128:
            raise _Stopped(code)
        probes[ranks] = accelerators.judge(
            [r for r in doc["runs"] if r["point"]["ranks"] == ranks and not r.get("warmup")],
            threshold)
        atomic_json(os.path.join(out, SWEEP), dict(doc, search=search(None)))
        print(f"hpcio.sweep: {ranks} accelerator(s): {probes[ranks]['verdict']}", flush=True)
        return probes[ranks]["passed"]

    def search(answer):
        done = [dict(ranks=n, **probes[n]) for n in sorted(probes)]
        ok, why = accelerators.rules(s["warmup"], s["repeat"], done)
        return {"threshold_percent": 100 * threshold, "threshold_from": source,
                "candidates": s["ranks"], "warmup": s["warmup"], "runs": s["repeat"],
                "probes": done, "max_accelerators": answer,
                "rules": {"followed": ok, "reasons": why}}

    try:
        answer = accelerators.search(s["ranks"], probe)
    except _Stopped as e:
        return e.code
    finally:
        if lock is not None:
            os.close(lock)
    doc = _load(os.path.join(out, SWEEP))
    doc["search"] = search(answer)
    print(accelerators.answer_line(doc["search"], s["readers"][0],
                                   os.path.join(out, SWEEP)), flush=True)
    if s["simulate_beyond"] and answer == max(s["ranks"]):
        doc["search"]["simulated"] = _simulate_beyond(s, out, doc, answer, threshold)
        print(accelerators.simulated_line(doc["search"]["simulated"]), flush=True)
    atomic_json(os.path.join(out, SWEEP), doc)
    return 0


def _simulate_beyond(s, out, doc, answer, threshold):
    """``hpcio.simulate predict`` on the search's measured runs (warm-ups left out), at
    powers of two past ``answer`` that the data (the workload's full size, if any) hold:
    its accelerators-supported answer, marked simulated, or why there is none."""
    runs = [r["run_dir"] for r in doc["runs"] if r["status"] == "done" and not r.get("warmup")]
    config = RunDir(runs[0]).config()[0]
    records = (accelerators.records_of(_option(s["train"], "--workload"))
               or config["dataset"]["records"])
    beyond = [answer * 2 ** k for k in range(1, 7) if answer * 2 ** k * config["batch"]
              <= records]
    where = os.path.join(out, "simulated")
    base = {"platform": s["simulate_beyond"], "note": "simulated, not measured",
            "output": where}
    if not beyond:
        return dict(base, error=f"the data ({records:,} records) hold no more ranks of "
                                f"batch {config['batch']}")
    cmd = [sys.executable, "-m", "hpcio.simulate", "predict", "--platform",
           s["simulate_beyond"], "--from", *runs, "--ranks", ",".join(map(str, beyond)),
           "--records", str(records), "--au-threshold", str(100 * threshold),
           "--scale-out", "-o", where]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        return dict(base, error=error_line(p.stderr))
    with open(os.path.join(where, "prediction.json")) as f:
        got = json.load(f)["accelerators_supported"]
    return dict(base, simulated_ranks=beyond, **next(iter(got.values())))


class _Stopped(Exception):
    """A signal stopped the search's current run: the sweep exits with its code."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


if __name__ == "__main__":
    interrupt_on()  # SIGTERM before the runs start: one line, 143
    sys.exit(guard(main, prog="hpcio.sweep"))
