#!/usr/bin/env bash
# A real parallel file system on one machine, for hpcio's runs against network storage:
# a 2-brick distribute GlusterFS volume whose glusterd and bricks run in a network namespace
# behind a veth pair, FUSE-mounted here. Needs root and Debian's glusterfs packages (installed
# with apt-get when missing).
#
#   scripts/pfs-local.sh start [--mount DIR] [--data DIR] [--delay-us N] [--rate R] [--timeout S]
#   scripts/pfs-local.sh delay N          change the per-request delay of the running volume
#   scripts/pfs-local.sh status           one line per component; exit 0 up, 3 down
#   scripts/pfs-local.sh stop [--wipe [--data DIR]]
#
# --mount DIR   mount point (default /mnt/pfs): made if missing, refused if not empty
# --data DIR    bricks (brick0, brick1) and glusterd's own state (default /var/lib/hpcio-pfs);
#               kept by stop, so a later start serves the same files; stop --wipe deletes
#               exactly what start made there (in the running testbed's DATA, else in
#               stop's --data DIR)
# --delay-us N  every request a brick serves waits N microseconds first (GlusterFS's delay-gen
#               translator above the brick's storage; the kernel has no netem). Applying a new
#               value restarts the volume (delay-gen reads its options only at start).
# --rate R      bandwidth cap, tc syntax (e.g. 400mbit, 50mbps = 50 MB/s), a tbf qdisc on each
#               end of the veth. A cap that cannot be set is an error, not a warning: numbers
#               measured without the cap asked for would be wrong.
#
# The client's own caches are off (io-cache, quick-read, open-behind, stat-prefetch/md-cache,
# read-ahead, readdir-ahead, nl-cache), so after `echo 3 > /proc/sys/vm/drop_caches` a fresh
# open reads every byte from the bricks, and the bricks from disk. write-behind stays on: it
# holds writes only until close or fsync and serves no cold read, and without it writing
# through a 500 us delay was 3-6x slower.
#
# start refuses while any part of a testbed is up (stop cleans a half-up one), and clears the
# state of one that no longer runs (after a reboot or a kill); a start that fails removes what
# it made. Logs, the bricks' too: DATA/log/.
set -euo pipefail

NS=hpcio-pfs                 # network namespace
VH=hpfs0 VN=hpfs1            # veth ends: host side, namespace side
VOL=hpcio
STATE=/run/hpcio-pfs
CACHES_OFF=(performance.io-cache performance.quick-read performance.open-behind
            performance.stat-prefetch performance.read-ahead performance.readdir-ahead
            performance.nl-cache)
PKGS=(glusterfs-server glusterfs-client iproute2)

