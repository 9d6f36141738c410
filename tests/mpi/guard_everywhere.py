"""Run under mpiexec: an HpcioError marked everywhere=True, raised by every rank ("all") or,
wrongly, by rank 0 alone while rank 1 waits in a barrier ("rank0"), under errors.guard."""

import sys

from mpi4py import MPI

from hpcio import errors


def main(who):
    comm = MPI.COMM_WORLD
    if who == "all" or comm.rank == 0:
        raise errors.HpcioError("the same failure everywhere", everywhere=True)
    comm.Barrier()


if __name__ == "__main__":
    errors.FINISH_WAIT = 2.0  # the rank0 case waits this long for a rank that never comes
    errors.guard(lambda: main(sys.argv[1]), "guard-test")
