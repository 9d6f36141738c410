"""Run under mpiexec: an HpcioError marked everywhere=True, raised by every rank ("all") or,
wrongly, by rank 0 alone while rank 1 waits in a barrier ("rank0"), or one every rank
meets at once with no rank 0 to speak for it ("once PATH": the lost node's case), under
errors.guard."""

import sys

from mpi4py import MPI

from hpcio import errors


def main(who, path=None):
    comm = MPI.COMM_WORLD
    if who == "once":
        comm.Barrier()
        raise errors.HpcioError(f"rank {comm.rank} lost its peer", once=path)
    if who == "all" or comm.rank == 0:
        raise errors.HpcioError("the same failure everywhere", everywhere=True)
    comm.Barrier()


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank0"]:  # waits this long for a rank that never comes; the
        errors.FINISH_WAIT = 2.0    # others keep the default (a rank late on a busy node)
    errors.guard(lambda: main(*sys.argv[1:]), "guard-test")
