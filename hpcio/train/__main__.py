"""``python -m hpcio.train``: see :mod:`hpcio.train.trainer`."""

import signal
import sys

from ..errors import guard, interrupt_on


def _starts_mpi_now(argv):
    """MPI starts before torch's import when nothing else must come first: not for
    ``--help``, nor before Darshan's re-exec (``--darshan``, or a ``--config`` that may
    name it), which must happen before MPI starts."""
    words = set(a.split("=", 1)[0] for a in argv)
    if words & {"-h", "--help"}:
        return False
    from ..measure.darshan import reexecuted  # under the guard: a Ctrl-C now is one line
    return not (words & {"--darshan", "--config"}) or reexecuted()


def _main():
    if _starts_mpi_now(sys.argv[1:]):
        # MPI_Init on a small, quiet heap: the launcher's key-value exchange then carries
        # short values (Slurm's pmi2 plugin misreads long PMI-1 lines now and then, and
        # MPICH's packed UCX addresses grow with the garbage of a big heap)
        from ..measure.clock import mpi_started  # under the guard, as above
        mpi_started()
    from .trainer import main  # torch: seconds, under the handlers below
    return main()


# until training installs its own (stop at the next step, flush): a signal ends the
# run where it stands, in one line, exit 128 + the signal
interrupt_on((signal.SIGTERM, signal.SIGINT))
sys.exit(guard(_main, prog="hpcio.train"))
