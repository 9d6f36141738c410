"""mpi4py and MPI library combinations that are known to break hpcio, refused up front.

mpi4py 4 builds every derived datatype with the MPI-4 large-count calls
(``MPI_Type_create_hindexed_c``, ...). The ROMIO of MPICH 4.0.x cannot decode such types
(pmodels/mpich#6121, fixed in MPICH 4.1): the coordinated reader's hindexed file views and
memory types make it abort the whole job with "Out of memory in file
adio/common/flatten.c". MPICH before 4.0 has no large-count calls, so mpi4py 4 uses the
classic ones there; mpi4py 3.1 never uses them. The library is asked at run time, not at
build time: ``libmpi.so.12`` may be swapped under an mpi4py built elsewhere.
"""

import re

from .errors import HpcioError

__all__ = ["check_romio", "mpich_version", "romio_problem"]


def mpich_version(library_version):
    """MPICH's version as a tuple of ints from ``MPI_Get_library_version``'s text
    (``"MPICH Version:\\t4.0.2\\n..."`` gives ``(4, 0, 2)``), None for another MPI."""
    m = re.search(r"^MPICH Version:\s*(\d+(?:\.\d+)*)", library_version, re.M)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def romio_problem(mpi4py_version, library_version):
    """The one-line error for an mpi4py and MPI library that hit pmodels/mpich#6121,
    None when they are fine."""
    mpich = mpich_version(library_version)
    major = int(re.match(r"\d+", mpi4py_version).group())
    if major < 4 or mpich is None or not (4, 0) <= mpich < (4, 1):
        return None
    return (f"mpi4py {mpi4py_version} with MPICH {'.'.join(map(str, mpich))}: this ROMIO "
            f"aborts on mpi4py 4's large-count datatypes (pmodels/mpich#6121); use mpi4py "
            f"3.1.x for MPICH < 4.1 (make MPI=system builds it) or MPICH >= 4.1")


def check_romio(MPI):
    """Raise :class:`HpcioError` (one line, the same on every rank) if the running mpi4py
    (``MPI`` is its ``mpi4py.MPI``) and MPI library cannot do the coordinated reader's
    MPI-IO; return None otherwise."""
    import mpi4py  # mpi4py: kept out of what the command line and MPI-less tools load

    problem = romio_problem(mpi4py.__version__, MPI.Get_library_version())
    if problem:
        raise HpcioError(problem, everywhere=True)
