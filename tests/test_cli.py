"""Every command answers ``--help`` without a launcher, without MPI starting, and exits 0;
``hpcio COMMAND`` runs each of them."""

import contextlib
import io
import json
import os
import signal
import sys

import pytest
import yaml

from hpcio.__main__ import main
from hpcio.cli import COMMANDS as TABLE
from hpcio.cli import command_options, reader_options, reader_spec
from hpcio.errors import HpcioError
from hpcio.plan import BLOCK, WINDOW

from common.datasets import make_dataset
from common.inproc import run_main
from common.mpi import run_mpi, run_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMANDS = ["datagen", "train", "bench", "sweep", "analyze", "results", "demo", "simulate",
            "checkpoint"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command):
    p = run_main(["-m", f"hpcio.{command}", "--help"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: ") and f"hpcio.{command}" in p.stdout.splitlines()[0]
    assert not p.stderr.strip(), p.stderr


HELP_ALL = """
import contextlib, io, sys, warnings
from hpcio.__main__ import main
warnings.filterwarnings("ignore", "'hpcio.* found in sys.modules", RuntimeWarning)
for name in sys.argv[1:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([name, "--help"])
        except SystemExit as e:
            assert e.code == 0, (name, e.code)
    print(name, repr(out.getvalue().splitlines()[0]))
print("MPI imported:", "mpi4py.MPI" in sys.modules)  # importing it starts MPI
"""


def test_help_starts_no_mpi():
    """Every command's ``--help``, one after the other in one process, starts no MPI: its
    netmod would print with MPIR_CVAR_DEBUG_SUMMARY, and mpi4py.MPI was never imported."""
    p = run_py(["-c", HELP_ALL, *TABLE], timeout=180, env={"MPIR_CVAR_DEBUG_SUMMARY": "1"})
    assert p.returncode == 0, p.stderr
    assert "netmod Capability" not in p.stdout + p.stderr and not p.stderr.strip(), p.stderr
    assert p.stdout.splitlines()[-1] == "MPI imported: False", p.stdout
    assert [ln.split()[0] for ln in p.stdout.splitlines()[:-1]] == list(TABLE)


# ---- hpcio COMMAND (hpcio/__main__.py) ----------------------------------------------------
def test_hpcio_help_lists_every_command():
    p = run_main(["-m", "hpcio", "--help"])
    assert p.returncode == 0 and not p.stderr, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("usage: hpcio COMMAND")
    for name, (module, _, line) in TABLE.items():
        assert any(ln.split(None, 1) == [name, line] for ln in lines), name
        assert module in p.stdout.replace("\n", " ")
    assert set(TABLE) >= {"train", "bench", "datagen", "sweep", "analyze", "results",
                             "demo", "darshan", "simulate"}


def test_hpcio_help_imports_no_command():
    """The table is all ``hpcio --help`` loads: no command's modules, torch nor MPI."""
    p = run_py(["-X", "importtime", "-m", "hpcio", "--help"], timeout=60)
    assert p.returncode == 0
    loaded = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if "|" in ln}
    assert not {"torch", "mpi4py", "numpy", "hpcio.train", "hpcio.bench"} & loaded, loaded


def test_hpcio_without_a_command():
    p = run_main(["-m", "hpcio"])
    assert p.returncode == 2 and not p.stdout
    assert p.stderr.startswith("usage: hpcio COMMAND")


def test_hpcio_unknown_command_is_one_line():
    p = run_main(["-m", "hpcio", "trian", "--data", "x"])
    assert p.returncode == 2 and not p.stdout
    assert p.stderr == (f"hpcio: unknown command 'trian' (choose from {', '.join(TABLE)}; "
                        "hpcio --help says what each does)\n")


@pytest.mark.parametrize("command", sorted(TABLE))
def test_hpcio_command_help_is_the_commands(command):
    p = run_main(["-m", "hpcio", command, "--help"])
    assert p.returncode == 0, p.stderr
    first = p.stdout.splitlines()[0]
    assert first.startswith("usage: python -m " + TABLE[command][0]), first
    assert not p.stderr.strip(), p.stderr
    assert run_main(["-m", "hpcio", "help", command]).stdout == p.stdout


def test_hpcio_command_exit_code_and_errors_are_the_commands():
    p = run_main(["-m", "hpcio", "bench", "--data", "/nonexistent", "--batch", "0"])
    assert p.returncode == 2
    assert p.stderr.startswith("hpcio.bench: error: argument --batch: ")


def test_console_script_is_the_dispatcher():
    """setup.py's ``hpcio`` script calls :func:`hpcio.__main__.main` as pip's wrapper does."""
    with open(os.path.join(ROOT, "setup.py")) as f:
        assert '"hpcio = hpcio.__main__:main"' in f.read()
    out, argv = io.StringIO(), sys.argv
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
            main(["train", "--help"])
    finally:  # what train's __main__ set for the process it thinks it owns
        sys.argv = argv
        for sig, h in handlers.items():
            signal.signal(sig, h)
    assert e.value.code == 0
    assert out.getvalue().startswith("usage: python -m hpcio.train")


# ---- shared argument groups: the reader and the plan --------------------------------------
def test_reader_spec_and_reader_options_convert_alike():
    """bench's ``--readers name:k=v`` and train's ``--reader-option k=v`` go through one
    parser and the reader's own types."""
    label, name, opts = reader_spec("coordinated:collective=false:prefetch=3:shared=auto:"
                                    "sieve_ratio=2.5:hint.cb_config_list=*:*:hint.cb_nodes=2")
    assert (label, name) == ("coordinated:collective=false:prefetch=3:shared=auto:"
                             "sieve_ratio=2.5:hint.cb_config_list=*:*:hint.cb_nodes=2",
                             "coordinated")
    want = {"collective": False, "prefetch": 3, "shared": "auto", "sieve_ratio": 2.5,
            "hints": {"cb_config_list": "*:*", "cb_nodes": "2"}}
    assert opts == want
    assert reader_options("coordinated", ["collective=false", "prefetch=3", "shared=auto",
                                          "sieve_ratio=2.5", "hint.cb_config_list=*:*",
                                          "hint.cb_nodes=2"]) == want
    # a text option stays text (the old bench guess made "007" the int 7)
    assert reader_spec("naive:access=cursor")[2] == {"access": "cursor"}
    assert reader_spec("memory")[2] == {}


@pytest.mark.parametrize("spec, says", [
    ("fast", "unknown reader 'fast' (choose from coordinated, memory, naive)"),
    ("coordinated:junk", "reader 'coordinated:junk': 'junk' is not of the form key=value"),
    ("naive:prefetch=x", "reader option prefetch='x' is not an integer"),
    ("naive:request_bytes=1", "reader 'naive' has no option request_bytes"),
    ("coordinated:prefetch=-1", "reader option prefetch=-1 must be a finite number >= 0"),
])
def test_reader_spec_errors_are_one_line(spec, says):
    with pytest.raises(HpcioError) as e:
        reader_spec(spec)
    assert str(e.value) == says and e.value.everywhere


def test_train_and_bench_spell_shared_options_alike():
    from hpcio.bench import build_parser as bench
    from hpcio.train.options import build_parser as train
    acts = [{o: a for a in p()._actions for o in a.option_strings} for p in (bench, train)]
    for opt in ("--batch", "--shuffle", "--block", "--window", "--seed", "--hint",
                "--reader-prefetch", "--verify"):
        b, t = acts[0][opt], acts[1][opt]
        assert b.dest == t.dest and b.default == t.default or opt == "--shuffle", opt
        assert getattr(b.type, "__name__", None) == getattr(t.type, "__name__", None), opt
        if opt not in ("--shuffle", "--seed"):  # (one mode or several; what it seeds)
            assert b.help.split("(off:")[0] == t.help.split("(off:")[0], opt
    assert acts[0]["--block"].default == BLOCK and acts[1]["--window"].default == WINDOW
    # train's --prefetch is its pipeline's; the reader's is --reader-prefetch in both
    assert acts[1]["--prefetch"].dest == "prefetch"
    assert acts[0]["--prefetch"].dest == "reader_prefetch"


def test_bench_prefetch_is_deprecated_in_one_line(tmp_path):
    """bench's old ``--prefetch`` still sets the reader's prefetch, with one line saying so;
    ``--reader-prefetch`` says nothing."""
    base = ["-m", "hpcio.bench", "--data", tmp_path / "none", "--out", tmp_path / "b.json"]
    old = run_main(base + ["--prefetch", "3"])
    new = run_main(base + ["--reader-prefetch", "3"])
    note = ("hpcio.bench: --prefetch is deprecated, use --reader-prefetch (the same option, "
            "one spelling in every command); --prefetch goes in the next release")
    assert old.stderr.splitlines()[0] == note, old.stderr
    assert old.stderr.count("deprecated") == 1 and "deprecated" not in new.stderr
    # past the parser either way: the same error, on the missing dataset
    assert old.stderr.splitlines()[1:] == new.stderr.splitlines()
    assert old.returncode == new.returncode == 2


# ---- an option of another command: said, not only refused ----------------------------------
@pytest.mark.parametrize("module", ["hpcio.bench", "hpcio.sweep", "hpcio.train.options"])
def test_command_options_are_the_parsers(module):
    """The hints know a command's options from its own parser (``build_parser``)."""
    import importlib
    parser = importlib.import_module(module).build_parser()
    want = {o: a.nargs != 0 for o, a in parser._option_string_actions.items()
            if o not in ("-h", "--help")}
    assert command_options(module) == want


def test_command_options_of_subcommands():
    """A subcommand's options are its command's; a BooleanOptionalAction's --no- form too."""
    assert command_options("hpcio.simulate.__main__")["--readers"] is True
    assert command_options("hpcio.results")["--output"] is True
    assert command_options("hpcio.measure.darshan")["--parser"] is True
    train = command_options("hpcio.train.options")
    assert train["--augment"] is False and train["--no-augment"] is False


#: what a parser module must not load: the hint on a mistyped option imports them all
HEAVY = ("torch", "mpi4py", "matplotlib", "h5py")


def test_parser_modules_load_nothing_heavy():
    """Every command's parser module (and so ``command_options``) imports without torch,
    mpi4py, matplotlib or h5py, in a fresh interpreter."""
    modules = sorted({options for _, options, _ in TABLE.values()})
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m).build_parser()\n"
            f"print(sorted(h for h in {HEAVY!r} if h in sys.modules))\n")
    p = run_py(["-c", code], timeout=120, check=True)
    assert p.stdout.strip() == "[]", p.stdout


