"""Argument parsing shared by every ``python -m hpcio.<command>``."""

import argparse
import math
import os

import yaml

from .errors import HpcioError

__all__ = ["ArgumentParser", "HelpFormatter", "ExamplesFormatter", "load_config", "rank0",
           "integer", "number", "seconds", "positive", "fraction", "shape", "MAX_SECONDS"]


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

    def _print_message(self, message, file=None):
        if rank0():
            super()._print_message(message, file)

    def error(self, message):
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


def shape(text):
    """``HxWxC`` -> (H, W, C)."""
    try:
        return tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HxWxC: {text!r}")
