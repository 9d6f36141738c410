#!/usr/bin/env bash
# A virtual cluster on one machine, for hpcio's multi-node logic: N nodes, each a set of Linux
# namespaces (its own hostname, network, mounts) held by one process, with its own GlusterFS
# FUSE client of the testbed's volume (scripts/pfs-local.sh; started when absent), and Slurm
# across them: one slurmctld here and one slurmd per node. Needs root.
#
#   scripts/cluster-local.sh start --nodes N [--cpus C] [--no-slurm] [pfs-local start options]
#   scripts/cluster-local.sh status           one line per node; exit 0 up, 3 down or half up
#   scripts/cluster-local.sh exec NODE CMD... run CMD in NODE's namespaces (in this directory)
#   scripts/cluster-local.sh mpiexec ARGS...  mpiexec (hydra) with one proxy per node
#   scripts/cluster-local.sh env              the variables srun/sbatch need (eval it)
#   scripts/cluster-local.sh stop
#
# Nodes are hpcio-n1..hpcio-nN at 10.254.B.(10+k) on a bridge hpcbr0 (10.254.B.1, B the first
# free /24 from 2), routed to the testbed's server; each node sees /etc/hosts with every node
# and this machine (its hostname resolves to the bridge address there). The volume is mounted
# at the testbed's mount point (default /mnt/pfs) inside every node by the node's own client:
# separate FUSE mounts have separate page caches, so a file read on one node is cached there
# only, and a cold start must clear every node, as on a real cluster.
#
# --nodes N   at most 4 per core and one per GiB of available memory (a node's client,
#             slurmd and two ranks of hpcio.train need about that)
# --cpus C    CPUs each node announces to Slurm (default: this machine's); the nodes share
#             this machine's cores
# --no-slurm  namespaces and mounts only (the mpiexec path)
#
# Slurm (Debian's slurm-wlm, installed when missing) runs with its own config, ports
# (6917/6918) and munged, so a one-node Slurm (scripts/slurm-local.sh) can run beside it:
#   eval "$(scripts/cluster-local.sh env)"; srun -N 4 -n 8 --mpi=pmi2 python -m hpcio.train ...
# MPI between nodes goes over TCP across the bridge; ranks on one node share memory.
#
# start refuses while a cluster is up or half up (stop cleans one), and clears the state of
# one that no longer runs (after a reboot or a kill) without signalling anything; a start that fails
# removes what it made. stop ends, by pid, every process in the nodes' namespaces and what
# start started, unmounts and deletes the links. Logs: /var/log/hpcio-cluster/.
set -euo pipefail

STATE=/run/hpcio-cluster
LOGS=/var/log/hpcio-cluster
PFS_STATE=/run/hpcio-pfs/state
BR=hpcbr0
PREFIX=hpcio-n
CTLD_PORT=6917 SLURMD_PORT=6918
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PFS=$HERE/pfs-local.sh

