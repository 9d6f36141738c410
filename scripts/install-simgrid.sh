#!/bin/sh
# SimGrid's Python module for hpcio.simulate, into the venv whose python is $1:
# Debian's python3-simgrid (pinned) built for Python 3.11, its one extension module linked
# into the venv's site-packages (not all of Debian's dist-packages). Never fails the
# set-up: without root, apt or a Python 3.11 venv it says what to run and the simulate
# tests skip.
PY=${1:-python3}
PIN=3.32-2+b2
SO=/usr/lib/python3/dist-packages/simgrid.cpython-311-x86_64-linux-gnu.so
say() { echo "install-simgrid: $*"; }
if "$PY" -c 'import simgrid' 2>/dev/null; then exit 0; fi
if [ ! -e "$SO" ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        say "not root or no apt: run (as root) apt-get install python3-simgrid=$PIN, then make setup; or pip install simgrid==4.1 (cmake + boost). hpcio.simulate's tests skip meanwhile."
        exit 0
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python3-simgrid=$PIN" >/dev/null 2>&1 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python3-simgrid=$PIN" >/dev/null 2>&1; } ||
        { say "apt-get install python3-simgrid=$PIN failed (offline?); hpcio.simulate's tests skip"; exit 0; }
fi
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
if [ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != 3.11 ]; then
    say "Debian's simgrid module is for Python 3.11, the venv's is not: pip install simgrid==4.1 instead"
    exit 0
fi
ln -sf "$SO" "$SITE/"
"$PY" -c 'import simgrid' 2>/dev/null || { rm -f "$SITE/$(basename "$SO")"; say "the module does not load in the venv; hpcio.simulate's tests skip"; }
exit 0
