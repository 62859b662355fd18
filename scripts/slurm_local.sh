#!/usr/bin/env bash
# A one-machine SLURM cluster for the cluster tests (`make test-slurm`, `.ci/run`):
#
#   scripts/slurm_local.sh up     # install (apt, when missing), configure, start; wait until idle
#   scripts/slurm_local.sh down   # stop every daemon this script started; remove its /etc/hosts lines
#   scripts/slurm_local.sh env    # print `export SLURM_CONF=...` for the running cluster
#
# Layout: two node names, n1 and n2, each its own slurmd on this host (`slurmd -N n1`, distinct
# ports). Debian's slurm-wlm runs several slurmd on one host (checked on 22.05.8: both register
# and `srun -N2` places one task on each), so neither network namespaces nor the one-node
# fallback are needed. Each node declares 1 CPU, so at most two single-CPU jobs run at once on a
# 2-core machine. Partition `cpu` (no GPU, no GRES). n1/n2 resolve to 127.0.0.1 through
# /etc/hosts, because Lightning's SLURMEnvironment uses the first node name as MASTER_ADDR.
#
# Accounting: `sacct` only answers through slurmdbd (22.05 has no filetxt accounting storage and
# sacct no longer reads jobcomp files), and submitit polls job states with sacct, so the
# script runs a private MariaDB (datadir, socket and port under the state dir) and slurmdbd,
# with jobacct_gather/linux for the steps' figures.
#
# Everything lives under $DENSEX_SLURM_DIR (default /tmp/densex-slurm): configs, logs, spool,
# state, database, pid files. munged is reused when one already answers on the default socket.
# Needs root (apt, daemons as root, /etc/hosts). Ports: DENSEX_SLURM_PORT_BASE (16800) + 17
# slurmctld, + 19 slurmdbd, + 21/22 slurmd n1/n2, + 6 MariaDB.
set -euo pipefail

DIR=${DENSEX_SLURM_DIR:-/tmp/densex-slurm}
BASE=${DENSEX_SLURM_PORT_BASE:-16800}
CTLD_PORT=$((BASE + 17)) DBD_PORT=$((BASE + 19)) DB_PORT=$((BASE + 6))
NODES=(n1 n2)
HOSTS_TAG="# densex-slurm"

log() { echo "slurm_local: $*" >&2; }
die() { log "error: $*"; exit 1; }

install_packages() {
  local missing=()
  for cmd in slurmctld slurmd slurmdbd sinfo sacct munged mariadbd mariadb-install-db; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing slurm-wlm slurmdbd munge mariadb-server (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm slurmdbd munge mariadb-server >/dev/null
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munged already answers: reusing it"
    return 0
  fi
  [ -s /etc/munge/munge.key ] || { mungekey --create --force; chown munge:munge /etc/munge/munge.key; }
  mkdir -p /run/munge "$DIR/munge"
  chown munge:munge /run/munge "$DIR/munge"
  runuser -u munge -- munged --num-threads=10 --pid-file="$DIR/munge/munged.pid" \
    --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0; sleep 0.2; done
  die "munged did not start (see $DIR/munge/munged.log)"
}

start_mariadb() {
  local db="$DIR/mysql"
  if [ ! -d "$db/data/mysql" ]; then
    mkdir -p "$db"
    mariadb-install-db --user=root --datadir="$db/data" --auth-root-authentication-method=socket \
      >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $DIR/log/mariadb-install.log"
  fi
  mariadbd --no-defaults --user=root --datadir="$db/data" --socket="$db/mysqld.sock" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$db/mariadbd.pid" \
    --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=32M \
    --innodb-log-file-size=16M >/dev/null 2>&1 &
  for _ in $(seq 100); do
    mariadb --no-defaults -S "$db/mysqld.sock" -u root -e "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.3
  done
  mariadb --no-defaults -S "$db/mysqld.sock" -u root -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'densex';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "MariaDB did not start: $DIR/log/mariadb.log"
}

write_configs() {
  local mem cpus=1
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  cat >"$DIR/slurm.conf" <<EOF
# written by scripts/slurm_local.sh: a one-machine cluster, two node names on this host
ClusterName=densex
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=300
InactiveLimit=0
MessageTimeout=30
SlurmdTimeout=60
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
JobCompType=jobcomp/none
MailProg=/bin/true
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASE + 21)) CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASE + 22)) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=cpu Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$DIR/slurmdbd.conf" <<EOF
# written by scripts/slurm_local.sh
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
AuthType=auth/munge
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=densex
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/slurmdbd.conf"
}

