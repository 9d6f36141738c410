"""``python -m hpcio.train``: see :mod:`hpcio.train.trainer`."""

import signal
import sys

from ..errors import guard, interrupt_on


def _main():
    from .trainer import main  # torch: seconds, under the handlers below
    return main()


# until training installs its own (stop at the next step, flush): a signal ends the
# run where it stands, in one line, exit 128 + the signal
interrupt_on((signal.SIGTERM, signal.SIGINT))
sys.exit(guard(_main, prog="hpcio.train"))
