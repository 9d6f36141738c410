#!/usr/bin/env bash
# The runs `python -m hpcio.simulate checkpoint calibrate` fits and validates on
# (tests/fixtures/ckpt-runs/ keeps their summary.json and checkpoint.yaml):
#   pfs/<writer>-n<P>-r<k>:   llama3_8b at --scale 0.005, 3 checkpoints, every writer at 1, 2,
#                             4 and 8 processes on the GlusterFS testbed (scripts/pfs-local.sh
#                             start: needs root), caches dropped before the reads;
#   tmpfs/<writer>-n1-r<k>:   one process on /dev/shm: the writer's own cost per byte.
# Usage: benchmarks/ckpt_calibration_runs.sh [OUT (runs/ckpt-calib)] [REPEATS (3)] [PFS (/mnt/pfs)]
set -euo pipefail
OUT=${1:-runs/ckpt-calib} REPS=${2:-3} PFS=${3:-/mnt/pfs}
L=$(python -c "from hpcio.mpiutil import launcher; print(launcher())")
one() {  # kind dir procs writer rep extra...
  local kind=$1 dir=$2 n=$3 w=$4 rep=$5; shift 5
  local out=$OUT/$kind/$w-n$n-r$rep
  [ -f "$out/summary.json" ] && return 0
  mkdir -p "$OUT/$kind"
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg): $kind $w P=$n round $rep"
  "$L" -n "$n" python -m hpcio.checkpoint run --model llama3_8b --scale 0.005 --writer "$w" \
    --dir "$dir/ckpt-calib-$w-n$n" --force --checkpoints 3 --out "$out" "$@" >"$out.log" 2>&1
  rm -rf "$dir/ckpt-calib-$w-n$n"
}
for rep in $(seq 1 "$REPS"); do       # rounds: every point once per round, interleaved
  for n in 1 2 4 8; do
    for w in dcp torch_save coordinated; do one pfs "$PFS" "$n" "$w" "$rep" --drop-caches; done
  done
  for w in dcp torch_save coordinated; do one tmpfs /dev/shm 1 "$w" "$rep" --cache asis; done
done
