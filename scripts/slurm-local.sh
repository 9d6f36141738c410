#!/usr/bin/env bash
# Start a one-node Slurm (slurmctld + slurmd + munged, pmi2) on this machine, for tests and
# for trying hpcio's job templates without a cluster. Needs root and Debian's packages.
#   scripts/slurm-local.sh start   install if needed, write a config, start the daemons
#   scripts/slurm-local.sh stop
set -euo pipefail
cmd=${1:-start}
conf=/etc/slurm/slurm.conf

stop() {                       # by pid file: other slurmds here (cluster-local.sh) stay up
  local f p
  for f in /run/slurmd.pid /run/slurmctld.pid; do
    p=$(cat "$f" 2>/dev/null) || continue
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qE '^(/usr/sbin/)?slurm(ctl)?d'; then
      kill "$p" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "slurm-local: needs root" >&2; exit 2; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > "$conf" <<CONF
ClusterName=hpcio-local
SlurmctldHost=$host
AuthType=auth/munge
MpiDefault=pmi2
KillOnBadExit=1
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmUser=root
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF

if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged || /usr/sbin/munged --force

stop
sleep 0.5
slurmctld
slurmd
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "slurm-local: up ($host, $cpus CPUs)"; exit 0
  fi
  scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 0.5
done
echo "slurm-local: node did not come up; see /var/log/slurm/" >&2
exit 1
