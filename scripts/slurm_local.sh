#!/usr/bin/env bash
# A two-node SLURM cluster on this machine, for the tests of tests/cluster/ and for trying the cluster
# commands of docs/guides/cluster.md without a cluster:
#
#   scripts/slurm_local.sh start    # installs slurm-wlm + munge with apt-get (root), starts the daemons
#   scripts/slurm_local.sh status   # sinfo of the cluster, or why it is not running
#   scripts/slurm_local.sh stop     # stops the daemons this script started (by their pid files)
#   scripts/slurm_local.sh env      # the line to source: export SLURM_CONF=...
#
# Nodes n1 and n2 both live on 127.0.0.1 (one slurmd each, `slurmd -N n1`, own port and spool folder),
# 4 CPUs each (oversubscribed on purpose: the config's CPU counts win over the hardware's), one partition
# `debug`. The node names resolve through /etc/hosts lines this script adds (and removes on stop): a job's
# MASTER_ADDR is its first node's name. munged runs on its own socket and key under the state folder, so a
# machine's own munge/slurm, if any, is left alone. Everything lives in $SLURM_LOCAL_DIR
# (default /tmp/captioning-slurm): slurm.conf, logs, pid files, spool and state.
# Exit status: 0 done; 3 cannot run here (not root and SLURM missing, apt-get failing): one line says why.
set -euo pipefail

STATE="${SLURM_LOCAL_DIR:-/tmp/captioning-slurm}"
CONF="$STATE/slurm.conf"
CTLD_PORT="${SLURM_LOCAL_PORT:-16817}"
HOSTS_MARK="# captioning slurm_local.sh"
NODES=(n1 n2)

say() { echo "slurm_local: $*" >&2; }
cannot() { say "cannot start: $*"; exit 3; }

install_packages() {
  command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || cannot "slurm-wlm/munge are not installed and this is not root (apt-get needs root)"
  command -v apt-get >/dev/null 2>&1 || cannot "slurm-wlm/munge are not installed and there is no apt-get"
  say "installing slurm-wlm and munge with apt-get"
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      slurm-wlm munge; } >"${TMPDIR:-/tmp}/slurm_local_apt.log" 2>&1 \
    || cannot "apt-get install slurm-wlm munge failed (log: ${TMPDIR:-/tmp}/slurm_local_apt.log)"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_conf() {
  local host cpus=4
  host="$(hostname -s)"
  cat >"$CONF" <<EOF
# Written by scripts/slurm_local.sh: two nodes on 127.0.0.1 for the tests.
ClusterName=captioning
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
NodeName=n1 NodeAddr=127.0.0.1 NodeHostname=$host Port=$((CTLD_PORT + 1)) CPUs=$cpus RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 NodeHostname=$host Port=$((CTLD_PORT + 2)) CPUs=$cpus RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
}

add_hosts() {
  grep -q "$HOSTS_MARK" /etc/hosts 2>/dev/null && return 0
  if [ -w /etc/hosts ]; then
    echo "127.0.0.1 ${NODES[*]} $HOSTS_MARK" >>/etc/hosts
  else
    getent hosts n1 >/dev/null || cannot "node names n1/n2 do not resolve and /etc/hosts is not writable"
  fi
}

remove_hosts() {
  # rewritten in place (cp, not mv): /etc/hosts may be a bind mount
  if grep -q "$HOSTS_MARK" /etc/hosts 2>/dev/null; then
    grep -v "$HOSTS_MARK" /etc/hosts >"$STATE/hosts.tmp" && cat "$STATE/hosts.tmp" >/etc/hosts
    rm -f "$STATE/hosts.tmp"
  fi
}

start() {
  if alive "$STATE/slurmctld.pid"; then say "already running ($CONF)"; return 0; fi
  install_packages
  [ "$(id -u)" = 0 ] || cannot "the daemons run as root here (SlurmUser=root); this is not root"
  mkdir -p "$STATE"/{ctld,spool/n1,spool/n2,munge}
  chmod 700 "$STATE/munge"
  write_conf
  add_hosts
  [ -f "$STATE/munge/munge.key" ] || {
    dd if=/dev/urandom bs=1 count=1024 of="$STATE/munge/munge.key" 2>/dev/null
    chmod 400 "$STATE/munge/munge.key"
  }
  alive "$STATE/munge/munged.pid" || munged --force --socket="$STATE/munge/munge.socket" \
    --key-file="$STATE/munge/munge.key" --pid-file="$STATE/munge/munged.pid" \
    --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed" \
    || cannot "munged did not start (log: $STATE/munge/munged.log)"
  export SLURM_CONF="$CONF"
  slurmctld -f "$CONF" || cannot "slurmctld did not start (log: $STATE/slurmctld.log)"
  for node in "${NODES[@]}"; do
    slurmd -f "$CONF" -N "$node" || cannot "slurmd -N $node did not start (log: $STATE/slurmd.$node.log)"
  done
  for _ in $(seq 60); do  # the nodes register within a few seconds
    if [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = "${#NODES[@]}" ]; then
      say "running: ${NODES[*]} idle; export SLURM_CONF=$CONF"
      return 0
    fi
    sleep 1
  done
  cannot "the nodes did not become idle within 60 s: $(sinfo -h -N -o '%N %t' 2>&1 | tr '\n' ' ')"
}

stop() {
  local pidfile pid
  for pidfile in "$STATE"/slurmd.*.pid "$STATE/slurmctld.pid" "$STATE/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    rm -f "$pidfile"
  done
  remove_hosts
  say "stopped"
}

status() {
  if alive "$STATE/slurmctld.pid"; then
    SLURM_CONF="$CONF" sinfo -N -o '%N %t %c'
  else
    say "not running (no live slurmctld pid file in $STATE)"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
