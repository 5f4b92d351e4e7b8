#!/bin/bash
# A one-machine Slurm "cluster" (munge + slurmctld + slurmd on localhost) to try distbench's sbatch
# scripts for real: the jobs run on this machine, with the same sbatch/srun/scontrol as a cluster.
#
#   sudo scripts/slurm-local.sh          # install (Debian/Ubuntu: slurm-wlm, munge), configure, start
#   sudo scripts/slurm-local.sh status   # exit 0 when the node is up and idle/allocated
#   sudo scripts/slurm-local.sh stop     # stop the daemons this machine runs (slurmd, slurmctld, munged)
#
# Idempotent: running it again leaves running daemons alone (a changed slurm.conf restarts them).
# It writes /etc/slurm/slurm.conf, and refuses to replace one it did not write (a real cluster's).
# Needs root. The test suite (tests/test_slurm.py) runs it and skips with the reason when it fails.
set -euo pipefail

ACTION=${1:-start}
CONF_DIR=${SLURM_CONF_DIR:-/etc/slurm}
CONF=$CONF_DIR/slurm.conf
MARKER="# written by distbench scripts/slurm-local.sh"
STATE=/var/spool/distbench-slurm
LOGS=/var/log/distbench-slurm
PARTITION=${SLURM_LOCAL_PARTITION:-debug}
WAIT_S=${SLURM_LOCAL_WAIT_S:-60}
NODE=$(hostname -s)

say() { echo "slurm-local: $*"; }
die() { echo "slurm-local: error: $*" >&2; exit 1; }

running() {  # running NAME PIDFILE
    [[ -f $2 ]] && kill -0 "$(cat "$2")" 2>/dev/null
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || die "apt-get not found: install slurm-wlm and munge with your package manager"
    say "installing slurm-wlm and munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null || die "apt-get install slurm-wlm munge failed"
}

write_conf() {
    local cpus tmp
    cpus=$(nproc)
    mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/d" "$LOGS"
    if [[ -f $CONF ]] && ! grep -qF "$MARKER" "$CONF"; then
        die "$CONF exists and was not written by this script; not touching a real cluster's configuration"
    fi
    tmp=$(mktemp)
    cat > "$tmp" <<EOF
$MARKER
# One node (this machine) with its real CPU count; no cgroups (works in containers).
ClusterName=distbench-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=/run/distbench-slurmctld.pid
SlurmdPidFile=/run/distbench-slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
KillWait=10
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    if [[ -f $CONF ]] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
        return 1  # unchanged
    fi
    install -m 0644 "$tmp" "$CONF"
    rm -f "$tmp"
    say "wrote $CONF ($NODE, $cpus CPUs, partition $PARTITION)"
    return 0
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return
    fi
    [[ -s /etc/munge/munge.key ]] || { mungekey --create >/dev/null 2>&1 || /usr/sbin/create-munge-key -f >/dev/null; }
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 0400 /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
    for _ in $(seq 20); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.5
    done
    die "munge does not answer after starting munged"
}

stop_daemons() {
    local name pidfile pid
    for name in slurmd slurmctld; do
        pidfile=/run/distbench-$name.pid
        if running "$name" "$pidfile"; then
            pid=$(cat "$pidfile")
            say "stopping $name ($pid)"
            kill "$pid"
            for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        fi
    done
}

node_state() {
    sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1 | tr -d '*~#'
}

start() {
    [[ $(id -u) == 0 ]] || die "needs root (it installs packages and starts daemons)"
    install_packages
    local changed=0
    write_conf && changed=1
    start_munge
    if [[ $changed == 1 ]]; then
        stop_daemons
    fi
    if ! running slurmctld /run/distbench-slurmctld.pid; then
        say "starting slurmctld"
        slurmctld -f "$CONF" || die "slurmctld did not start (see $LOGS/slurmctld.log)"
    fi
    if ! running slurmd /run/distbench-slurmd.pid; then
        say "starting slurmd"
        slurmd -f "$CONF" || die "slurmd did not start (see $LOGS/slurmd.log)"
    fi
    local state=""
    for _ in $(seq $((WAIT_S * 2))); do
        state=$(node_state)
        case $state in
            idle|mixed|allocated|completing) say "node $NODE is $state"; return 0 ;;
            down|drained|draining|drain|fail|failing)
                scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "node $NODE is not idle after ${WAIT_S}s (state: ${state:-unknown}); see $LOGS/slurmctld.log and $LOGS/slurmd.log"
}

stop_all() {
    stop_daemons
    # munged too, but only on the one-machine cluster this script set up (a real node needs it).
    if [[ -f $CONF ]] && grep -qF "$MARKER" "$CONF" && running munged /run/munge/munged.pid; then
        say "stopping munged"
        kill "$(cat /run/munge/munged.pid)"
    fi
}

case $ACTION in
    start) start ;;
    stop) stop_all ;;
    status)
        state=$(node_state)
        case $state in idle|mixed|allocated|completing) say "node $NODE is $state" ;; *) exit 1 ;; esac ;;
    *) die "usage: $0 [start|status|stop]" ;;
esac
