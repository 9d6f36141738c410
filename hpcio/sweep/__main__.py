"""``python -m hpcio.sweep``: the sweep command (:mod:`hpcio.sweep.command`)."""

import sys

from ..errors import guard, interrupt_on
from .command import main

__all__ = ["main"]

if __name__ == "__main__":
    interrupt_on()  # SIGTERM before the runs start: one line, 143
    sys.exit(guard(main, prog="hpcio.sweep"))
