#!/usr/bin/env bash
# Lim, Young, Patton 2016 on this machine, in one command (as root for the paper's cold
# cache, "sync && echo 3 > /proc/sys/vm/drop_caches"):
#   analysis/lim2016/run.sh
# Regenerates the datasets of study.yaml under $LIM2016_ROOT (default
# /var/tmp/hpcio-lim2016; only hpcio's own files there are ever replaced), runs one
# hpcio.sweep per dataset x compute x cache x reader into $LIM2016_ROOT/sweeps/<time>, and
# writes analysis/lim2016/README.md and its figures. `study.py report` redoes the README.
#   analysis/lim2016/run.sh --pfs
# then also the same on the GlusterFS testbed (pfs.yaml; started and stopped here unless it
# is already up), into analysis/lim2016/pfs/.
set -euo pipefail
pfs=0
if [ "${1:-}" = --pfs ]; then pfs=1; shift; fi
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
python analysis/lim2016/study.py all "$@"
if [ "$pfs" = 1 ]; then
  up=0
  scripts/pfs-local.sh status >/dev/null 2>&1 || { scripts/pfs-local.sh start --mount /mnt/pfs --delay-us 500; up=1; }
  trap '[ "$up" = 1 ] && scripts/pfs-local.sh stop' EXIT
  python analysis/lim2016/study.py all --config analysis/lim2016/pfs.yaml --out analysis/lim2016/pfs
fi
echo "lim2016: $(( $(date +%s) - start )) s in all"
