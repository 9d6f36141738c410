"""Argument parsing shared by every ``python -m hpcio.<command>``."""

import argparse
import difflib
import math
import os
import re
import sys
from importlib import import_module

import yaml

from .errors import HpcioError

__all__ = ["ArgumentParser", "HelpFormatter", "ExamplesFormatter", "load_config", "rank0",
           "integer", "number", "seconds", "positive", "fraction", "au_percent", "shape",
           "bandwidth", "latency", "fabric", "fabric_text", "MAX_SECONDS", "parse_key_values",
           "add_renamed", "COMMANDS", "split_reader_spec",
           "reader_options", "reader_spec", "add_reader_arguments", "add_plan_arguments",
           "command_options", "misplaced_hint"]


def rank0():
    """True on MPI rank 0 (or without MPI); read from the launcher's environment so
    that ``--help`` does not need MPI initialised."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var] == "0"
    return True


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except where there is none to show (None, [], False)."""

    def _get_help_string(self, action):
        if action.default in (None, [], False) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class ExamplesFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """:class:`HelpFormatter` that keeps description and epilog (examples) as written."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that prints help on rank 0 only and turns usage errors into one line
    (an :class:`HpcioError` raised on every rank) instead of 64 usage messages."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def format_help(self):
        """The help, with the reStructuredText literals of the docstrings it is made from
        (````-o````) shown as plain text (``-o``)."""
        return super().format_help().replace("``", "")

    def _print_message(self, message, file=None):
        if rank0():
            super()._print_message(message, file)

    def error(self, message):
        if message.startswith(UNRECOGNIZED):  # and what it may have been meant as
            message += misplaced_hint(self, message[len(UNRECOGNIZED):].split())
        raise HpcioError(message, everywhere=True)


def load_config(path):
    """A YAML (or JSON) mapping of option names (dashes or underscores) to values."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise HpcioError(f"cannot read config {path}: {e.strerror}", everywhere=True)
    except yaml.YAMLError as e:
        raise HpcioError(f"config {path} is not valid YAML: {e}".splitlines()[0], everywhere=True)
    if not isinstance(data, dict):
        raise HpcioError(f"config {path} must be a mapping of option: value", everywhere=True)
    return {str(k).replace("-", "_"): v for k, v in data.items()}


# ---- argument types: a bad value is argparse's one-line error naming the option -------------
# Every numeric option of every command takes one of these, so its allowed range is stated
# once, in its type, and checked before any work (also for values from a config file).

#: the longest duration any option takes: a sleep or timeout past it overflows the C
#: library's time types (``time.sleep(1e308)``) long before it means anything
MAX_SECONDS = 1e6


def _range(least, most):
    return f"between {least:g} and {most:g}" if most is not None else f">= {least:g}"


def integer(least, most=None):
    """An int in [``least``, ``most``] (also from a config file's int, never from a
    fractional float, a bool or a nan)."""
    def conv(v):
        try:
            if isinstance(v, bool):
                raise ValueError
            i = int(v)
            if isinstance(v, float) and i != v:
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{v!r} is not an integer")
        if i < least or (most is not None and i > most):
            raise argparse.ArgumentTypeError(f"{v!r} must be an integer {_range(least, most)}")
        return i
    conv.__name__ = f"integer {_range(least, most)}"
    return conv


def number(least=0.0, most=MAX_SECONDS, above=False):
    """A finite float in [``least``, ``most``] (``above``: strictly greater than ``least``)."""
    def conv(v):
        try:
            if isinstance(v, bool):
                raise ValueError
            f = float(v)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{v!r} is not a number")
        low = f <= least if above else f < least
        if not math.isfinite(f) or low or f > most:
            what = f"> {least:g} and <= {most:g}" if above else _range(least, most)
            raise argparse.ArgumentTypeError(f"{v!r} must be a finite number {what}")
        return f
    conv.__name__ = "number"
    return conv


#: a duration: finite, 0 to :data:`MAX_SECONDS`
seconds = number(0.0, MAX_SECONDS)
#: a finite number > 0 (intervals, rates)
positive = number(0.0, MAX_SECONDS, above=True)
#: a fraction in [0, 1]
fraction = number(0.0, 1.0)


def au_percent(v):
    """An AU threshold in percent (90 for 90%), the unit summaries and MLPerf Storage's
    results print AU in, in every command; 1 or less is refused as what looks like a
    fraction (DLIO's ``metric.au`` is one: converted where a workload is read)."""
    f = number(0.0, 100.0, above=True)(v)
    if f <= 1:
        raise argparse.ArgumentTypeError(f"{v!r} looks like a fraction: AU thresholds are "
                                         f"percent ({100 * f:g} for {100 * f:g}%)")
    return f


def shape(text):
    """``HxWxC`` -> (H, W, C)."""
    try:
        return tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HxWxC: {text!r}")