def test_every_command_table_entry_is_a_module():
    for name, (module, options, _) in TABLE.items():
        for m in (module, options):
            path = os.path.join(ROOT, *m.split("."))
            assert os.path.isfile(path + ".py") or os.path.isdir(path), (name, m)


def test_sweep_says_train_options_go_after_the_separator(tmp_path):
    p = run_main(["-m", "hpcio.sweep", "--data", "D", "--ranks", "1,2", "--model", "emulate",
                  "--offline", "--batch=8", "--", "--steps", "3"], cwd=tmp_path)
    assert p.returncode == 2 and not p.stdout
    assert p.stderr == ("hpcio.sweep: error: --model is a hpcio.train option: put train "
                        "options after --, e.g. python -m hpcio.sweep --data D --ranks 1,2 "
                        "-- --model emulate --offline --batch=8 --steps 3\n")
    assert not os.listdir(tmp_path)  # no sweep directory, no spec read
    p = run_main(["-m", "hpcio.sweep", "--data", "D", "--rankz", "1,2"], cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr == ("hpcio.sweep: error: unrecognized arguments: --rankz (did you mean "
                        "--ranks?)\n")


@pytest.mark.parametrize("args, says", [
    (["-m", "hpcio.bench", "--data", "D", "--model", "emulate"],
     "hpcio.bench: error: unrecognized arguments: --model emulate (--model is an option of "
     "hpcio.train and hpcio.checkpoint and hpcio.simulate and hpcio.demo, not of hpcio.bench)"),
    (["-m", "hpcio", "bench", "--data", "D", "--readerz", "naive"],
     "hpcio.bench: error: unrecognized arguments: --readerz naive (did you mean --readers?)"),
    (["-m", "hpcio.datagen", "generate", "D", "--readers", "naive"],
     "hpcio.datagen: error: unrecognized arguments: --readers naive (--readers is an option "
     "of hpcio.bench and hpcio.simulate, not of hpcio.datagen)"),
    (["-m", "hpcio.train", "--data", "D", "--readers", "naive"],
     "hpcio.train: error: unrecognized arguments: --readers naive (--readers is an option of "
     "hpcio.bench and hpcio.simulate, not of hpcio.train; did you mean --reader?)"),
])
def test_an_option_of_another_command_is_named(tmp_path, args, says):
    p = run_main(args, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [says]


def test_hpcio_train_under_mpiexec_with_the_plan_options(tmp_path):
    """``mpiexec python -m hpcio train`` is a training run; train's --block and --window
    are its plan's (and its config's, which the simulation replays)."""
    ds = make_dataset(tmp_path, "packed", "raw", records=256)
    out = tmp_path / "run"
    p = run_mpi(2, ["-m", "hpcio", "train", "--data", ds.root, "--model", "emulate",
                    "--compute-time", "0.001", "--batch", "8", "--shuffle", "chunk",
                    "--block", "8", "--window", "32", "--steps", "3", "--out", out,
                    "--progress", "off"], timeout=180)
    assert p.returncode == 0, p.stderr
    with open(out / "config.yaml") as f:
        config = yaml.safe_load(f)
    assert (config["shuffle"], config["block"], config["window"]) == ("chunk", 8, 32)
    assert json.loads((out / "summary.json").read_text())["ranks"] == 2


# ---- one meaning per name ----------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["-m", "hpcio.train", "--data", "D", "--au-threshold", "0.9"],
    ["-m", "hpcio.simulate", "predict", "--au-threshold", "0.9"],
    ["-m", "hpcio.results", "export", "R", "-o", "x.json", "--au-threshold", "0.9"],
    ["-m", "hpcio.sweep", "--data", "D", "--ranks", "1", "--dry-run", "--",
     "--au-threshold", "0.9"],
])
def test_au_threshold_is_percent_in_every_command(tmp_path, args):
    """90 means 90% wherever AU is given; 0.9 is refused in one line that says why."""
    p = run_main(args, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    (line,) = p.stderr.splitlines()
    assert "--au-threshold" in line and "'0.9' looks like a fraction: AU thresholds are " \
        "percent (90 for 90%)" in line, line


def test_au_threshold_percent_and_a_workloads_fraction():
    from hpcio.train.options import parse_args
    assert parse_args(["--data", "D", "--au-threshold", "90"]).au_threshold == 90.0
    assert parse_args(["--data", "D", "--workload", "cosmoflow_h100"]).au_threshold == 70.0


@pytest.mark.parametrize("module, old, new, value, dest", [
    ("hpcio.analyze", "--format", "--report-formats", "md", "report_formats"),
    ("hpcio.simulate.__main__", "--readers", "--reader-costs", "fit.yaml", "reader_costs"),
])
def test_a_renamed_option_still_works_for_a_release(capsys, module, old, new, value, dest):
    import importlib
    parser = importlib.import_module(module).build_parser()
    base = {"hpcio.analyze": ["RUN", "-o", "OUT"],
            "hpcio.simulate.__main__": ["predict", "--platform", "P", "--from", "R", "--ranks", "1",
                               "-o", "OUT"]}[module]
    a = parser.parse_args(base + [new, value])
    assert getattr(a, dest) == value and not capsys.readouterr().err
    a = parser.parse_args(base + [old, value])
    assert getattr(a, dest) == value
    (line,) = capsys.readouterr().err.splitlines()
    prog = module.replace(".__main__", "")
    assert line.startswith(f"{prog}: {old} is deprecated, use {new} (the same option: "), line
    assert line.endswith(f"; {old} goes in the next release"), line


def _parsers(parser, prog):
    """(prog, parser) of ``parser`` and of every subcommand under it."""
    import argparse
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prog} {name}")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_help_shows_no_raw_markup(name):
    """The help of every command and subcommand (made from docstrings written with
    reStructuredText literals) shows them as plain text: no double backticks."""
    import importlib
    for prog, parser in _parsers(importlib.import_module(TABLE[name][1]).build_parser(),
                                 name):
        text = parser.format_help()
        assert "``" not in text, (prog, text[text.index("``") - 60:text.index("``") + 60])
