"""Argument parsing shared by every ``python -m hpcio.<command>``."""

import argparse
import os

import yaml

from .errors import HpcioError

__all__ = ["ArgumentParser", "load_config", "rank0"]


def rank0():
    """True on MPI rank 0 (or without MPI); read from the launcher's environment so
    that ``--help`` does not need MPI initialised."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var] == "0"
    return True


class ArgumentParser(argparse.ArgumentParser):
    """argparse that prints help on rank 0 only and turns usage errors into one line
    (an :class:`HpcioError` raised on every rank) instead of 64 usage messages."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
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
    return {k.replace("-", "_"): v for k, v in data.items()}
