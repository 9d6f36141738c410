"""``python -m hpcio.datagen``: the dataset command (:mod:`hpcio.datagen.command`)."""

import sys

from ..errors import guard
from .command import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.datagen"))
