#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the sweep's SLURM tests and for trying --executor slurm by hand.
#
#   experiments/slurm/cluster.sh start [--accounting] [--cpus N] [DIR]   start it; prints the line to source
#   experiments/slurm/cluster.sh stop [DIR]                              cancel its jobs and stop its daemons
#   experiments/slurm/cluster.sh install                                 the Debian packages (apt-get), if missing
#
# DIR (default: $GRAPHNORM_SLURM_DIR, else /tmp/graphnorm-slurm) holds everything of one cluster: its config, its
# munge key and socket, spool, logs, pid files and (with --accounting) a MariaDB server and slurmdbd. Ports are
# picked free at start, so two clusters (two test workers) run side by side. Clients find the cluster through
# SLURM_CONF: `. DIR/env` after start. Without --accounting the cluster keeps no job history (sacct is useless), as
# some clusters do; with it, slurmdbd stores jobs in its own MariaDB. The daemons run as root, by hand (no systemd),
# with short timeouts so that tests are quick. A start that fails prints the daemons' logs and exits non-zero.
set -euo pipefail

PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "packages missing (${missing[*]}) and not root: apt-get install ${missing[*]}"
  # policy-rc.d keeps the packages' own services (a system-wide munged, mariadb, slurmd) from starting.
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}") >/dev/null ||
    die "apt-get install ${missing[*]} failed"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pid_of() { # the pid in pid file $1 if that process is alive
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

wait_for() { # wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds, else fail with the logs
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      show_logs
      die "$what did not come up within the time allowed (logs above; the cluster is in $DIR)"
    fi
    sleep 0.2
  done
}

show_logs() {
  for f in "$DIR"/log/*.log; do
    [ -f "$f" ] && { echo "---- $f" >&2; tail -n 30 "$f" >&2; }
  done
}

node_idle() { sinfo -h -N -o %T | grep -q -x idle; }

write_mariadb() {
  mkdir -p "$DIR/mysql"
  cat >"$DIR/etc/my.cnf" <<EOF
[mariadbd]
datadir=$DIR/mysql/data
socket=$DIR/mysql/mysqld.sock
pid-file=$DIR/run/mariadbd.pid
log-error=$DIR/log/mariadbd.log
bind-address=127.0.0.1
port=$DB_PORT
user=root
innodb_buffer_pool_size=16M
innodb_log_file_size=8M
performance_schema=OFF
skip-name-resolve
EOF
}

start_mariadb() {
  write_mariadb
  mariadb-install-db --defaults-file="$DIR/etc/my.cnf" --auth-root-authentication-method=socket \
    --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 || { show_logs; die "mariadb-install-db failed"; }
  mariadbd --defaults-file="$DIR/etc/my.cnf" >>"$DIR/log/mariadbd.log" 2>&1 &
  wait_for 60 "MariaDB" mariadb --socket="$DIR/mysql/mysqld.sock" -u root -e "select 1"
  mariadb --socket="$DIR/mysql/mysqld.sock" -u root -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
  # slurmdbd reads slurmdbd.conf beside $SLURM_CONF; it must be private to SlurmUser.
  install -m 600 /dev/null "$DIR/etc/slurmdbd.conf"
  cat >"$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  slurmdbd
  wait_for 60 "slurmdbd" sacctmgr -n list cluster
  sacctmgr -i add cluster "$CLUSTER" >/dev/null
}

write_slurm_conf() {
  local accounting="AccountingStorageType=accounting_storage/none"
  if [ "$ACCOUNTING" = 1 ]; then
    accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$DIR/munge/munge.socket"
  fi
  cat >"$DIR/etc/slurm.conf" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$accounting
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=2
MinJobAge=30
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  install_packages
  if [ -f "$DIR/env" ] && pid_of "$DIR/run/slurmctld.pid" >/dev/null; then
    die "a cluster is already running in $DIR (stop it first: $0 stop $DIR)"
  fi
  rm -rf "$DIR"
  mkdir -p "$DIR"/{etc,munge,spool/ctld,spool/d,log,run}
  chmod 700 "$DIR/munge"
  trap 'stop >/dev/null 2>&1' EXIT # a start that fails leaves nothing running
  HOST=$(hostname -s)
  CLUSTER="gn$(echo "$DIR" | md5sum | cut -c1-8)"
  CTLD_PORT=$(free_port)
  SLURMD_PORT=$(free_port)
  DBD_PORT=$(free_port)
  DB_PORT=$(free_port)
  export SLURM_CONF="$DIR/etc/slurm.conf"

  # Our own munged, key and socket: no system-wide munge service is needed, or touched.
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge/munge.key"
  munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" ||
    { show_logs; die "munged failed to start"; }

  write_slurm_conf
  if [ "$ACCOUNTING" = 1 ]; then
    start_mariadb
    start_slurmdbd
  fi
  slurmctld -i
  wait_for 60 "slurmctld" scontrol ping
  slurmd -N "$HOST"
  wait_for 60 "slurmd (node $HOST idle)" node_idle
  echo "export SLURM_CONF=$SLURM_CONF" >"$DIR/env"
  trap - EXIT
  echo "cluster $CLUSTER up ($CPUS CPUs, accounting: $([ "$ACCOUNTING" = 1 ] && echo slurmdbd || echo none)): . $DIR/env"
}

stop_daemons() { # SIGTERM to every daemon at once, SIGKILL to any still alive 10 s later
  local pids=() pid deadline=$((SECONDS + 10))
  for daemon in slurmd slurmctld slurmdbd mariadbd munged; do
    pid=$(pid_of "$DIR/run/$daemon.pid") && pids+=("$pid")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2>/dev/null || true
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  done
}

kill_steps() { # a job step daemon (slurmstepd) of this cluster still alive: by its socket in our spool folder
  local sockets inodes pid
  sockets=$(find "$DIR/spool/d" -type s 2>/dev/null) || return 0
  [ -n "$sockets" ] || return 0
  inodes=$(awk -v list="$sockets" 'BEGIN { n = split(list, s, "\n"); for (i = 1; i <= n; i++) want[s[i]] = 1 }
    ($8 in want) { print $7 }' /proc/net/unix)
  for inode in $inodes; do
    for fd in /proc/[0-9]*/fd/*; do
      [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ] || continue
      pid=${fd#/proc/}
      pid=${pid%%/*}
      kill -9 "$pid" 2>/dev/null || true
    done
  done
}

stop() {
  [ -d "$DIR" ] || return 0
  export SLURM_CONF="$DIR/etc/slurm.conf"
  if pid_of "$DIR/run/slurmctld.pid" >/dev/null; then
    # Cancel the jobs first, so that no job of this cluster outlives it (its slurmstepd would otherwise go on).
    squeue -h -o %A 2>/dev/null | sort -u | xargs -r scancel 2>/dev/null || true
    for _ in $(seq 50); do
      [ -z "$(squeue -h -o %A 2>/dev/null)" ] && [ -z "$(find "$DIR/spool/d" -type s 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  kill_steps
  stop_daemons
  rm -f "$DIR/env"
}

ACCOUNTING=0
CPUS=$(nproc)
DIR=${GRAPHNORM_SLURM_DIR:-/tmp/graphnorm-slurm}
command=${1:-}
shift || true
while [ $# -gt 0 ]; do
  case $1 in
  --accounting) ACCOUNTING=1 ;;
  --cpus)
    CPUS=$2
    shift
    ;;
  -*) die "unknown option $1" ;;
  *) DIR=$1 ;;
  esac
  shift
done
DIR=$(realpath -m "$DIR")

case $command in
start) start ;;
stop) stop ;;
install) install_packages ;;
*) die "usage: $0 start [--accounting] [--cpus N] [DIR] | stop [DIR] | install" ;;
esac
