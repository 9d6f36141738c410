#!/usr/bin/env bash
# Build mpi4py against the MPI of $MPICC (default mpicc), with the pip given as $1.
#
# MPICH < 4.1 (Debian 12 ships 4.0.2) gets mpi4py 3.1: mpi4py 4 builds every datatype with
# the MPI-4 large-count calls, which the ROMIO of MPICH 4.0 cannot flatten
# (pmodels/mpich#6121), so MPI-IO through a derived file view aborts with "Out of memory in
# file adio/common/flatten.c". mpi4py 3.1 builds only with setuptools<70, without build
# isolation. The version is read from the mpi.h that $MPICC compiles mpi4py against
# (MPICH_NUMVERSION), not from whichever mpiexec or mpichversion comes first on PATH;
# other MPIs do not define it and get mpi4py 4.
set -euo pipefail
pip=$1
cc=${MPICC:-mpicc}
command -v "$cc" >/dev/null || {
  echo "install-mpi4py: no '$cc' on PATH (load your MPI, or set MPICC)" >&2; exit 1; }
num=$(echo '#include <mpi.h>' | "$cc" -dM -E -x c - |
  sed -n 's/^#define MPICH_NUMVERSION *//p')
if [ -n "$num" ] && [ "$num" -lt 40100000 ]; then
  v=$((num / 10000000)).$((num / 100000 % 100)).$((num / 1000 % 100))
  echo "install-mpi4py: MPICH $v < 4.1: mpi4py 3.1 (pmodels/mpich#6121)"
  "$pip" install -q 'setuptools<70' wheel
  MPICC=$cc "$pip" install -q --no-build-isolation --no-binary=mpi4py 'mpi4py>=3.1.6,<4'
else
  MPICC=$cc "$pip" install -q --no-binary=mpi4py mpi4py
fi
