"""``python -m hpcio.train``: see :mod:`hpcio.train.trainer`."""

import sys

from ..errors import guard
from .trainer import main

sys.exit(guard(main, prog="hpcio.train"))
