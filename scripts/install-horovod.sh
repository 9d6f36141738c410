#!/usr/bin/env bash
# Build Horovod 0.28.1 with MPI and PyTorch into the venv whose pip is $1 (make horovod).
# With "--without-mpi DIR": a Horovod without MPI (gloo only; unoptimised, it only has to
# import) into DIR instead, for the test that --dist horovod refuses one (.ci/lane-horovod).
#
# 0.28.1 is Horovod's last release and does not build against torch >= 2.1 as shipped: the
# torch headers need C++17, and its two CMakeLists ask for C++14. So: the sdist from PyPI,
# CMAKE_CXX_STANDARD 17 in both, then an install without build isolation (the build must
# see this venv's torch). Horovod must link the libmpi that mpi4py loads, or the job has two
# MPIs: it is compiled with the mpicxx beside the venv's python (the mpich wheel's, which
# links the venv's libmpi) when there is one, else the mpicxx on PATH (a system MPI: make
# MPI=system). Nothing is cached: the patched build must not reach another pip by accident.
# HOROVOD_BUILD_JOBS sets the build's parallelism (default: one job per core).
set -euo pipefail
version=${HOROVOD_VERSION:-0.28.1}
bin=$(cd "$(dirname "$1")" && pwd)
pip=$bin/$(basename "$1")
mpi=1 target=""
if [ "${2:-}" = --without-mpi ]; then
  mpi=0 target=$(mkdir -p "$3" && cd "$3" && pwd)
fi
missing=""
for tool in c++ cmake make; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
[ -z "$missing" ] || {
  echo "install-horovod: missing build tools:$missing (apt-get install g++ cmake make)" >&2
  exit 1; }
export PATH="$bin:$PATH"
command -v mpicxx >/dev/null || {
  echo "install-horovod: no mpicxx beside $bin/python or on PATH (load your MPI)" >&2
  exit 1; }
if [ $mpi = 1 ]; then
  echo "install-horovod: Horovod $version with $(command -v mpicxx): $(mpicxx -show)"
  how=(HOROVOD_WITH_MPI=1) into=()
else
  echo "install-horovod: Horovod $version without MPI into $target"
  how=(HOROVOD_WITHOUT_MPI=1 HOROVOD_DEBUG=1) into=(--target "$target")
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$pip" download -q --no-cache-dir --no-deps --no-binary=:all: -d "$work" "horovod==$version"
tar -C "$work" -xzf "$work/horovod-$version.tar.gz"
src=$work/horovod-$version
for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
  grep -q 'set(CMAKE_CXX_STANDARD 14)' "$f" || {
    echo "install-horovod: $f has no CMAKE_CXX_STANDARD 14 to raise" >&2; exit 1; }
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$f"
done
# what setup.py would otherwise fetch itself (setup_requires) while building
"$pip" install -q --no-cache-dir cloudpickle psutil pyyaml packaging 'cffi>=1.4.0'
(cd "$src" && env MAKEFLAGS="-j${HOROVOD_BUILD_JOBS:-$(nproc)}" HOROVOD_WITH_PYTORCH=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 "${how[@]}" \
  "$pip" install -q --no-cache-dir --no-build-isolation --no-deps "${into[@]}" .)
# what hpcio checks before using it: importable, built with MPI (or, as asked, without),
# and one libmpi in the process, mpi4py's
cd "$work"
PYTHONPATH=$target HVD_MPI=$mpi "$bin/python" - <<'EOF'
import os
import horovod.torch as hvd
from mpi4py import MPI  # noqa: F401 (loads mpi4py's libmpi)
assert hvd.mpi_built() == (os.environ["HVD_MPI"] == "1"), hvd.__file__
maps = {ln.split()[-1] for ln in open("/proc/self/maps") if "libmpi" in ln}
assert len(maps) == 1, f"two MPI libraries in one process: {sorted(maps)}"
print(f"install-horovod: {os.path.dirname(hvd.__file__)}: mpi_built() {hvd.mpi_built()}, "
      f"libmpi {maps.pop()}")
EOF
