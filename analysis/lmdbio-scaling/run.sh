#!/usr/bin/env bash
# The study in one command (root: the GlusterFS testbed and drop_caches):
#   analysis/lmdbio-scaling/run.sh
# Builds Darshan if needed, starts the testbed (500 us per request), makes the dataset on it,
# runs the traced sweep of sweep.yaml and writes the report into analysis/lmdbio-scaling/.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=analysis/lmdbio-scaling
export PATH="$PWD/.venv/bin:$PATH"
[ -f .darshan/lib/libdarshan.so ] || scripts/darshan-local.sh build
up=0
scripts/pfs-local.sh status >/dev/null 2>&1 || { scripts/pfs-local.sh start --mount /mnt/pfs --delay-us 500; up=1; }
trap '[ "$up" = 1 ] && scripts/pfs-local.sh stop' EXIT
[ -f /mnt/pfs/inet-2048.lmdb/hpcio.json ] || python -m hpcio.datagen generate \
  /mnt/pfs/inet-2048.lmdb --preset imagenet --records 2048 --format lmdb --shards 2
python -m hpcio.sweep "$here/sweep.yaml" --out "${SWEEP_OUT:-sweeps/lmdbio-scaling}"
python -m hpcio.analyze "${SWEEP_OUT:-sweeps/lmdbio-scaling}" -o "$here/report" --report-formats md,json
