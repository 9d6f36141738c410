# Process helpers shared by the testbed scripts (sourced, not run): a clock in microseconds,
# whether a pid is alive (not a zombie), polling a command until it succeeds, and ending
# exactly the pids given.

now() { echo "${EPOCHREALTIME/./}"; }                           # microseconds
alive() { [ -n "${1:-}" ] && [ -d "/proc/$1" ] && ! grep -q '^[^)]*) Z' "/proc/$1/stat" 2>/dev/null; }

wait_for() {                   # wait_for SECONDS CMD...: poll CMD until it succeeds
  local end=$(( $(now) + $1 * 1000000 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(now)" -lt "$end" ] || return 1
    sleep 0.1
  done
}

end_pids() {                   # TERM, then KILL after 5 s, only the pids given
  local p left end
  [ $# -gt 0 ] || return 0
  kill "$@" 2>/dev/null || true
  end=$(( $(now) + 5000000 ))
  while :; do
    left=(); for p in "$@"; do alive "$p" && left+=("$p"); done
    [ ${#left[@]} -gt 0 ] || return 0
    [ "$(now)" -lt "$end" ] || { kill -9 "${left[@]}" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
}
