#!/usr/bin/env bash
# Runs one Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1
# with its data under ./var/kafka. Jars come from Maven Central through Maven.
#   infra/kafka/kafka.sh install|start|stop|status
# Idempotent: `start` reuses a broker that already answers; `stop` is quiet
# when nothing runs.
# Env: FABRICSCOPE_VAR (data dir parent), KAFKA_PORT, KAFKA_CONTROLLER_PORT;
# KAFKA_SASL_PLAIN_USER + KAFKA_SASL_PLAIN_PASSWORD make the client listener
# SASL_PLAINTEXT with PLAIN and that one user (tests of the SASL path; the
# password goes only into server.properties, mode 600, never on a command line).
set -euo pipefail
umask 077  # the broker's data, logs and server.properties: readable by their owner only
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
var="${FABRICSCOPE_VAR:-$root/var}/kafka"
port="${KAFKA_PORT:-9092}"
cport="${KAFKA_CONTROLLER_PORT:-9093}"
libs="$var/libs"
pidfile="$var/broker.pid"
log="$var/broker.log"

install() {
  if [ -f "$libs/.complete" ]; then return 0; fi
  mkdir -p "$libs"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$libs" -DincludeScope=runtime
  touch "$libs/.complete"
}

answers() {
  # A TCP accept on the listener is not enough: ask for metadata.
  timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null || return 1
  python3 - "$port" <<'PY' 2>/dev/null
import os, sys
try:
    from confluent_kafka.admin import AdminClient
except ImportError:  # bare TCP check is all we can do before the venv exists
    sys.exit(0)
conf = {"bootstrap.servers": f"127.0.0.1:{sys.argv[1]}"}
if os.environ.get("KAFKA_SASL_PLAIN_USER"):
    conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                 "sasl.username": os.environ["KAFKA_SASL_PLAIN_USER"],
                 "sasl.password": os.environ.get("KAFKA_SASL_PLAIN_PASSWORD", "")})
md = AdminClient(conf).list_topics(timeout=5)
sys.exit(0 if md.brokers else 1)
PY
}

running_pid() {
  [ -f "$pidfile" ] || return 1
  local pid; pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start() {
  install
  # Older versions created it world-readable; the owner tightens it on every start.
  if [ -O "$var" ]; then chmod 700 "$var"; fi
  if answers; then
    # Whoever runs it (this checkout or another), one broker per port is the rule.
    echo "kafka: already running on 127.0.0.1:$port"; return 0
  fi
  mkdir -p "$var/data"
  local proto=PLAINTEXT
  if [ -n "${KAFKA_SASL_PLAIN_USER:-}" ]; then proto=SASL_PLAINTEXT; fi
  (umask 077; : > "$var/server.properties")
  cat > "$var/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=$proto://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=$proto://127.0.0.1:$port
inter.broker.listener.name=$proto
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,$proto:$proto
log.dirs=$var/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
PROPS
  if [ "$proto" = SASL_PLAINTEXT ]; then
    local u="$KAFKA_SASL_PLAIN_USER" pw="${KAFKA_SASL_PLAIN_PASSWORD:-}"
    cat >> "$var/server.properties" <<PROPS
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$u" password="$pw" user_$u="$pw";
PROPS
  fi
  local cp="$libs/*"
  if [ ! -f "$var/data/meta.properties" ]; then
    local id; id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    java -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$var/server.properties" >/dev/null
  fi
  nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
      -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
      -cp "$cp" kafka.Kafka "$var/server.properties" >"$log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 120); do
    if answers; then echo "kafka: started on 127.0.0.1:$port (pid $(cat "$pidfile"))"; return 0; fi
    if ! running_pid >/dev/null; then echo "kafka: broker exited; see $log" >&2; tail -20 "$log" >&2; return 1; fi
    sleep 0.5
  done
  echo "kafka: broker did not answer within 60 s; see $log" >&2; return 1
}

stop() {
  local pid
  if pid=$(running_pid); then
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "kafka: stopped"
  fi
  rm -f "$pidfile"
}

status() {
  if running_pid >/dev/null && answers; then echo "kafka: running on 127.0.0.1:$port"; else echo "kafka: not running"; return 1; fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