# ---- a declared network: --exchange-fabric BANDWIDTH[,LATENCY] ------------------------------
# Units are case-sensitive where case means something: B is a byte and b a bit (Gb/s and
# Gbit/s are gigabits, as InfiniBand and Ethernet rates are given); k/K, M, G, T are powers
# of 1000, Ki, Mi, Gi, Ti of 1024. A plain number is bytes/s (a bandwidth) or seconds (a
# latency): the units every figure of a run is recorded in.
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}
_PER_S = {"B/s": 1.0, "bit/s": 0.125, "b/s": 0.125, "bps": 0.125}
_RATE_UNITS = {"": 1.0, **{p + u: f * m for p, f in _PREFIX.items()
                            for u, m in _PER_S.items()}}
# as divisors: 10 / 1e6 is 1e-05 exactly, 10 * 1e-6 is not
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e3, "us": 1e6, "\u00b5s": 1e6, "ns": 1e9}
_NUMBER = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")
_RATE_HELP = "e.g. 25GB/s, 100Gbit/s, 12.5GiB/s; a plain number is bytes/s"
_TIME_HELP = "e.g. 2us, 1.5ms; a plain number is seconds"


def _quantity(text, units, what, example, divide=False):
    """(value, unit) of ``NUMBER[UNIT]``, times its factor in ``units`` (``divide``: over
    it); an argparse error otherwise."""
    if isinstance(text, bool):
        raise argparse.ArgumentTypeError(f"{text!r} is not a {what} ({example})")
    if isinstance(text, (int, float)):
        try:
            text = repr(float(text))
        except OverflowError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not finite") from None
    m = _NUMBER.match(str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"{str(text)!r} is not a {what} ({example})")
    value, unit = float(m.group(1)), m.group(2)
    if unit not in units:
        raise argparse.ArgumentTypeError(f"{str(text)!r}: unknown {what} unit {unit!r} "
                                         f"({example})")
    value = value / units[unit] if divide else value * units[unit]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{what} {str(text).strip()!r} is not finite")
    return value, unit


def bandwidth(text):
    """A bandwidth in bytes/s from ``25GB/s``, ``100Gbit/s``, ``3e9`` (see the units above);
    finite and > 0."""
    v, _ = _quantity(text, _RATE_UNITS, "bandwidth", _RATE_HELP)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"bandwidth {str(text).strip()!r} must be > 0")
    return v


def latency(text):
    """A latency in seconds from ``2us``, ``1.5ms``, ``0``; finite, 0 to MAX_SECONDS."""
    v, _ = _quantity(text, _TIME_UNITS, "latency", _TIME_HELP, divide=True)
    if v < 0 or v > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"latency {str(text).strip()!r} must be "
                                         f"{_range(0, MAX_SECONDS)} s")
    return v + 0.0  # -0 is 0


def fabric(text):
    """``BANDWIDTH[,LATENCY]`` -> {"bandwidth_bytes_per_s", "latency_s"} (latency 0 when
    left out): the network an emulated allreduce's time is computed for. Also takes that
    mapping back (a config file) and a plain number (bytes/s)."""
    if isinstance(text, dict):
        try:
            return {"bandwidth_bytes_per_s": bandwidth(text["bandwidth_bytes_per_s"]),
                    "latency_s": latency(text.get("latency_s", 0))}
        except KeyError:
            raise argparse.ArgumentTypeError("a fabric mapping needs bandwidth_bytes_per_s")
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return {"bandwidth_bytes_per_s": bandwidth(text), "latency_s": 0.0}
    parts = str(text).split(",")
    if len(parts) > 2 or not parts[0].strip() or (len(parts) == 2 and not parts[1].strip()):
        raise argparse.ArgumentTypeError(f"{str(text)!r} is not BANDWIDTH[,LATENCY] "
                                         f"(e.g. 25GB/s,2us or 100Gbit/s)")
    return {"bandwidth_bytes_per_s": bandwidth(parts[0]),
            "latency_s": latency(parts[1]) if len(parts) == 2 else 0.0}


def fabric_text(f):
    """``25 GB/s, 2 us`` for a :func:`fabric` mapping (decimal units, as declared)."""
    bw = f["bandwidth_bytes_per_s"]
    unit, scale = next(((u, s) for u, s in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6),
                                            ("kB/s", 1e3)) if bw >= s), ("B/s", 1.0))
    lat = f["latency_s"]
    lunit, lscale = next(((u, s) for u, s in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6))
                          if lat >= s), ("ns", 1e-9))
    return f"{bw / scale:.4g} {unit}, {lat / lscale:.4g} {lunit}" if lat else \
        f"{bw / scale:.4g} {unit}, no latency"


