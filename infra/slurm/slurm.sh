#!/usr/bin/env bash
# Runs a real Slurm on this host for tests and the demo: Debian's munged, slurmctld and
# one slurmd per node name, all from the distribution's packages (Slurm 22.05 on bookworm),
# with every file they write under ./var/slurm.
#   infra/slurm/slurm.sh install|start|stop|status|env
# `install` apt-installs slurmctld, slurmd, slurm-client and munge (root; no terminal needed),
# without letting the packages start their own services. `start` installs if needed, renders
# var/slurm/etc/slurm.conf and a munge key, and starts munged, slurmctld and the slurmds; it
# reuses what already runs and answers. `stop` stops exactly the processes whose pid files it
# wrote, and leaves no process behind; the state stays in var/slurm (removed by `stop --purge`).
# `env` prints the line that points Slurm's clients at this cluster: export SLURM_CONF=...
#
# Node names: one per lab host, named like the lab's hosts (H1..H6) unless SLURM_NODES says
# otherwise ("H1 H2 H3"). Debian's Slurm is built with --enable-multiple-slurmd (checked by
# `start`: a second slurmd on the host registers), so every node is its own slurmd on
# 127.0.0.1 with its own port, spool, log and pid file (`slurmd -N NAME`).
# Finished jobs: slurmctld keeps them in squeue/scontrol for MinJobAge (600 s here), and
# jobcomp/filetxt appends every finished job to var/slurm/jobcomp.log, which the jobs source
# reads for the ones that aged out (no slurmdbd, no database).
# Env: FABRICSCOPE_VAR (data dir parent), SLURM_NODES, SLURMCTLD_PORT (16817), SLURMD_PORT
# (first slurmd port, 16818; node k listens on SLURMD_PORT+k-1), SLURM_CPUS (per node, 1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
var="${FABRICSCOPE_VAR:-$root/var}/slurm"
nodes="${SLURM_NODES:-H1 H2 H3 H4 H5 H6}"
ctld_port="${SLURMCTLD_PORT:-16817}"
slurmd_port="${SLURMD_PORT:-16818}"
cpus="${SLURM_CPUS:-1}"
conf="$var/etc/slurm.conf"
msock="$var/munge/munge.socket"
export SLURM_CONF="$conf"

say() { echo "slurm: $*"; }
die() { echo "slurm: $*" >&2; exit 1; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
      && command -v sbatch >/dev/null; then return 0; fi
  [ "$(id -u)" = 0 ] || die "installing Slurm needs root: run 'sudo apt-get install -y slurmctld slurmd slurm-client munge'"
  command -v apt-get >/dev/null || die "no apt-get here: install slurmctld, slurmd, slurm-client and munge (Slurm 22.05+) yourself"
  mkdir -p "$var"
  # The packages would start the distribution's own munged/slurmd (system-wide, outside var/):
  # a policy-rc.d that refuses every start keeps them off, removed again after the install.
  local policy=/usr/sbin/policy-rc.d own_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; own_policy=1
  fi
  local rc=0
  { DEBIAN_FRONTEND=noninteractive apt-get update -q \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
           slurmctld slurmd slurm-client munge; } >"$var/install.log" 2>&1 || rc=$?
  if [ -n "$own_policy" ]; then rm -f "$policy"; fi
  if [ "$rc" != 0 ]; then
    echo "slurm: apt-get install of slurmctld slurmd slurm-client munge failed:" >&2; tail -20 "$var/install.log" >&2
    exit 1
  fi
}

pid_of() {  # prints the pid in pid file $1 if that process runs (not a zombie)
  [ -f "$1" ] || return 1
  local pid; pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  case "$(ps -o stat= -p "$pid" 2>/dev/null)" in Z*|"") return 1 ;; esac
  echo "$pid"
}

