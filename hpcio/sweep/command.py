"""``python -m hpcio.sweep``: one ``hpcio.train`` job per point of a sweep (ranks x reader x
data x reader option), or one ``hpcio.checkpoint run`` job per writer x ranks, repeats
interleaved, into one sweep directory.

    python -m hpcio.sweep --data /mnt/pfs/inet --ranks 1,2,4,8 --reader naive,coordinated \\
        --repeat 3 --out sweeps/pfs -- --model emulate --compute-time 0.02 --batch 16
    python -m hpcio.sweep analysis/lmdbio-scaling/sweep.yaml      # the same from a spec
    python -m hpcio.sweep --checkpoint-writer dcp,coordinated --ranks 2,4 --out sweeps/ckpt \
        -- --model llama3_8b --scale 0.001 --checkpoints 2         # checkpoints instead

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
in one line saying so), or with ``--checkpoint-writer`` to every ``hpcio.checkpoint run``
job (:mod:`.checkpoints`: its checkpoints in ``SWEEP/checkpoints/``, removed after it). A
spec file holds the same keys as the options (``ranks``, ``reader``, ``data``,
``reader_option``, ``repeat``, ``launcher``, ``darshan``, ``out``,
``find_max_accelerators``, ``warmup``, ``simulate_beyond``, ``checkpoint_writer``:
:data:`.spec.SPEC`) and ``train`` (a mapping or list of train options); flags given here
override it.
"""

import os
import shlex
import sys
import time

from ..cli import (COMMANDS, UNRECOGNIZED, ArgumentParser, command_options, load_config,
                   misplaced_hint)
from ..errors import HpcioError
from ..explain import accelerators
from ..mpiutil import launcher
from . import checkpoints
from .loop import Sweep
from .search import find_max
from .spec import checked, points, unknown_keys
from .sweepdir import SweepDir

__all__ = ["build_parser", "settings", "main"]


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
    p.add_argument("--checkpoint-writer", default=None, metavar="WRITERS",
                   help="sweep checkpoint runs instead: one python -m hpcio.checkpoint run "
                        "job per writer (coordinated, dcp, torch_save) and rank count; the "
                        "options after -- go to every such job (e.g. --model llama3_8b "
                        "--scale 0.001 --checkpoints 2)")
    p.add_argument("--warmup", type=int, default=None,
                   help="with --find-max-accelerators: runs not counted before each point's "
                        "(default 1, as MLPerf Storage)")
    return p


def settings(argv):
    """The sweep's settings: spec file, then flags; options after ``--`` go to hpcio.train.
    Every value is checked, and a bad one named in one line."""
    argv, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    parser = build_parser()
    a, unknown = parser.parse_known_args(argv)
    if unknown:  # before any file is read: "--model emulate" would make "emulate" the spec
        raise HpcioError(_misplaced(parser, argv, unknown, extra), everywhere=True)
    spec = load_config(a.spec) if a.spec else {}
    unknown_keys(spec, a.spec)

    def pick(name, default=None):
        if getattr(a, name, None) is not None:
            return checked(name, getattr(a, name))
        if spec.get(name) is not None:
            return checked(name, spec[name], a.spec)
        return default

    writers = pick("checkpoint_writer")
    data = pick("data")
    search = bool(pick("find_max_accelerators", False))
    if writers:
        _checkpoint_sweep(data, pick("reader"), search, pick("darshan"))
        data = [checkpoints.model_of((pick("train") or []) + extra)]
    elif not data:
        raise HpcioError("--data DIR... is required (or data: in the spec)", everywhere=True)
    else:
        data = [os.path.abspath(d) for d in data]
    return {"data": data, "ranks": pick("ranks", [1]), "checkpoint": bool(writers),
            "readers": writers or pick("reader", ["naive", "coordinated"]),
            "reader_options": pick("reader_option", [""]),
            "repeat": pick("repeat", search and accelerators.RUNS or 1),
            "find_max_accelerators": search,
            "warmup": pick("warmup", accelerators.WARMUP) if search else 0,
            "simulate_beyond": pick("simulate_beyond") if search else None,
            "launcher": pick("launcher") or launcher(), "darshan": pick("darshan"),
            "out": pick("out") or os.path.join("runs", time.strftime("sweep-%Y%m%d-%H%M%S")),
            "train": (pick("train") or []) + extra, "dry_run": a.dry_run}


def _checkpoint_sweep(data, reader, search, darshan):
    """A checkpoint sweep (``--checkpoint-writer``) takes none of the train sweep's
    data, readers, search or tracing: each given is refused in one line."""
    given = [f for f, v in (("--data", data), ("--reader", reader),
                            ("--find-max-accelerators", search), ("--darshan", darshan)) if v]
    if given:
        raise HpcioError(f"--checkpoint-writer sweeps hpcio.checkpoint run jobs: {given[0]} "
                         f"is a train sweep's (checkpoint options go after --)",
                         everywhere=True)


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


def main(argv=None):
    s = settings(list(sys.argv[1:] if argv is None else argv))
    pts = points(s["data"], s["readers"], s["ranks"], s["reader_options"])
    cores = os.cpu_count() or 1
    over = [p.ranks for p in pts if p.ranks > cores]
    sweep = Sweep(s, SweepDir(os.path.abspath(s["out"])), cores, bool(over))
    if over and not s["checkpoint"] and not sweep.emulated:
        raise HpcioError(f"{max(over)} ranks on {cores} cores: only emulated compute "
                         f"(--model emulate) may oversubscribe the cores", everywhere=True)
    if s["find_max_accelerators"]:
        return find_max(sweep)
    todo = [(rep, p) for rep in range(s["repeat"]) for p in pts]
    if s["dry_run"]:
        for rep, p in todo:
            print(" ".join(shlex.quote(w) for w in sweep.command(
                p, sweep.dir.run_dir(f"{p.name}-r{rep}"))))
        return 0
    sweep.dir.make()
    with sweep.dir.locked():
        sweep.check()  # a bad option after -- is one line before the record is written
        return sweep.run(todo)[0]
