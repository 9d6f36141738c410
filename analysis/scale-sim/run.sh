#!/usr/bin/env bash
# Prediction at scale, in one command (no root, no MPI: SimGrid only):
#   analysis/scale-sim/run.sh
# Calibrates hpcio.simulate on the recorded GlusterFS testbed runs (naive `get` and
# coordinated LMDB at 1, 2, 4 ranks; $HPCIO_RUNS, default tests/fixtures/hpcio-runs),
# predicts naive `get`, naive `cursor` (Caffe's walk, shuffle none, to 256 ranks),
# coordinated (global and none) from 1 to 4,096 ranks on the testbed scaled out, and on a
# described all-flash Lustre (platforms/lustre-flash.yaml, the testbed's fitted reader
# costs) to 64 ranks, and writes
# analysis/scale-sim/README.md from the predictions kept in analysis/scale-sim/out/.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=analysis/scale-sim
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
runs=${HPCIO_RUNS:-tests/fixtures/hpcio-runs}
from=("$runs"/pfs-inet-lmdb-{naive,coordinated}-n{1,2,4})
ranks=1,2,4,8,16,32,64,128,256,512,1024,2048,4096
records=1000000        # ImageNet-1k's 1.28 M scaled: enough records for 4,096 ranks x batch 16
start=$(date +%s)
mkdir -p "$here/out"
python -m hpcio.simulate calibrate "${from[@]}" --platform platforms/testbed.yaml \
  -o "$here/out/testbed-fit.yaml"
python -m hpcio.simulate predict --platform platforms/testbed.yaml --from "${from[@]}" \
  --ranks $ranks --records $records --scale-out --also coordinated:none -o "$here/out/testbed"
# a cursor steps over every other rank's records: its events grow as P^2, so it stops at 256
python -m hpcio.simulate predict --platform platforms/testbed.yaml --from "${from[@]}" \
  --ranks 1,2,4,8,16,32,64,128,256 --records $records --scale-out \
  --also naive-cursor:none -o "$here/out/testbed-cursor"
# 274 striped servers make each request hundreds of flows: the described system to 64 ranks
python -m hpcio.simulate predict --platform platforms/lustre-flash.yaml --from "${from[@]}" \
  --readers "$here/out/testbed-fit.yaml" --ranks 1,4,16,64 --records $records \
  --also coordinated:none -o "$here/out/lustre-flash"
# validated on sweeps of its own: the testbed sweeps recorded in testbed-runs/ (naive get and
# cursor, coordinated global and none, 1 to 8 ranks, 3 repeats each, barrier each step)
python -m hpcio.simulate predict --platform platforms/testbed.yaml --from "$here"/testbed-runs/* \
  --ranks 1,2,4,8 -o "$here/out/testbed-own"
python "$here/report.py" "$here"
echo "scale-sim: $(( $(date +%s) - start )) s in all"