die() { echo "cluster-local: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/procs.sh"
load_state() { [ -f "$STATE/state" ] && . "$STATE/state"; true; }
save() { printf '%s=%q\n' "$1" "$2" >>"$STATE/state"; printf -v "$1" '%s' "$2"; }
quiet() {                      # run; on failure, die with what and the command's last line
  local what=$1 out; shift
  out=$("$@" 2>&1) || die "$what: $(tail -n1 <<<"$out")"
}
need_root() { [ "$(id -u)" = 0 ] || die "needs root (namespaces, FUSE mounts, a bridge)"; }
var() { local v="$1$2"; echo "${!v:-}"; }          # var HOLDER 3 -> $HOLDER3
name() { echo "$PREFIX$1"; }
addr() { echo "10.254.$NET.$((10 + $1))"; }
node_of() {                    # hpcio-n3 or 3 -> 3
  local k=${1#"$PREFIX"}
  [[ $k =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le "${NODES:-0}" ] || return 1
  echo "$k"
}
in_node() { local k=$1; shift; nsenter -t "$(var HOLDER "$k")" -u -n -m -- "$@"; }
ns_ids() { readlink "/proc/$1/ns/uts" "/proc/$1/ns/net" "/proc/$1/ns/mnt" 2>/dev/null | tr '\n' ' '; }
holds() {                      # the holder of node k is alive and still holds its namespaces
  local p; p=$(var HOLDER "$1")
  alive "$p" && [ "$(ns_ids "$p")" = "$(var NSIDS "$1")" ]
}
unshared() {                   # pid $1 has left all three of this shell's namespaces
  local a b; a=($(ns_ids "$1")) b=($(ns_ids $$))
  [ ${#a[@]} = 3 ] && [ "${a[0]}" != "${b[0]}" ] && [ "${a[1]}" != "${b[1]}" ] && [ "${a[2]}" != "${b[2]}" ]
}
mounted_in() { in_node "$1" grep -q " $MOUNT fuse.glusterfs " /proc/self/mounts; }
conf_env() { echo "SLURM_CONF=$STATE/slurm.conf"; }
# MPICH's UCX takes every rank of one kernel for one machine (shared memory, CMA), whatever
# the namespaces: between nodes, TCP on the node's link, as on a cluster
UCX_ENV="UCX_TLS=tcp,self UCX_NET_DEVICES=eth0"

# --- start -----------------------------------------------------------------------------------

undo_failed_start() {
  local rc=$?
  [ "$rc" = 0 ] || teardown >/dev/null 2>&1
  exit "$rc"
}

pick_net() {                   # the first 10.254.B.0/24 (B >= 2) nothing here uses or routes
  local b
  for b in $(seq 2 254); do
    ip -4 -o addr show | grep -q " 10\.254\.$b\." && continue
    ip -4 route show to match "10.254.$b.1" | grep -qv '^default' && continue
    echo "$b"; return
  done
  die "no free 10.254.B.0/24 on this machine"
}

capacity() {                   # nodes this machine can hold (see --nodes at the head)
  local mem cap
  mem=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) / 1048576 ))
  cap=$(( 4 * $(nproc) ))
  [ "$mem" -lt "$cap" ] && cap=$mem
  echo "$cap"
}

start() {
  local nodes="" cpus slurm=1 pfs_args=() k t0 mem
  cpus=$(nproc)
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:-}; shift 2 || die "--nodes wants a number" ;;
      --cpus) cpus=${2:-}; shift 2 || die "--cpus wants a number" ;;
      --no-slurm) slurm=""; shift ;;
      --mount|--data|--delay-us|--rate|--timeout) pfs_args+=("$1" "${2:-}"); shift 2 || die "$1 wants a value" ;;
      *) die "start: unknown option '$1' (see the head of $0)" ;;
    esac
  done
  [[ $nodes =~ ^[1-9][0-9]*$ ]] || die "start wants --nodes N (N >= 1), got '${nodes}'"
  [[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus wants a number, got '$cpus'"
  need_root
  local cap; cap=$(capacity)
  [ "$nodes" -le "$cap" ] ||
    die "--nodes $nodes: this machine holds at most $cap ($(nproc) cores x 4, 1 GiB available memory each)"
  if [ -e "$STATE" ]; then
    stale || die "a cluster is already up or half up ($STATE); run '$0 stop' first"
    echo "cluster-local: $STATE was left by a cluster that no longer runs (a reboot, a kill): removed" >&2
    rm -rf "$STATE"            # its pids may belong to others now: nothing is signalled
  fi
  ip link show "$BR" >/dev/null 2>&1 && die "bridge $BR exists but no cluster state: not ours, not touched"
  for c in unshare nsenter ip glusterfs; do command -v "$c" >/dev/null || die "needs $c"; done
  [ -n "$slurm" ] && install_slurm

  t0=$(now)
  trap undo_failed_start EXIT
  mkdir -p "$STATE" "$LOGS"
  : >"$STATE/state"
  save NODES "$nodes"; save SLURM "$slurm"

  # the testbed: ours to stop only when we started it
  if [ ! -f "$PFS_STATE" ]; then
    save PFS_STARTED 1
    "$PFS" start "${pfs_args[@]}" >/dev/null || die "the GlusterFS testbed did not start (scripts/pfs-local.sh)"
  elif [ ${#pfs_args[@]} -gt 0 ]; then
    die "a testbed is already up: its options (${pfs_args[*]}) cannot apply; stop it or leave them out"
  fi
  "$PFS" status >/dev/null || die "the GlusterFS testbed is not fully up (scripts/pfs-local.sh status)"
  local pfs_ns pfs_host pfs_ip
  pfs_ns=$(. "$PFS_STATE"; echo "$NETNS"); pfs_host=$(. "$PFS_STATE"; echo "$HOST_IP")
  pfs_ip=$(. "$PFS_STATE"; echo "$NS_IP"); save MOUNT "$(. "$PFS_STATE"; echo "$MOUNT")"
  save PFS_NS "$pfs_ns"; save PFS_IP "$pfs_ip"
  local pfs_if; pfs_if=$(ip -o -4 addr show | awk -v a="$pfs_host/" 'index($4, a) == 1 {print $2}')
  [ -n "$pfs_if" ] || die "no link here holds the testbed's host address $pfs_host"

  save NET "$(pick_net)"
  save HOST_IP "10.254.$NET.1"
  quiet "bridge" ip link add "$BR" type bridge
  save MADE_BR 1
  quiet "bridge" ip addr add "$HOST_IP/24" dev "$BR"
  quiet "bridge" ip link set "$BR" up
  # forwarding on these two links only: requests enter on the bridge, replies on the testbed's
  save FWD_BR "$(sysctl -n "net.ipv4.conf.$BR.forwarding")"
  save PFS_IF "$pfs_if"; save FWD_PFS "$(sysctl -n "net.ipv4.conf.$pfs_if.forwarding")"
  quiet "forwarding" sysctl -qw "net.ipv4.conf.$BR.forwarding=1" "net.ipv4.conf.$pfs_if.forwarding=1"
  quiet "route to the nodes" ip -n "$pfs_ns" route add "10.254.$NET.0/24" via "$pfs_host"
  save PFS_ROUTE 1

  { grep -E '^(127\.|::1|fe00|ff0)' /etc/hosts | grep -vw "$(hostname)" || true
    echo "$HOST_IP $(hostname -s) $(hostname -f 2>/dev/null | grep -vx "$(hostname -s)" || true)"
    for k in $(seq "$nodes"); do echo "$(addr "$k") $(name "$k")"; done
    # gloo looks its peers up by the IPv4-mapped address its dual-stack socket sees
    for k in $(seq "$nodes"); do echo "::ffff:$(addr "$k") $(name "$k")"; done
  } >"$STATE/hosts"
  # the nodes' network has no DNS: a lookup /etc/hosts cannot answer must fail at once,
  # not after 10 s of retries
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$STATE/resolv.conf"
  for k in $(seq "$nodes"); do start_node "$k"; done
  for k in $(seq "$nodes"); do
    wait_for 30 in_node "$k" timeout 2 bash -c "</dev/tcp/$pfs_ip/24007" || die "$(name "$k") cannot reach the testbed at $pfs_ip"
    mount_node "$k"
  done
  printf '%s\n' '#!/bin/sh' "# hydra's launcher: HOST CMD..., as ssh takes them" \
    "exec $HERE/cluster-local.sh ssh \"\$@\"" >"$STATE/launch"
  chmod +x "$STATE/launch"
  for k in $(seq "$nodes"); do echo "$(name "$k"):$cpus"; done >"$STATE/hostfile"
  [ -n "$slurm" ] && start_slurm "$cpus"
  trap - EXIT
  printf 'cluster-local: up in %.1f s: %s nodes %s1..%s%s (10.254.%s.11..), %s mounted in each%s\n' \
    "$(( $(now) - t0 ))e-6" "$nodes" "$PREFIX" "$PREFIX" "$nodes" "$NET" "$MOUNT" \
    "${slurm:+; Slurm: eval \"\$($0 env)\"}"
}

start_node() {                 # namespaces held by a sleep, a veth to the bridge, hosts
  local k=$1 n h p
  n=$(name "$k") h=hpcn${k}h
  setsid unshare --uts --net --mount --propagation private -- sleep infinity \
    </dev/null >/dev/null 2>&1 &
  save "HOLDER$k" $!
  # until unshare has run, the pid is in this machine's namespaces: never enter it before
  wait_for 5 unshared "$(var HOLDER "$k")" || die "$n: namespaces did not come up"
  save "NSIDS$k" "$(ns_ids "$(var HOLDER "$k")")"
  in_node "$k" hostname "$n"
  quiet "$n: veth" ip link add "$h" type veth peer name eth0 netns "/proc/$(var HOLDER "$k")/ns/net"
  quiet "$n: veth" ip link set "$h" master "$BR" up
  quiet "$n: net" in_node "$k" ip link set lo up
  quiet "$n: net" in_node "$k" ip addr add "$(addr "$k")/24" dev eth0
  quiet "$n: net" in_node "$k" ip link set eth0 up
  quiet "$n: net" in_node "$k" ip route add default via "$HOST_IP"
  quiet "$n: hosts" in_node "$k" mount --bind "$STATE/hosts" /etc/hosts
  quiet "$n: resolver" in_node "$k" mount --bind "$STATE/resolv.conf" /etc/resolv.conf
}

mount_node() {                 # the node's own client, with the testbed's client options
  local k=$1 n log; n=$(name "$k") log=$LOGS/client-$(name "$1").log
  : >"$log"
  # the copy of this machine's mount that the namespace inherited: not this node's client
  in_node "$k" sh -c "grep -q ' $MOUNT fuse' /proc/self/mounts && umount -l '$MOUNT'" || true
  quiet "$n: mount" in_node "$k" glusterfs --process-name fuse --volfile-server="$PFS_IP" \
    --volfile-id=hpcio --pid-file="$STATE/client-$n.pid" --log-file="$log" "$MOUNT"
  save "CLIENT$k" "$(cat "$STATE/client-$n.pid")"
  wait_for 30 mounted_in "$k" || die "$n: the GlusterFS mount did not come up: $(last_line "$log")"
  in_node "$k" stat -t "$MOUNT" >/dev/null 2>&1 ||
    die "$n: the GlusterFS mount does not answer: $(last_line "$log")"
}

install_slurm() {
  local out
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
  out=$( { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
           slurm-wlm munge; } 2>&1) || die "cannot install slurm-wlm (apt-get: $(tail -n1 <<<"$out"))"
}

start_slurm() {
  local cpus=$1 k n host nodes
  host=$(hostname -s)
  nodes="$PREFIX[1-$NODES]"
  mkdir -p "$STATE/munge" "$STATE/ctld" "$STATE/spool"
  chmod 700 "$STATE/munge"
  [ -s /etc/munge/munge.key ] || die "no munge key (/etc/munge/munge.key)"
  # a munged of our own: its socket is a file, reachable from every node's namespaces
  setsid munged -F --force --socket="$STATE/munge/socket" --pid-file="$STATE/munge/pid" \
    --log-file="$LOGS/munged.log" --seed-file="$STATE/munge/seed" </dev/null >/dev/null 2>&1 &
  save MUNGED $!
  wait_for 10 test -S "$STATE/munge/socket" || die "munged did not start: $(last_line "$LOGS/munged.log")"
  cat >"$STATE/slurm.conf" <<CONF
ClusterName=hpcio-cluster
SlurmctldHost=$host($HOST_IP)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/socket
CredType=cred/munge
MpiDefault=pmi2
KillOnBadExit=1
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmdSpoolDir=$STATE/spool/%n
StateSaveLocation=$STATE/ctld
SlurmUser=root
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
JobAcctGatherType=jobacct_gather/none
$(for k in $(seq "$NODES"); do   # each slurmd at its node's own address
    echo "NodeName=$(name "$k") NodeAddr=$(addr "$k") CPUs=$cpus RealMemory=1024 State=UNKNOWN"
  done)
PartitionName=cluster Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  : >"$LOGS/slurmctld.log"
  setsid slurmctld -D -f "$STATE/slurm.conf" </dev/null >"$LOGS/slurmctld.out" 2>&1 &
  save SLURMCTLD $!
  wait_for 30 env "$(conf_env)" scontrol ping ||
    die "slurmctld did not answer: $(last_line "$LOGS/slurmctld.log" "$LOGS/slurmctld.out")"
  for k in $(seq "$NODES"); do
    n=$(name "$k")
    mkdir -p "$STATE/spool/$n"; : >"$LOGS/slurmd-$n.log"
    setsid nsenter -t "$(var HOLDER "$k")" -u -n -m -- env "$(conf_env)" \
      slurmd -D -N "$n" -f "$STATE/slurm.conf" </dev/null >"$LOGS/slurmd-$n.out" 2>&1 &
    save "SLURMD$k" $!
  done
  for k in $(seq "$NODES"); do
    n=$(name "$k")
    wait_for 60 node_settled "$k" || true
    node_idle "$n" || die "$n: slurmd did not come up: $(last_line "$LOGS/slurmd-$n.log" "$LOGS/slurmd-$n.out")"
  done
}

node_settled() { node_idle "$(name "$1")" || ! alive "$(var SLURMD "$1")"; }   # no wait for the dead
last_line() {                  # the last non-empty line of the first file that has one
  local f l
  for f in "$@"; do
    l=$(grep -v '^[[:space:]]*$' "$f" 2>/dev/null | tail -n1) || true
    [ -n "$l" ] && { echo "$l"; return; }
  done
  echo "(no log)"
}

node_idle() {
  local st
  st=$(env "$(conf_env)" sinfo -h -n "$1" -o %t 2>/dev/null) || return 1
  case $st in
    idle*|mix*|alloc*) return 0 ;;
    *) env "$(conf_env)" scontrol update nodename="$1" state=resume >/dev/null 2>&1; return 1 ;;
  esac
}

# --- status, exec, mpiexec -------------------------------------------------------------------

status() {
  local k n up=0 line st
  need_root
  load_state
  [ -n "${NODES:-}" ] || { echo "cluster-local: down"; exit 3; }
  for k in $(seq "$NODES"); do
    n=$(name "$k") line="$n"
    if holds "$k"; then
      line+=" up $(addr "$k") pid $(var HOLDER "$k")"
      if mounted_in "$k" && alive "$(var CLIENT "$k")"; then
        line+="; $MOUNT mounted (client $(var CLIENT "$k"))"
      else line+="; $MOUNT NOT mounted"; fi
      if [ -n "${SLURM:-}" ]; then
        st=$(env "$(conf_env)" sinfo -h -n "$n" -o %t 2>/dev/null || echo "?")
        if alive "$(var SLURMD "$k")"; then line+="; slurmd $(var SLURMD "$k") ${st:-?}"
        else line+="; slurmd down"; fi
      fi
      [[ $line == *NOT* || $line == *down* || $line == *"?"* ]] || up=$((up + 1))
    else line+=" down"; fi
    echo "$line"
  done
  [ "$up" = "$NODES" ] || exit 3
}

do_exec() {                    # exec NODE CMD...: CMD's words as given
  local k
  [ $# -ge 2 ] || die "usage: $0 exec NODE CMD..."
  load_state
  k=$(node_of "$1") || die "no node '$1' (nodes: ${PREFIX}1..${PREFIX}${NODES:-0})"
  holds "$k" || die "$1 is down ($0 status)"
  shift
  exec nsenter -t "$(var HOLDER "$k")" -u -n -m --wd="$PWD" -- "$@"
}

do_ssh() {                     # what hydra's ssh launcher runs: [-opts] NODE WORDS..., the
  while [[ ${1:-} == -* ]]; do shift; done     # words joined into one shell command, as ssh does
  [ $# -ge 2 ] || die "usage: $0 ssh NODE CMD..."
  local node=$1; shift
  do_exec "$node" sh -c "$*"
}

do_mpiexec() {
  load_state
  [ -n "${NODES:-}" ] && [ -x "$STATE/launch" ] || die "no cluster up ($0 start --nodes N)"
  export UCX_TLS=${UCX_TLS:-tcp,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-eth0}
  exec "${MPIEXEC:-mpiexec}" -launcher ssh -launcher-exec "$STATE/launch" -f "$STATE/hostfile" "$@"
}

# --- stop ------------------------------------------------------------------------------------

in_ns_of() {                   # pids whose network namespace is that of pid $1 (but $1)
  local ns p; ns=$(readlink "/proc/$1/ns/net" 2>/dev/null) || return 0
  [ "$ns" != "$(readlink /proc/$$/ns/net)" ] || return 0     # never this machine's own
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" != "$1" ] && [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$ns" ] && echo "$p"
  done
  true
}

stale() {                      # STATE names no node that still holds its namespaces, no bridge
  ( load_state
    for k in $(seq "${NODES:-0}"); do holds "$k" && exit 1; done
    ! ip link show "$BR" >/dev/null 2>&1 )
}

teardown() {
  local k p pids=()
  load_state
  for k in $(seq "${NODES:-0}"); do     # slurmd first: it would restart what it runs
    p=$(var SLURMD "$k"); alive "$p" && pids+=("$p")
  done
  end_pids "${pids[@]}"
  alive "${SLURMCTLD:-}" && end_pids "$SLURMCTLD"
  for k in $(seq "${NODES:-0}"); do
    p=$(var HOLDER "$k")
    if holds "$k"; then
      in_node "$k" umount "$MOUNT" 2>/dev/null || in_node "$k" umount -l "$MOUNT" 2>/dev/null || true
      mapfile -t pids < <(in_ns_of "$p")       # ranks, steps, the client: all in the node
      end_pids "${pids[@]}"
    fi
    if alive "$p" && grep -qaE '^(sleep|unshare)' "/proc/$p/cmdline"; then end_pids "$p"; fi
  done
  alive "${MUNGED:-}" && end_pids "$MUNGED"
  for k in $(seq "${NODES:-0}"); do ip link del "hpcn${k}h" 2>/dev/null || true; done
  [ -n "${MADE_BR:-}" ] && { ip link del "$BR" 2>/dev/null || true; }
  [ -n "${PFS_ROUTE:-}" ] && { ip -n "$PFS_NS" route del "10.254.$NET.0/24" 2>/dev/null || true; }
  [ -n "${PFS_IF:-}" ] && { sysctl -qw "net.ipv4.conf.$PFS_IF.forwarding=${FWD_PFS:-0}" 2>/dev/null || true; }
  [ -n "${PFS_STARTED:-}" ] && { "$PFS" stop >/dev/null 2>&1 || true; }
  rm -rf "$STATE"
  true
}

stop() {
  need_root
  [ -e "$STATE" ] || { echo "cluster-local: no cluster up"; return 0; }
  teardown
  echo "cluster-local: stopped"
}

cmd=${1:-}; shift || true
case $cmd in
  start) start "$@" ;;
  stop) stop ;;
  status) status ;;
  exec) do_exec "$@" ;;
  ssh) do_ssh "$@" ;;
  mpiexec) do_mpiexec "$@" ;;
  env) echo "export $(conf_env) $UCX_ENV" ;;
  *) die "usage: $0 start|stop|status|exec|mpiexec|env (options at the head of the script)" ;;
esac