render() {
  mkdir -p "$var/etc" "$var/munge" "$var/state" "$var/spool" "$var/log" "$var/run"
  chmod 700 "$var/munge"
  if [ ! -s "$var/munge/munge.key" ]; then
    (umask 077; dd if=/dev/urandom of="$var/munge/munge.key" bs=1024 count=1 status=none)
  fi
  chmod 600 "$var/munge/munge.key"
  local list="" k=0 n
  for n in $nodes; do list="$list${list:+,}$n"; done
  {
    cat <<CONF
# Rendered by infra/slurm/slurm.sh: a test cluster on one host, every file under $var.
ClusterName=fabricscope
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$msock
StateSaveLocation=$var/state
SlurmdSpoolDir=$var/spool/%n
SlurmctldPidFile=$var/run/slurmctld.pid
SlurmdPidFile=$var/run/slurmd-%n.pid
SlurmctldLogFile=$var/log/slurmctld.log
SlurmdLogFile=$var/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in a container: processes tracked by parent pid, no task binding or accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Finished jobs, kept past MinJobAge by the jobs source's reader.
JobCompType=jobcomp/filetxt
JobCompLoc=$var/jobcomp.log
MinJobAge=600
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MpiDefault=none
CONF
    for n in $nodes; do
      echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((slurmd_port + k)) CPUs=$cpus State=UNKNOWN"
      k=$((k + 1))
    done
    echo "PartitionName=lab Nodes=$list Default=YES MaxTime=INFINITE State=UP"
  } > "$conf.new"
  mv "$conf.new" "$conf"
  # An empty cgroup.conf: slurmd 22.05 reads it if present and complains about the system one.
  : > "$var/etc/cgroup.conf"
}

