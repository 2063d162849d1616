#!/usr/bin/env bash
# Start a real one-node SLURM cluster on this machine for the `slurm` tests (`.ci/run`).
#
# Idempotent; run as root. Installs slurmctld/slurmd/slurm-client/munge only when
# missing, creates a munge key, starts munged, writes a slurm.conf for this host
# (no accounting: sacct does not work, which cemctl must cope with), starts
# slurmctld and slurmd, and waits until `sinfo` shows the node idle.
set -euo pipefail

TIMEOUT_S="${SLURM_SETUP_TIMEOUT_S:-60}"
HOST="$(hostname -s)"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"

log() { echo "setup_slurm: $*"; }

if [ "$(id -u)" != 0 ]; then
  echo "setup_slurm: must run as root" >&2
  exit 1
fi

# 1. Packages (only when missing).
missing=()
for bin in slurmctld slurmd sinfo munged; do
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || missing+=("$bin")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing slurm and munge (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null
  fi
fi

# 2. Munge: key + daemon.
mkdir -p /etc/munge /var/log/munge /var/lib/munge /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /var/log/munge /var/lib/munge /run/munge
chmod 400 /etc/munge/munge.key
chmod 700 /etc/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "starting munged"
  su -s /bin/sh munge -c /usr/sbin/munged
  for _ in $(seq 1 20); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.25
  done
fi
munge -n | unmunge >/dev/null

# 3. slurm.conf for this host.
CPUS="$(nproc)"
MEM_MB="$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)"
REAL_MEM_MB=$(( MEM_MB * 9 / 10 ))
mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
NEW_CONF="$(cat <<EOF
# Written by cemctl .ci/setup_slurm.sh: one node, no accounting.
ClusterName=cemctl
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=10
Waittime=0
MaxArraySize=1001
NodeName=$HOST CPUs=$CPUS RealMemory=$REAL_MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
)"
conf_changed=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
  printf '%s\n' "$NEW_CONF" > "$CONF"
  conf_changed=1
fi

# 4. Daemons.
if [ "$conf_changed" = 1 ]; then
  # Restart our own daemons (by the pids they recorded) so they read the new config.
  for pidfile in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid; do
    if [ -s "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
  for _ in $(seq 1 20); do
    pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break
    sleep 0.25
  done
fi
if ! pgrep -x slurmctld >/dev/null; then
  log "starting slurmctld"
  slurmctld -c
fi
if ! pgrep -x slurmd >/dev/null; then
  log "starting slurmd"
  slurmd
fi

# 5. Wait for the node to be idle.
deadline=$(( $(date +%s) + TIMEOUT_S ))
while true; do
  state="$(sinfo -h -n "$HOST" -o '%t' 2>/dev/null | head -n1 || true)"
  case "$state" in
    idle|mix|alloc) break ;;
    down*|drain*)
      scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "setup_slurm: node $HOST not idle after ${TIMEOUT_S}s (state: ${state:-none})" >&2
    exit 1
  fi
  sleep 0.5
done
log "SLURM cluster up: node $HOST ($CPUS CPUs, ${REAL_MEM_MB} MB) state $state, partition debug"
