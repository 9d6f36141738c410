#!/usr/bin/env bash
# Build Darshan (the LD_PRELOAD runtime and darshan-util) against the MPI that mpi4py uses,
# so that a traced rank loads one MPI library, not two.
#   scripts/darshan-local.sh build [--source TARBALL] [--prefix DIR]
# TARBALL: the Darshan 3.5.0 source, darshan-3.5.0.tar.gz from the Darshan project (default:
# ../shared/vendor/darshan-3.5.0.tar.gz beside the checkout, else PREFIX/darshan-3.5.0.tar.gz,
# downloaded there from the project's release site ($DARSHAN_URL) when the network allows).
# A source without its configure script gets one from ./prepare.sh (needs autoconf, automake
# and libtool).
# MPICC= picks the MPI compiler; by default the mpicc beside the Python in use ($PYTHON,
# else python3 on PATH: the mpich wheel puts it in the venv's bin), else mpicc on PATH.
# Prints the path of libdarshan.so. Skips the build when PREFIX was built for the same mpicc.
# When that Python has mpi4py, checks that the library links the libmpi mpi4py loads.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "darshan-local: $*" >&2; exit 2; }

cmd=${1:-}
[ "$cmd" = build ] || die "usage: $0 build [--source TARBALL] [--prefix DIR]"
shift
src=""
prefix=$here/.darshan
url=${DARSHAN_URL:-https://web.cels.anl.gov/projects/darshan/releases/darshan-3.5.0.tar.gz}
while [ $# -gt 0 ]; do
  case $1 in
    --source) [ $# -ge 2 ] || die "--source needs a tarball"; src=$2; shift 2 ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done

mkdir -p "$prefix" || die "cannot create $prefix"
# The source: as given, else the vendored one, else one downloaded once into PREFIX.
fetch() {
  local to=$1 part=$1.part
  echo "darshan-local: downloading $url" >&2
  if command -v curl >/dev/null; then curl -fsSL --connect-timeout 20 --max-time 300 -o "$part" "$url"
  elif command -v wget >/dev/null; then wget -q --timeout=20 -O "$part" "$url"
  else return 1; fi && tar tzf "$part" >/dev/null 2>&1 && mv "$part" "$to" || { rm -f "$part"; return 1; }
}
if [ -z "$src" ]; then
  for cand in "$here/../shared/vendor/darshan-3.5.0.tar.gz" "$prefix/darshan-3.5.0.tar.gz"; do
    [ -f "$cand" ] && { src=$cand; break; }
  done
  if [ -z "$src" ]; then
    src=$prefix/darshan-3.5.0.tar.gz
    fetch "$src" || die "no Darshan source: none at ../shared/vendor/ nor $src, and $url could not be fetched; name the Darshan 3.5.0 source with --source TARBALL"
  fi
fi
[ -f "$src" ] || die "no Darshan source tarball at $src: name the Darshan 3.5.0 source (darshan-3.5.0.tar.gz from the Darshan project) with --source TARBALL"
src=$(cd "$(dirname "$src")" && pwd)/$(basename "$src")

py=${PYTHON:-$(command -v python3 || true)}
if [ -z "${MPICC:-}" ]; then
  beside=""
  [ -n "$py" ] && beside=$(dirname "$("$py" -c 'import sys; print(sys.executable)')")/mpicc
  if [ -n "$beside" ] && [ -x "$beside" ]; then MPICC=$beside; else MPICC=$(command -v mpicc || true); fi
fi
[ -n "$MPICC" ] || die "no mpicc: none beside ${py:-python3} nor on PATH (set MPICC=)"
given=$MPICC
[ -x "$MPICC" ] || MPICC=$(command -v "$MPICC" || true)
[ -n "$MPICC" ] && [ -x "$MPICC" ] || die "MPICC is not an executable: $given"
MPICC=$(cd "$(dirname "$MPICC")" && pwd)/$(basename "$MPICC")
prefix=$(cd "$prefix" && pwd)

# What the build depends on: the compiler wrapper, the MPI it wraps, and the source.
stamp="$MPICC $("$MPICC" -show 2>/dev/null | tr -s ' ') $(basename "$src") $(stat -c %s "$src")"
lib=$prefix/lib/libdarshan.so
# One line on stderr and exit 2 when mpi4py would load another libmpi than the library.
check() {
  if [ -n "$py" ] && "$py" -c 'import mpi4py' 2>/dev/null; then
    PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} "$py" -m hpcio.measure.darshan check "$lib" >/dev/null
  fi
  echo "$lib"
}

if [ -f "$lib" ] && [ -x "$prefix/bin/darshan-parser" ] && [ "$(cat "$prefix/.built-with" 2>/dev/null)" = "$stamp" ]; then
  check
  exit 0
fi

if [ ! -f /usr/include/zlib.h ]; then
  [ "$(id -u)" = 0 ] || die "zlib headers missing: apt-get install zlib1g-dev (needs root)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zlib1g-dev; } \
    >/dev/null 2>&1 || die "apt-get install zlib1g-dev failed"
fi

work=$(mktemp -d "$prefix/build.XXXXXX")
log=$prefix/build.log
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
echo "darshan-local: building $(basename "$src") with $MPICC into $prefix (log: $log)" >&2
tar xzf "$src" -C "$work" || die "cannot unpack $src"
srcdir=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
if [ ! -x "$srcdir/configure" ]; then
  command -v autoreconf >/dev/null && command -v libtoolize >/dev/null \
    || die "no configure script in $src, and no autotools to make one (apt-get install autoconf automake libtool)"
  (cd "$srcdir" && ./prepare.sh) >"$log" 2>&1 || die "./prepare.sh failed in $src (see $log)"
fi
mkdir "$work/build"
(
  cd "$work/build"
  "$srcdir/configure" --prefix="$prefix" --with-log-path-by-env=DARSHAN_LOG_DIR_PATH \
    --with-jobid-env=NONE CC="$MPICC" >"$log" 2>&1 || { echo configure; exit 1; }
  make -j"$(nproc)" >>"$log" 2>&1 || { echo make; exit 1; }
  make install >>"$log" 2>&1 || { echo "make install"; exit 1; }
) >"$work/failed" || die "$(cat "$work/failed") failed (see $log)"
[ -f "$lib" ] || die "the build installed no $lib (see $log)"
echo "$stamp" >"$prefix/.built-with"
echo "darshan-local: built in $(( $(date +%s) - start )) s" >&2
check