def parse_key_values(items, flag):
    """``["k=v", ...]`` (or a dict) -> ``{k: v}`` of strings, for the repeatable KEY=VALUE
    options (``--hint``, ``--reader-option``, ``--format-option``); a malformed item is an
    error naming ``flag``, the option it came from."""
    if not items:
        return {}
    if isinstance(items, dict):
        return {str(k): str(v) for k, v in items.items()}
    out = {}
    for it in items:
        k, sep, v = str(it).partition("=")
        if not sep or not k.strip() or not v.strip():
            raise HpcioError(f"{flag} {it!r} is not of the form key=value", everywhere=True)
        out[k.strip()] = v.strip()
    return out


# ---- the command table: ``hpcio COMMAND`` (hpcio/__main__.py) ---------------------------
# name -> (module run as ``python -m MODULE``, the module whose ``build_parser()`` is its
# command line, one line for ``hpcio --help``). Nothing here is imported until its command
# runs, or until a usage error asks which command an option belongs to.
COMMANDS = {
    "datagen": ("hpcio.datagen", "hpcio.datagen.command",
                "make datasets (synthetic presets, imports, indexes) and describe them"),
    "bench": ("hpcio.bench", "hpcio.bench",
              "each reader against the machine's own read limits, runs interleaved"),
    "train": ("hpcio.train", "hpcio.train.options",
              "data-parallel training on MPI ranks with per-step stall accounting"),
    "checkpoint": ("hpcio.checkpoint", "hpcio.checkpoint.command",
                   "MLPerf's llama3 checkpoints written and restored: PyTorch's own (DCP, "
                   "torch.save) against coordinated MPI-IO"),
    "sweep": ("hpcio.sweep", "hpcio.sweep.command",
              "one train job per point (ranks x reader x data), resumable"),
    "analyze": ("hpcio.analyze", "hpcio.analyze",
                "a report on runs and sweeps: how stall scales, with Darshan's counters"),
    "results": ("hpcio.results", "hpcio.results",
                "a summary from what a run's ranks flushed; runs exported as rows "
                "(MLPerf Storage's names and rules)"),
    "simulate": ("hpcio.simulate", "hpcio.simulate.__main__",
                 "calibrate a SimGrid model on runs and predict other rank counts"),
    "darshan": ("hpcio.measure.darshan", "hpcio.measure.darshan",
                "check a Darshan runtime library for mpi4py, or summarise Darshan logs"),
    "demo": ("hpcio.demo", "hpcio.demo",
             "naive against coordinated reads on a parallel file system, then local disk"),
}


# ---- shared argument groups: the reader and the sample plan -----------------------------
# Every command that reads a dataset declares its reader's options and its plan with these,
# so each option has one spelling, one type and one help in every command. The readers and
# the plan are imported inside the functions: every command imports this module (analyze
# and results too, which read no dataset, and should not pay for the readers' imports).

def split_reader_spec(spec):
    """``name[:key=value...]`` -> (name, ["key=value", ...]); a piece without ``=``
    continues the previous value (``hint.cb_config_list=*:*``)."""
    name, *parts = str(spec).split(":")
    items = []
    for t in parts:
        if "=" not in t and items:
            items[-1] += ":" + t
        else:
            items.append(t)
    return name, items


def reader_options(name, items=(), where="--reader-option"):
    """Reader ``name``'s options from ``KEY=VALUE`` texts (``hint.KEY=VALUE``: an MPI-IO
    hint), each converted to the type the reader declares for it
    (:func:`hpcio.readers.check_options`): the one conversion of reader options from every
    command line, spec and config file. A malformed item, an option the reader does not
    take or a value its type refuses is one line (``where`` names the item's source)."""
    # the readers bring numpy: ``hpcio --help`` loads this module and nothing more
    from .readers import check_options
    opts = {}
    for k, v in parse_key_values(list(items), where).items():
        if k.startswith("hint."):
            opts.setdefault("hints", {})[k[5:]] = v
        else:
            opts[k] = v
    return check_options(name, opts)


def reader_spec(spec):
    """A reader spec ``name[:key=value...]`` (``coordinated:collective=false:hint.cb_nodes=2``)
    -> (label, name, options) with the options as :func:`reader_options` converts them;
    the label is the spec as given."""
    name, items = split_reader_spec(spec)
    return spec, name, reader_options(name, items, where=f"reader {spec!r}:")


class _Renamed(argparse.Action):
    """An option's old spelling, kept for one release: sets the new option's value and says
    once on stderr (rank 0) that it is deprecated, and why."""

    def __init__(self, option_strings, dest, new=None, why="", **kw):
        self.new, self.why = new, why
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        if rank0():
            print(f"{_command_of(parser.prog)}: {option_string} is deprecated, use {self.new} (the same option"
                  f"{self.why}); {option_string} goes in the next release",
                  file=sys.stderr, flush=True)
        setattr(namespace, self.dest, values)