answers() { timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"; }

nodes_up() {  # every node registered (idle, mixed, allocated or drained by someone)
  local down
  down=$(timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /down|unk|fail|\*/ {print $1}' | sort -u) || return 1
  [ -z "$down" ] && [ -n "$(timeout 10 sinfo -h -N -o '%N' 2>/dev/null)" ]
}

wait_for() {  # wait_for SECONDS WHAT CMD...: polls CMD until it succeeds
  local secs=$1 what=$2; shift 2
  for _ in $(seq 1 $((secs * 4))); do
    if "$@"; then return 0; fi
    sleep 0.25
  done
  return 1
}

start() {
  install
  render
  if ! pid_of "$var/run/munged.pid" >/dev/null; then
    # -f: munged refuses to start as root with a key in a non-system directory otherwise.
    munged -f --socket="$msock" --key-file="$var/munge/munge.key" --pid-file="$var/run/munged.pid" \
      --log-file="$var/log/munged.log" --seed-file="$var/munge/munge.seed" \
      >>"$var/log/munged.log" 2>&1 || { tail -5 "$var/log/munged.log" >&2; die "munged did not start; see $var/log/munged.log"; }
    wait_for 10 munged test -S "$msock" || die "munged made no socket at $msock; see $var/log/munged.log"
  fi
  if ! pid_of "$var/run/slurmctld.pid" >/dev/null; then
    slurmctld -f "$conf" >>"$var/log/slurmctld.out" 2>&1 \
      || { tail -5 "$var/log/slurmctld.log" >&2; die "slurmctld did not start; see $var/log/slurmctld.log"; }
  fi
  wait_for 30 slurmctld answers || { tail -10 "$var/log/slurmctld.log" >&2; die "slurmctld did not answer scontrol ping in 30 s"; }
  local n
  for n in $nodes; do
    if pid_of "$var/run/slurmd-$n.pid" >/dev/null; then continue; fi
    mkdir -p "$var/spool/$n"
    slurmd -f "$conf" -N "$n" >>"$var/log/slurmd-$n.out" 2>&1 \
      || { tail -5 "$var/log/slurmd-$n.log" >&2; die "slurmd -N $n did not start; see $var/log/slurmd-$n.log"; }
  done
  if ! wait_for 60 "the nodes" nodes_up; then
    sinfo -N >&2 || true
    die "not every node registered within 60 s; see $var/log/slurmd-*.log"
  fi
  # A node left drained/down by an earlier run's crash is not fabricscope's business; one left DOWN
  # by a restart (ReturnToService=2 resumes it) is.
  say "running: slurmctld on 127.0.0.1:$ctld_port, nodes $(sinfo -h -o '%N'); export SLURM_CONF=$conf"
}

no_jobs() { [ -z "$(timeout 10 squeue -h -t R,CG,S -o %i 2>/dev/null)" ]; }

none_alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }

ours() {  # pids (not ours to keep: job steps and job processes) whose environment names this cluster's conf
  local p self=$$ daemons
  daemons=" $(daemon_pids) "
  for p in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$p" = "$self" ] && continue
    case "$daemons" in *" $p "*) continue ;; esac
    local env; env=$( { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null) || continue
    if grep -qx "SLURM_CONF=$conf" <<<"$env"; then
      # only job-side processes: slurmstepd or those with a SLURM_JOB_ID
      if grep -q "^SLURM_JOB_ID=" <<<"$env" || [ "$( { cat "/proc/$p/comm"; } 2>/dev/null)" = slurmstepd ]; then
        echo "$p"
      fi
    fi
  done
}

daemon_pids() {
  local f; for f in "$var"/run/*.pid; do [ -f "$f" ] && cat "$f"; done 2>/dev/null | tr '\n' ' '
}

stop_pid() {  # stop_pid PIDFILE NAME: TERM, wait up to 15 s, then KILL
  local pid
  if pid=$(pid_of "$1"); then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    say "stopped $2 (pid $pid)"
  fi
  rm -f "$1"
}

stop() {
  local n
  [ -f "$conf" ] || { rm -rf "${purge:+$var}"; return 0; }
  # Jobs first: they end with scancel while slurmctld and the slurmds still run (up to 30 s).
  if answers; then
    local ids; ids=$(timeout 10 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ') || true
    if [ -n "${ids// /}" ]; then timeout 10 scancel $ids 2>/dev/null || true; fi
    wait_for 30 "jobs to end" no_jobs || echo "slurm: jobs still running after 30 s; killing them" >&2
  fi
  # All slurmds at once (each takes seconds to exit), then wait for them.
  local killed=""
  for n in $nodes; do
    if pid_of "$var/run/slurmd-$n.pid" >/dev/null; then kill "$(cat "$var/run/slurmd-$n.pid")" 2>/dev/null || true; killed="$killed $n"; fi
  done
  for n in $nodes; do stop_pid "$var/run/slurmd-$n.pid" "slurmd $n" >/dev/null; done
  if [ -n "$killed" ]; then say "stopped slurmd$killed"; fi
  # What is left of a job (slurmstepd, the job's processes, which slurmstepd re-parents to init) carries
  # this cluster's SLURM_CONF in its environment: TERM, then KILL (slurmstepd ignores TERM).
  local p left=""
  for p in $(ours); do kill "$p" 2>/dev/null || true; left="$left $p"; done
  if [ -n "$left" ]; then
    wait_for 5 "job processes to exit" none_alive $left || true
    for p in $left; do kill -9 "$p" 2>/dev/null || true; done
    say "ended job processes:$left"
  fi
  stop_pid "$var/run/slurmctld.pid" slurmctld
  stop_pid "$var/run/munged.pid" munged
  if [ -n "${purge:-}" ]; then rm -rf "$var"; say "removed $var"; fi
}

status() {
  local ok=0 n pid
  if pid=$(pid_of "$var/run/munged.pid"); then echo "munged: running (pid $pid)"; else echo "munged: not running"; ok=1; fi
  if pid=$(pid_of "$var/run/slurmctld.pid"); then echo "slurmctld: running (pid $pid) on 127.0.0.1:$ctld_port"
  else echo "slurmctld: not running"; ok=1; fi
  for n in $nodes; do
    if pid=$(pid_of "$var/run/slurmd-$n.pid"); then echo "slurmd $n: running (pid $pid)"; else echo "slurmd $n: not running"; ok=1; fi
  done
  if [ "$ok" = 0 ] && answers; then sinfo -N -o '%N %t %E' 2>/dev/null; echo "export SLURM_CONF=$conf"; return 0; fi
  echo "slurm: not (fully) running"; return 1
}

purge=""
case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) if [ "${2:-}" = --purge ]; then purge=1; fi; stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) echo "usage: $0 install|start|stop [--purge]|status|env" >&2; exit 2 ;;
esac
