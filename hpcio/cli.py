"""Argument parsing shared by every ``python -m hpcio.<command>``."""

import argparse
import math
import os

import yaml

from .errors import HpcioError

__all__ = ["ArgumentParser", "HelpFormatter", "ExamplesFormatter", "load_config", "rank0",
           "integer", "seconds", "positive", "shape"]


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

def integer(least):
    """An int >= ``least`` (also from a config file's int, never from a fractional float)."""
    def conv(v):
        try:
            i = int(v)
            if isinstance(v, float) and i != v:
                raise ValueError
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{v!r} is not an integer")
        if i < least:
            raise argparse.ArgumentTypeError(f"{v!r} must be >= {least}")
        return i
    conv.__name__ = f"integer >= {least}"
    return conv


def seconds(v):
    """A finite number >= 0."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{v!r} is not a number of seconds")
    if not math.isfinite(f) or f < 0:
        raise argparse.ArgumentTypeError(f"{v!r} must be a finite number >= 0")
    return f


def positive(v):
    """A finite number > 0."""
    f = seconds(v)
    if f <= 0:
        raise argparse.ArgumentTypeError(f"{v!r} must be > 0")
    return f


def shape(text):
    """``HxWxC`` -> (H, W, C)."""
    try:
        return tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HxWxC: {text!r}")
