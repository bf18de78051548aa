#!/usr/bin/env bash
# Runs one Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1
# with its data under ./var/kafka. Jars come from Maven Central through Maven.
#   infra/kafka/kafka.sh install|start|stop|status
# Idempotent: `start` reuses a broker that already answers; `stop` is quiet
# when nothing runs.
#   infra/kafka/kafka.sh cluster start|stop|status|kill NODE [--brokers N]
# runs N (default 3) combined broker+controller nodes instead, from the same jars:
# one KRaft quorum of N voters, node k on 127.0.0.1:KAFKA_CLUSTER_PORT+k-1
# (default 19092..) and controller port KAFKA_CLUSTER_CONTROLLER_PORT+k-1 (19192..),
# data under ./var/kafka-cluster/nodeK. Internal topics (offsets, transactions)
# get replication min(3, N) and min ISR max(1, replication-1). `cluster start`
# starts only the nodes that are not running (so it also restarts a killed one);
# `cluster kill K` is kill -9 of node K (failure drills).
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
  # Maven's output (colour resets even with -q) goes to a log; shown only if it fails
  if ! mvn -q -B -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$libs" -DincludeScope=runtime >"$var/install.log" 2>&1; then
    echo "kafka: fetching the broker jars from Maven Central failed:" >&2; tail -20 "$var/install.log" >&2; return 1
  fi
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
    # its SLF4J/log4j chatter goes to the broker log, not to the terminal of `fabricscope up`
    java -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$var/server.properties" >>"$log" 2>&1 \
      || { echo "kafka: formatting $var/data failed; see $log" >&2; return 1; }
  fi
  # In a session of its own: a SIGTERM to the group of whoever started it (`kill -- -PGID`, a service
  # manager) reaches `fabricscope up`, which stops its consumers first and the broker last; stopped
  # first, the broker left the sink waiting on a coordinator that was gone. As a background job of this
  # non-interactive shell it is no group leader, so setsid execs in place and $! stays the broker's pid.
  setsid nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
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
    # a broker shuts down in 1-3 s here; past 5 s it is killed (KRaft recovers its log on the next start),
    # so `up`'s whole clean-up stays within its 10 s bound
    for _ in $(seq 1 50); do
      case "$(ps -o stat= -p "$pid" 2>/dev/null)" in Z*|"") break ;; esac  # gone, or a zombie nobody reaps yet
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "kafka: stopped"
  fi
  rm -f "$pidfile"
}

status() {
  if running_pid >/dev/null && answers; then echo "kafka: running on 127.0.0.1:$port"; else echo "kafka: not running"; return 1; fi
}

cvar="${FABRICSCOPE_VAR:-$root/var}/kafka-cluster"
cport0="${KAFKA_CLUSTER_PORT:-19092}"
ccport0="${KAFKA_CLUSTER_CONTROLLER_PORT:-19192}"

node_pid() {  # prints the pid of node $1 if it runs
  local f="$cvar/node$1/broker.pid"
  [ -f "$f" ] || return 1
  local pid; pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  case "$(ps -o stat= -p "$pid" 2>/dev/null)" in Z*|"") return 1 ;; esac  # a zombie is dead
  echo "$pid"
}

cluster_brokers() {  # N: --brokers, else what the last start used, else 3
  if [ -n "${brokers_arg:-}" ]; then echo "$brokers_arg"
  elif [ -f "$cvar/brokers" ]; then cat "$cvar/brokers"
  else echo 3; fi
}

cluster_bootstrap() {
  local n; n=$(cluster_brokers); local out=""
  for k in $(seq 1 "$n"); do out="$out${out:+,}127.0.0.1:$((cport0 + k - 1))"; done
  echo "$out"
}

cluster_answers() {  # all N brokers registered and unfenced in the metadata
  local py="$root/.venv/bin/python"; [ -x "$py" ] || py=python3
  "$py" - "$(cluster_bootstrap)" "$(cluster_brokers)" <<'PY' 2>/dev/null
import os, socket, sys
try:
    from confluent_kafka.admin import AdminClient
except ImportError:  # before the venv exists: every listener accepts
    for hp in sys.argv[1].split(","):
        socket.create_connection((hp.split(":")[0], int(hp.split(":")[1])), timeout=3).close()
    sys.exit(0)
conf = {"bootstrap.servers": sys.argv[1]}
if os.environ.get("KAFKA_SASL_PLAIN_USER"):
    conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                 "sasl.username": os.environ["KAFKA_SASL_PLAIN_USER"],
                 "sasl.password": os.environ.get("KAFKA_SASL_PLAIN_PASSWORD", "")})
md = AdminClient(conf).list_topics(timeout=5)
sys.exit(0 if len(md.brokers) >= int(sys.argv[2]) else 1)
PY
}

cluster_props() {  # writes node $1's server.properties (mode 600: it may hold the SASL password)
  local k=$1 n rf isr voters="" proto=PLAINTEXT
  n=$(cluster_brokers); rf=$(( n < 3 ? n : 3 )); isr=$(( rf > 1 ? rf - 1 : 1 ))
  for j in $(seq 1 "$n"); do voters="$voters${voters:+,}$j@127.0.0.1:$((ccport0 + j - 1))"; done
  if [ -n "${KAFKA_SASL_PLAIN_USER:-}" ]; then proto=SASL_PLAINTEXT; fi
  local dir="$cvar/node$k" port=$((cport0 + k - 1)) cport=$((ccport0 + k - 1))
  (umask 077; : > "$dir/server.properties")
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$k
controller.quorum.voters=$voters
listeners=$proto://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=$proto://127.0.0.1:$port
inter.broker.listener.name=$proto
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,$proto:$proto
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
# A dead broker is fenced (its partitions get new leaders) after 3 s without a heartbeat, not 9 s:
# well inside the reducer's partition idle timeout (30 s).
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
PROPS
  if [ "$proto" = SASL_PLAINTEXT ]; then
    local u="$KAFKA_SASL_PLAIN_USER" pw="${KAFKA_SASL_PLAIN_PASSWORD:-}"
    cat >> "$dir/server.properties" <<PROPS
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$u" password="$pw" user_$u="$pw";
PROPS
  fi
}