die() { echo "pfs-local: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/procs.sh"
glog() {                       # glusterd's last log line (its stderr if it never logged)
  local f=$DATA/log/glusterd.log
  [ -s "$f" ] || f=$DATA/log/glusterd.out
  tail -n1 "$f" 2>/dev/null || true
}
ns_up() { command -v ip >/dev/null && ip netns list | grep -qw "$NS"; }
owns() { alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"; }
gcli() { timeout 60 gluster --mode=script --glusterd-sock="$STATE/glusterd.socket" \
           --log-file="$DATA/log/cli.log" "$@"; }
load_state() { [ -f "$STATE/state" ] && . "$STATE/state"; true; }
save() { printf '%s=%q\n' "$1" "$2" >>"$STATE/state"; printf -v "$1" '%s' "$2"; }
quiet() {                      # run; on failure, die with what and the command's last line
  local what=$1 out; shift
  out=$("$@" 2>&1) || die "$what: $(tail -n1 <<<"$out")"
}

# --- start -----------------------------------------------------------------------------------

pick_net() {                   # a 10.254.N.0/30 nothing on this machine uses or routes
  local n
  if [ -s "$DATA/addr" ]; then
    n=$(cat "$DATA/addr")
    net_free "$n" || die "address 10.254.$n.2 of the volume in $DATA is in use here (stop --wipe for a new volume)"
    echo "$n"; return
  fi
  for n in $(seq 1 254); do net_free "$n" && { echo "$n"; return; }; done
  die "no free 10.254.N.0/30 on this machine"
}
net_free() {
  ! ip -4 -o addr show | grep -q " 10\.254\.$1\." &&
    ! ip -4 route show to match "10.254.$1.2" | grep -qv '^default'
}


clients_connected() {          # the FUSE client holds a connection to both bricks
  [ "$(gcli volume status "$VOL" clients | grep -c "^$HOST_IP:")" = 2 ]
}

glusterd_up() { ! alive "$GLUSTERD" || gcli pool list; }   # true also once it has died

set_delay() {                  # delay-gen reads its options only at init: restart the volume
  local pct=0
  [ "$1" -gt 0 ] && pct=100
  quiet "volume set" gcli volume set "$VOL" delay-gen.delay-duration "$1"
  quiet "volume set" gcli volume set "$VOL" delay-gen.delay-percentage "$pct"
  if gcli volume info "$VOL" | grep -q '^Status: Started'; then
    quiet "volume stop" gcli volume stop "$VOL"
  fi
  quiet "volume start" gcli volume start "$VOL"
}

undo_failed_start() {
  local rc=$?
  [ "$rc" = 0 ] || teardown >/dev/null 2>&1
  exit "$rc"
}

start() {
  local mount=/mnt/pfs delay=0 rate="" timeout=60 t0 n f
  DATA=/var/lib/hpcio-pfs
  while [ $# -gt 0 ]; do
    case $1 in
      --mount) mount=${2:?}; shift 2 ;;
      --data) DATA=${2:?}; shift 2 ;;
      --delay-us) delay=${2:?}; shift 2 ;;
      --rate) rate=${2:?}; shift 2 ;;
      --timeout) timeout=${2:?}; shift 2 ;;
      *) die "start: unknown option '$1' (see the head of $0)" ;;
    esac
  done
  [[ $delay =~ ^[0-9]+$ ]] || die "--delay-us wants microseconds, got '$delay'"
  [[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout wants seconds, got '$timeout'"
  [ "$(id -u)" = 0 ] || die "needs root"
  local busy="a testbed is already up or half up ($STATE); run '$0 stop' first"
  if [ -e "$STATE" ]; then
    stale || die "$busy"
    echo "pfs-local: $STATE was left by a testbed that no longer runs (a reboot, a kill): removed" >&2
    ( teardown ) >/dev/null 2>&1 || true
  fi
  mount=$(realpath -m -- "$mount"); DATA=$(realpath -m -- "$DATA")
  [[ $mount$DATA =~ [[:space:]] ]] && die "paths with spaces are not supported"
  if [ -e "$mount" ]; then
    [ -d "$mount" ] || die "mount point $mount is not a directory"
    mountpoint -q "$mount" && die "mount point $mount is already a mount point"
    [ -z "$(ls -A "$mount")" ] || die "mount point $mount is not empty"
  fi
  if [ -e "$DATA" ] && [ ! -e "$DATA/.hpcio-pfs" ] && [ -n "$(ls -A "$DATA")" ]; then
    die "--data $DATA is not empty and was not made by this script"
  fi
  install_pkgs
  if ns_up || ip link show "$VH" >/dev/null 2>&1; then die "$busy"; fi
  [ -c /dev/fuse ] || die "no /dev/fuse here (a container needs --device /dev/fuse)"

  t0=$(now)
  trap undo_failed_start EXIT
  mkdir -p "$STATE" "$DATA"
  : >"$STATE/state"
  save DATA "$DATA"
  touch "$DATA/.hpcio-pfs"     # marks what stop --wipe may delete
  mkdir -p "$DATA/log" "$DATA/glusterd" "$DATA/brick0" "$DATA/brick1"
  n=$(pick_net)
  echo "$n" >"$DATA/addr"
  save HOST_IP "10.254.$n.1"; save NS_IP "10.254.$n.2"

  save NETNS "$NS"
  quiet "ip netns add" ip netns add "$NS"
  quiet "veth" ip link add "$VH" type veth peer name "$VN" netns "$NS"
  quiet "veth" ip addr add "$HOST_IP/30" dev "$VH"
  quiet "veth" ip link set "$VH" up
  quiet "veth" ip -n "$NS" addr add "$NS_IP/30" dev "$VN"
  quiet "veth" ip -n "$NS" link set "$VN" up
  quiet "veth" ip -n "$NS" link set lo up
  if [ -n "$rate" ]; then      # both directions: reads leave the namespace, writes enter it
    quiet "--rate $rate needs tc with tbf" tc qdisc add dev "$VH" root tbf rate "$rate" burst 256kb latency 50ms
    quiet "--rate $rate needs tc with tbf" tc -n "$NS" qdisc add dev "$VN" root tbf rate "$rate" burst 256kb latency 50ms
  fi
  save RATE "$rate"

  cat >"$STATE/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $DATA/glusterd
    option run-directory $STATE/run
    option glusterd-sockfile $STATE/glusterd.socket
    option logging-directory $DATA/log
    option transport-type socket
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
end-volume
EOF
  for f in glusterd.log glusterd.out client.log; do : >"$DATA/log/$f"; done  # this start's lines only
  setsid ip netns exec "$NS" glusterd -N -f "$STATE/glusterd.vol" -p "$STATE/glusterd.pid" \
    -l "$DATA/log/glusterd.log" </dev/null >>"$DATA/log/glusterd.out" 2>&1 &
  save GLUSTERD $!
  wait_for "$timeout" glusterd_up ||
    die "glusterd did not answer in ${timeout}s: $(glog)"
  alive "$GLUSTERD" || die "glusterd exited: $(glog)"

  if ! gcli volume info "$VOL" >/dev/null 2>&1; then
    quiet "volume create" gcli volume create "$VOL" "$NS_IP:$DATA/brick0" "$NS_IP:$DATA/brick1" force
    quiet "volume set" gcli volume set "$VOL" debug.delay-gen posix
  fi
  for o in "${CACHES_OFF[@]}"; do quiet "volume set $o" gcli volume set "$VOL" "$o" off; done
  quiet "volume set" gcli volume set "$VOL" performance.write-behind on
  set_delay "$delay"
  save DELAY_US "$delay"

  if [ ! -e "$mount" ]; then mkdir -p "$mount"; save MADE_MOUNT 1; fi
  save MOUNT "$mount"
  quiet "mount" glusterfs --process-name fuse --volfile-server="$NS_IP" --volfile-id="$VOL" \
    --pid-file="$STATE/client.pid" --log-file="$DATA/log/client.log" "$mount"
  save CLIENT "$(cat "$STATE/client.pid")"
  wait_for "$timeout" clients_connected ||
    die "the client did not reach both bricks in ${timeout}s: $(tail -n1 "$DATA/log/client.log")"
  trap - EXIT
  printf 'pfs-local: up in %.1f s: %s:%s on %s (bricks in %s; delay %s us; rate %s)\n' \
    "$(( $(now) - t0 ))e-6" "$NS_IP" "$VOL" "$mount" "$DATA" "$delay" "${rate:-none}"
}

install_pkgs() {
  local c out
  for c in glusterd glusterfs gluster ip tc; do
    command -v "$c" >/dev/null && continue
    out=$( { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
             --no-install-recommends "${PKGS[@]}"; } 2>&1) ||
      die "cannot install ${PKGS[*]} (apt-get: $(tail -n1 <<<"$out"))"
    return
  done
}

# --- delay, status ---------------------------------------------------------------------------

delay() {
  [[ ${1:-} =~ ^[0-9]+$ ]] || die "delay wants microseconds, got '${1:-}'"
  [ "$(id -u)" = 0 ] || die "needs root"
  load_state
  { [ -n "${CLIENT:-}" ] && gcli pool list >/dev/null 2>&1; } || die "no testbed up ($0 status)"
  set_delay "$1"
  sed -i '/^DELAY_US=/d' "$STATE/state"; save DELAY_US "$1"
  wait_for 60 clients_connected || die "the client did not reconnect to both bricks"
  echo "pfs-local: delay $1 us"
}

status() {                     # asks glusterd only when ours is running: the CLI makes its log dir
  local up=0 gd="" bricks=0 pct="" dur
  [ "$(id -u)" = 0 ] || die "needs root"
  load_state
  if ns_up; then
    echo "namespace  $NS up (${HOST_IP:-?} <-> ${NS_IP:-?})"; up=$((up + 1))
  else echo "namespace  $NS down"; fi
  if owns "${GLUSTERD:-}" "$STATE/glusterd.vol" && gcli pool list >/dev/null 2>&1; then
    gd=1; echo "glusterd   up (pid $GLUSTERD, state in $DATA/glusterd)"; up=$((up + 1))
  else echo "glusterd   down"; fi
  if [ -n "$gd" ]; then
    bricks=$(gcli volume status "$VOL" detail 2>/dev/null | grep -c '^Online *: Y') || true
  fi
  if [ "$bricks" = 2 ]; then
    echo "volume     $VOL started, 2/2 bricks online ($DATA/brick0, brick1)"; up=$((up + 1))
  else echo "volume     $VOL down ($bricks/2 bricks online)"; fi
  if [ -n "${MOUNT:-}" ] && mountpoint -q "$MOUNT" && owns "${CLIENT:-}" "$STATE/client.pid"; then
    echo "mount      $MOUNT mounted (client pid $CLIENT)"; up=$((up + 1))
  else echo "mount      ${MOUNT:-none} not mounted"; fi
  if [ -n "$gd" ]; then
    pct=$(gcli volume get "$VOL" delay-gen.delay-percentage 2>/dev/null | awk '/^delay-gen/ {print $2}') || true
    dur=$(gcli volume get "$VOL" delay-gen.delay-duration 2>/dev/null | awk '/^delay-gen/ {print $2}') || true
  fi
  if [ "$pct" = 100 ]; then
    echo "delay      $dur us per request; rate ${RATE:-none}"; up=$((up + 1))
  elif [ "$pct" = 0 ]; then
    echo "delay      none; rate ${RATE:-none}"; up=$((up + 1))
  else echo "delay      unknown (volume not answering); rate ${RATE:-none}"; fi
  [ "$up" = 5 ] || exit 3
}

stale() {                      # STATE names nothing that runs: no namespace, link, process or mount
  ( load_state
    ! ns_up && ! ip link show "$VH" >/dev/null 2>&1 &&
      ! owns "${GLUSTERD:-}" "$STATE/glusterd.vol" && ! owns "${CLIENT:-}" "$STATE/client.pid" &&
      ! { [ -n "${MOUNT:-}" ] && mountpoint -q "$MOUNT"; } )
}

# --- stop ------------------------------------------------------------------------------------

teardown() {                   # whatever of a testbed is up, from the state start recorded
  local p s socks=() pids=()
  load_state
  CLIENT=${CLIENT:-$(cat "$STATE/client.pid" 2>/dev/null || true)}
  GLUSTERD=${GLUSTERD:-$(cat "$STATE/glusterd.pid" 2>/dev/null || true)}
  if [ -n "${MOUNT:-}" ] && grep -q " $MOUNT fuse.glusterfs " /proc/mounts; then
    umount "$MOUNT" 2>/dev/null || umount -l "$MOUNT" || true
  fi
  owns "${CLIENT:-}" "$STATE/client.pid" && end_pids "$CLIENT"
  if ns_up; then
    for p in $(ip netns pids "$NS"); do                 # bricks leave their sockets behind
      s=$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -A1 -x -- -S | tail -n1) || true
      [ -n "$s" ] && socks+=("$s")
    done
    if owns "${GLUSTERD:-}" "$STATE/glusterd.vol"; then # stopped, so a later start is clean
      gcli volume stop "$VOL" >/dev/null 2>&1 || true
    fi
    mapfile -t pids < <(ip netns pids "$NS")            # glusterd, bricks: all ours
    end_pids "${pids[@]}"
    rm -f "${socks[@]}"
    ip netns del "$NS"
  fi
  ip link del "$VH" 2>/dev/null || true     # gone with the namespace, unless half made
  if [ -n "${MADE_MOUNT:-}" ]; then rmdir "$MOUNT" 2>/dev/null || true; fi
  rm -rf "$STATE"
}

stop() {
  local wipe=""
  DATA=""
  while [ $# -gt 0 ]; do
    case $1 in
      --wipe) wipe=1; shift ;;
      --data) DATA=${2:?}; shift 2 ;;
      *) die "stop: unknown option '$1'" ;;
    esac
  done
  [ "$(id -u)" = 0 ] || die "needs root"
  local data=${DATA:-/var/lib/hpcio-pfs}
  load_state                   # a testbed that is up names its own data dir
  data=${DATA:-$data}
  teardown
  if [ -n "$wipe" ] && [ -e "$data/.hpcio-pfs" ]; then     # only what start made there
    rm -rf "$data/glusterd" "$data/brick0" "$data/brick1" "$data/log" "$data/addr" \
      "$data/.hpcio-pfs"
    rmdir "$data" 2>/dev/null || true
  fi
  echo "pfs-local: stopped${wipe:+, $data wiped}"
}

cmd=${1:-}; shift || true
case $cmd in
  start) start "$@" ;;
  stop) stop "$@" ;;
  status) status ;;
  delay) delay "$@" ;;
  *) die "usage: $0 start|stop|status|delay (options at the head of the script)" ;;
esac
