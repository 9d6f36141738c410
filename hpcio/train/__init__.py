"""Training: ``python -m hpcio.train`` (:mod:`.trainer`), its options (:mod:`.options`),
the gradient exchange (:mod:`.dist`), models (:mod:`.models`, and the emulated step in
:mod:`.emulate`, its compute times in :mod:`.computetime`, its barrier and opt-in
allreduce in :mod:`.exchange`), preprocessing
(:mod:`.pipeline`, :mod:`.decode`), checkpoints and the stop vote (:mod:`.stop`).

Its names load on first use: ``python -m hpcio.train`` imports this package first, and
must set its signal handling before torch's import (seconds) for a signal then to end it
in one line."""

from importlib import import_module

__all__ = ["main", "parse_args", "build_parser"]

_HOMES = {"main": "trainer", "parse_args": "options", "build_parser": "options"}


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOMES[name]}", __name__), name)