cluster_start() {
  install
  local n; n=$(cluster_brokers)
  if [ "$n" -lt 1 ]; then echo "kafka cluster: --brokers must be at least 1" >&2; return 2; fi
  (umask 077; mkdir -p "$cvar"); chmod 700 "$cvar"
  if [ -f "$cvar/brokers" ] && [ "$(cat "$cvar/brokers")" != "$n" ]; then
    echo "kafka cluster: $cvar was formatted for $(cat "$cvar/brokers") brokers; stop it and remove it to change" >&2
    return 2
  fi
  echo "$n" > "$cvar/brokers"
  local cp="$libs/*"
  if [ ! -f "$cvar/cluster.id" ]; then
    java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1 > "$cvar/cluster.id"
  fi
  local started=""
  for k in $(seq 1 "$n"); do
    if node_pid "$k" >/dev/null; then continue; fi
    local dir="$cvar/node$k"
    (umask 077; mkdir -p "$dir/data")
    cluster_props "$k"
    if [ ! -f "$dir/data/meta.properties" ]; then
      java -cp "$cp" kafka.tools.StorageTool format -t "$(cat "$cvar/cluster.id")" \
          -c "$dir/server.properties" >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; return 1; }
    fi
    # Smaller heap than the single broker: three of these share the machine.
    setsid nohup java -Xms128m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
        -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/broker.log" 2>&1 &
    echo $! > "$dir/broker.pid"
    started="$started $k"
  done
  for _ in $(seq 1 180); do
    if cluster_answers; then
      echo "kafka cluster: $n brokers on $(cluster_bootstrap)${started:+ (started node$started)}"; return 0
    fi
    for k in $started; do
      if ! node_pid "$k" >/dev/null; then
        echo "kafka cluster: node $k exited; see $cvar/node$k/broker.log" >&2
        tail -20 "$cvar/node$k/broker.log" >&2; return 1
      fi
    done
    sleep 0.5
  done
  echo "kafka cluster: not all $n brokers answered within 90 s; see $cvar/node*/broker.log" >&2; return 1
}

cluster_stop() {
  local n pids=() pid; n=$(cluster_brokers)
  for k in $(seq 1 "$n"); do
    if pid=$(node_pid "$k"); then kill "$pid"; pids+=("$pid"); fi
  done
  # All at once: a node stopping alone waits for a quorum that the others then leave.
  for _ in $(seq 1 60); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && kill -9 "$pid"; done
  for k in $(seq 1 "$n"); do rm -f "$cvar/node$k/broker.pid"; done
  if [ "${#pids[@]}" -gt 0 ]; then echo "kafka cluster: stopped ${#pids[@]} nodes"; fi
}

cluster_status() {
  local n up=0 pid; n=$(cluster_brokers)
  for k in $(seq 1 "$n"); do
    if pid=$(node_pid "$k"); then
      up=$((up + 1)); echo "node $k: running (pid $pid) on 127.0.0.1:$((cport0 + k - 1))"
    else
      echo "node $k: not running"
    fi
  done
  if [ "$up" = "$n" ] && cluster_answers; then echo "kafka cluster: $n brokers on $(cluster_bootstrap)"; return 0; fi
  echo "kafka cluster: $up of $n nodes running"; return 1
}

cluster_kill() {
  local k="${1:?usage: kafka.sh cluster kill NODE}" pid
  if pid=$(node_pid "$k"); then
    kill -9 "$pid"
    for _ in $(seq 1 40); do node_pid "$k" >/dev/null || break; sleep 0.05; done
    echo "kafka cluster: node $k (pid $pid) killed"
  else echo "kafka cluster: node $k is not running" >&2; return 1; fi
}

cluster() {
  local action="${1:-}" node=""; shift || true
  brokers_arg=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --brokers) brokers_arg="${2:?--brokers N}"; shift 2 ;;
      --brokers=*) brokers_arg="${1#--brokers=}"; shift ;;
      *) node="$1"; shift ;;
    esac
  done
  if [ -n "$brokers_arg" ] && ! [[ "$brokers_arg" =~ ^[1-9][0-9]?$ ]]; then
    echo "kafka cluster: --brokers must be a number from 1 to 99, not '$brokers_arg'" >&2; return 2
  fi
  case "$action" in
    start) cluster_start ;;
    stop) cluster_stop ;;
    status) cluster_status ;;
    kill) cluster_kill "$node" ;;
    bootstrap) cluster_bootstrap ;;
    *) echo "usage: $0 cluster start|stop|status|kill NODE|bootstrap [--brokers N]" >&2; return 2 ;;
  esac
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  cluster) shift; cluster "$@" ;;
  *) echo "usage: $0 install|start|stop|status | cluster start|stop|status|kill NODE|bootstrap [--brokers N]" >&2; exit 2 ;;
esac
