"""Training: ``python -m hpcio.train`` (:mod:`.trainer`), its options (:mod:`.options`),
the gradient exchange (:mod:`.dist`), models (:mod:`.models`, and the emulated step in
:mod:`.emulate`), preprocessing (:mod:`.pipeline`, :mod:`.decode`), checkpoints and the
stop vote (:mod:`.stop`)."""

from .options import build_parser, parse_args
from .trainer import main

__all__ = ["main", "parse_args", "build_parser"]