add_hosts() {
  grep -q "$HOSTS_TAG" /etc/hosts && return 0
  # /etc/hosts may be a bind mount: rewrite in place, never replace the file
  echo "127.0.0.1 ${NODES[*]} $HOSTS_TAG" >>/etc/hosts
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local seconds=$1 what=$2; shift 2
  for _ in $(seq $((seconds * 2))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  die "timed out after ${seconds}s waiting for $what (logs: $DIR/log)"
}

close_inherited_fds() {
  # the daemons outlive this script: they must not keep the caller's descriptors open (a lock
  # that `flock FILE scripts/slurm_local.sh up` holds would stay held until `down`; a CI log
  # pipe would never reach EOF). 255 is the one bash reads this script from.
  local fd
  for fd in $(ls /proc/$$/fd); do
    case $fd in 0 | 1 | 2 | 255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
  done
}

nodes_idle() {
  [ "$(sinfo -h -N -o '%N %t' | awk '$2 == "idle"' | wc -l)" -eq ${#NODES[@]} ]
}

up() {
  [ "$(id -u)" -eq 0 ] || die "needs root (apt-get, daemons, /etc/hosts)"
  export SLURM_CONF="$DIR/slurm.conf"
  if [ -f "$DIR/run/slurmctld.pid" ] && kill -0 "$(cat "$DIR/run/slurmctld.pid")" 2>/dev/null; then
    log "already up ($SLURM_CONF)"; wait_for 60 "idle nodes" nodes_idle; return 0
  fi
  install_packages
  close_inherited_fds
  mkdir -p "$DIR"/{state,run,log} "${NODES[@]/#/$DIR/spool/}"
  add_hosts
  start_munge
  write_configs
  start_mariadb
  slurmdbd
  wait_for 60 "slurmdbd" sacctmgr -n show cluster
  sacctmgr -i -Q add cluster densex >/dev/null 2>&1 || true
  slurmctld
  wait_for 60 "slurmctld" scontrol ping
  for n in "${NODES[@]}"; do slurmd -N "$n"; done
  wait_for 120 "nodes n1, n2 idle" nodes_idle
  sinfo -N -o '%N %P %t %c %m'
  log "up: export SLURM_CONF=$SLURM_CONF"
}

stop_pid() {  # stop_pid PIDFILE: TERM, then KILL after 20 s
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$file"
}

down() {
  export SLURM_CONF="$DIR/slurm.conf"
  if [ -f "$SLURM_CONF" ] && scontrol ping >/dev/null 2>&1; then
    scancel --full "$(squeue -h -o %i | paste -sd, -)" >/dev/null 2>&1 || true
  fi
  for n in "${NODES[@]}"; do stop_pid "$DIR/run/slurmd-$n.pid"; done
  stop_pid "$DIR/run/slurmctld.pid"
  stop_pid "$DIR/run/slurmdbd.pid"
  stop_pid "$DIR/mysql/mariadbd.pid"
  stop_pid "$DIR/munge/munged.pid"
  if grep -q "$HOSTS_TAG" /etc/hosts; then
    local kept; kept=$(grep -v "$HOSTS_TAG" /etc/hosts)
    printf '%s\n' "$kept" >/etc/hosts
  fi
  rm -rf "$DIR"
  log "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
