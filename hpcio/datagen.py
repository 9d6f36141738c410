"""``python -m hpcio.datagen``: the dataset command (:mod:`hpcio.data.cli`)."""

import sys

from .data.cli import main
from .errors import guard

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.datagen"))
