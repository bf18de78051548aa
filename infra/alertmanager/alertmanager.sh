#!/usr/bin/env bash
# Runs Prometheus Alertmanager (Debian's prometheus-alertmanager) for fabricscope's
# chatops on 127.0.0.1, data under ./var/alertmanager.
#   infra/alertmanager/alertmanager.sh start|stop|status
# Port: ALERTMANAGER_PORT (default 9193; 9093 is Kafka's controller). The config is
# infra/alertmanager/alertmanager.yml rendered with receiver URLs from the environment
# or files (render.py); ALERTMANAGER_CONFIG names a ready file instead. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
var="${FABRICSCOPE_VAR:-$root/var}/alertmanager"
port="${ALERTMANAGER_PORT:-9193}"
pidfile="$var/alertmanager.pid"
log="$var/alertmanager.log"
py="$root/.venv/bin/python"; [ -x "$py" ] || py=python3

binary() {
  for b in prometheus-alertmanager alertmanager; do
    if command -v "$b" >/dev/null; then command -v "$b"; return 0; fi
  done
  echo "alertmanager: not installed; as root: apt-get install -y prometheus-alertmanager" >&2
  return 1
}

answers() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null && \
  "$py" -c "import sys,httpx; sys.exit(httpx.get('http://127.0.0.1:$port/-/ready', timeout=2).status_code != 200)" 2>/dev/null; }

running_pid() {
  [ -f "$pidfile" ] || return 1
  local pid; pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start() {
  local bin; bin=$(binary)
  if running_pid >/dev/null && answers; then echo "alertmanager: already running on 127.0.0.1:$port"; return 0; fi
  mkdir -p "$var/data"
  local cfg="${ALERTMANAGER_CONFIG:-}"
  if [ -z "$cfg" ]; then
    cfg="$var/alertmanager.yml"
    (cd "$root" && "$py" -m infra.alertmanager.render "$cfg")
  fi
  # a session of its own, as the broker's: a group SIGTERM reaches `fabricscope up`, which stops the
  # alerts sender before Alertmanager (setsid execs in place: $! stays Alertmanager's pid)
  setsid nohup "$bin" --config.file="$cfg" --storage.path="$var/data" \
      --web.listen-address="127.0.0.1:$port" --cluster.listen-address= \
      --log.level=info >"$log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 60); do
    if answers; then echo "alertmanager: started on 127.0.0.1:$port (pid $(cat "$pidfile"))"; return 0; fi
    if ! running_pid >/dev/null; then echo "alertmanager: exited; see $log" >&2; tail -20 "$log" >&2; return 1; fi
    sleep 0.5
  done
  echo "alertmanager: no answer on 127.0.0.1:$port after 30 s; see $log" >&2; return 1
}

stop() {
  local pid
  if pid=$(running_pid); then
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "alertmanager: stopped"
  fi
  rm -f "$pidfile"
}

status() {
  if answers; then echo "alertmanager: running on 127.0.0.1:$port"; else echo "alertmanager: not running"; return 1; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