def add_renamed(group, old, new, why, **kw):
    """``old``: the spelling option ``new`` had, kept for one release (give it ``new``'s
    ``dest``, type and default); ``why`` says why it changed (``, one spelling in every
    command``)."""
    group.add_argument(old, action=_Renamed, new=new, why=why, **kw,
                       help=f"deprecated spelling of {new}")


def add_reader_arguments(group, verify_off, old_prefetch=None):
    """The reader's options every command that reads shares: ``--hint``,
    ``--reader-prefetch``, ``--verify``. ``verify_off`` says where an unverified run says
    so; ``old_prefetch`` an old spelling of ``--reader-prefetch`` kept for one release."""
    from .readers import VERIFY  # the readers bring numpy (see reader_options)
    group.add_argument("--hint", action="append", default=[], metavar="KEY=VALUE",
                       help="MPI-IO (ROMIO) hint for the reader's MPI-IO (coordinated), "
                            "repeatable")
    prefetch = dict(type=integer(0), default=None, metavar="K", dest="reader_prefetch")
    group.add_argument("--reader-prefetch", **prefetch,
                       help="requests the reader keeps in flight ahead of the step "
                            "(coordinated; default: the reader's own)")
    if old_prefetch:
        add_renamed(group, old_prefetch, "--reader-prefetch", ", one spelling in every command",
                    **prefetch)
    group.add_argument("--verify", default="records", choices=VERIFY,
                       help="what the reader checks on delivery: every record's CRC32C and "
                            "the files' identity (records), the files' identity and sizes "
                            f"(size), nothing (off: {verify_off})")


def add_plan_arguments(group, shuffle, many=False, seed_help="seeds the sample order",
                       batch=64):
    """The sample plan's options (:mod:`hpcio.plan`): ``--batch`` (default ``batch``),
    ``--shuffle`` (one mode, default ``shuffle``; with ``many`` a comma-separated list of
    modes), ``--block``, ``--window``, ``--seed``."""
    from .plan import BLOCK, SHUFFLES, WINDOW  # the plan brings numpy (see reader_options)
    group.add_argument("--batch", type=integer(1), default=batch,
                       help="records per rank per step")
    if many:
        group.add_argument("--shuffle", default=shuffle,
                           help=f"sample orders, comma-separated ({', '.join(SHUFFLES)})")
    else:
        group.add_argument("--shuffle", default=shuffle, choices=tuple(SHUFFLES),
                           help="sample order of each epoch (see hpcio/plan.py)")
    group.add_argument("--block", type=integer(1), default=BLOCK,
                       help="chunk shuffle: neighbouring records read together")
    group.add_argument("--window", type=integer(1), default=WINDOW,
                       help="chunk shuffle: records whose order is mixed")
    group.add_argument("--seed", type=integer(0, 2**63 - 1), default=0, help=seed_help)


# ---- an option of another command: said, not only refused -------------------------------
UNRECOGNIZED = "unrecognized arguments: "


def _options(parser):
    """{option: takes a value} of ``parser`` and of its subcommands' parsers (a
    BooleanOptionalAction's ``--no-`` form is one of its option strings)."""
    out = {o: a.nargs != 0 for o, a in parser._option_string_actions.items()
           if o not in ("-h", "--help")}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                out.update(_options(sub))
    return out


def command_options(module):
    """{option: takes a value} of the command whose parser ``module`` (the second field of
    :data:`COMMANDS`, or the first: the module a command runs as) builds with its
    ``build_parser()``, subcommands' options included. Imported by name: the commands sit
    above this module, and their parser modules import nothing heavy (tests/test_cli.py
    checks)."""
    module = next((o for m, o, _ in COMMANDS.values() if m == module), module)
    return _options(import_module(module).build_parser())


def _command_of(prog):
    """``python -m hpcio.bench`` (a parser's prog) -> ``hpcio.bench``."""
    return next((w for w in prog.split() if w.startswith("hpcio")), prog)


def misplaced_hint(parser, words):
    """For argparse's "unrecognized arguments: WORDS" of ``parser``: `` (--x is an option of
    hpcio.train, not of hpcio.bench)``, or `` (did you mean --y?)``, or nothing."""
    opt = next((w.split("=", 1)[0] for w in words if w.startswith("--")), None)
    if opt is None:
        return ""
    this = _command_of(parser.prog)
    own = [o for o in parser._option_string_actions if o.startswith("--")]
    near = difflib.get_close_matches(opt, own, n=1, cutoff=0.75)
    others = [module for module, options, _ in COMMANDS.values()
              if module != this and opt in command_options(options)]
    if others:
        also = f"; did you mean {near[0]}?" if near else ""
        return f" ({opt} is an option of {' and '.join(others)}, not of {this}{also})"
    return f" (did you mean {near[0]}?)" if near else ""
