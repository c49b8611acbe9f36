#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, broker+controller) on 127.0.0.1 for the tests.
#
#   deploy/local/kafka.sh start|stop|status|restart|fetch
#   deploy/local/kafka.sh stop --keep-data / restart --keep-data
#   deploy/local/kafka.sh tool CLASS [ARGS...]   run a Kafka tool class with the broker's classpath
#
# With KAFKA_SASL_PORT set, a SASL_SSL listener (SCRAM-SHA-512 over TLS) runs
# beside the plaintext one, with the StandardAuthorizer on: a throwaway CA and
# broker certificate, SCRAM users made at format time and their ACLs, all in
# $KAFKA_SECURE_DIR (see "Secured listener" in deploy/local/README.md).
#
# Jars come from Maven Central through `mvn` (deploy/local/kafka/pom.xml) and are
# cached in $NCCLWATCH_CACHE/kafka-$KAFKA_VERSION/libs. Data and logs live in
# ${TMPDIR:-/tmp}/ncclwatch-kafka-$KAFKA_PORT and are removed by `stop`.
# `stop --keep-data` keeps them (and leaves a marker, $RUN_DIR/kept); the next
# `start` then starts the same broker again: same log dirs, cluster id,
# topics, committed offsets, SCRAM users and ACLs, nothing reformatted.
# `restart --keep-data` is the two in a row (a broker restart with its data).
# See deploy/local/README.md.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF_SRC="$HERE/kafka"

KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
NCCLWATCH_CACHE="${NCCLWATCH_CACHE:-${HOME:-/root}/.cache/ncclwatch}"

LIB_DIR="$NCCLWATCH_CACHE/kafka-$KAFKA_VERSION/libs"
RUN_DIR="$(run_dir kafka "$KAFKA_PORT")"
DATA_DIR="$RUN_DIR/data"
LOG_DIR="$RUN_DIR/logs"
PID_FILE="$RUN_DIR/kafka.pid"
PROPS="$RUN_DIR/server.properties"
KEPT="$RUN_DIR/kept"
BOOTSTRAP="127.0.0.1:$KAFKA_PORT"
# Empty: plaintext only.
KAFKA_SASL_PORT="${KAFKA_SASL_PORT:-}"
KAFKA_SECURE_DIR="${KAFKA_SECURE_DIR:-$RUN_DIR/secure}"
# Topics and groups whose names start with this are open to the SCRAM user
# "ncclwatch" (read, write, join the group); user "nogroup" may read and
# describe such topics but join no group; any other resource is refused to
# both. The plaintext and controller listeners authenticate no one: their
# principal, User:ANONYMOUS, is a super user so that the plaintext tests and
# the tools keep working.
KAFKA_ACL_PREFIX="${KAFKA_ACL_PREFIX:-ncclwatch-sasl-}"
KAFKA_SCRAM_USERS=(ncclwatch nogroup)

# --- jars -------------------------------------------------------------------

fetch() {
  mvn_fetch "Kafka $KAFKA_VERSION" "$CONF_SRC/pom.xml" "$LIB_DIR" "kafka_2.13-$KAFKA_VERSION.jar" "kafka.version=$KAFKA_VERSION"
}

# JVM command line for a Kafka command-line tool (short-lived, tuned for startup speed).
tool_java() {
  TOOL_JAVA=("$(java_bin "Kafka $KAFKA_VERSION, Java 17+")" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto
    -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$CONF_SRC/tools-log4j2.properties"
    -cp "$LIB_DIR/*")
}

# Run a Kafka tool class, e.g. org.apache.kafka.tools.TopicCommand.
tool() {
  fetch
  tool_java
  "${TOOL_JAVA[@]}" "$@"
}

# --- process helpers --------------------------------------------------------

# True when the pid file names a live Kafka broker started by this script for this port.
is_running() {
  pid_cmdline_has kafka.Kafka "$PROPS"
}

# A real Kafka request: list topics through the Admin API.
answers() {
  tool_java
  timeout -k 5 30 "${TOOL_JAVA[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
    --command-config "$CONF_SRC/admin.properties" --list >/dev/null 2>&1
}

log_tail() {
  tail_logs 40 "$LOG_DIR/server.log" "$LOG_DIR/stdout.log"
}

random_cluster_id() {
  # 16 random bytes, base64url without padding (22 chars) == org.apache.kafka.common.Uuid.
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" == [A-Za-z0-9]* ]] && break
  done
  printf '%s\n' "$id"
}

# --- commands ---------------------------------------------------------------

start() {
  if already_running "$BOOTSTRAP"; then
    return 0
  fi
  require_port_free "$KAFKA_PORT"
  require_port_free "$KAFKA_CONTROLLER_PORT" controller

  fetch
  local java
  java="$(java_bin "Kafka $KAFKA_VERSION, Java 17+")"

  if [[ -f "$KEPT" && -f "$DATA_DIR/meta.properties" && -f "$PROPS" ]]; then
    restart_kept "$java"
    return 0
  fi
  rm -rf "$RUN_DIR"
  mkdir -p "$DATA_DIR" "$LOG_DIR"
  sed -e "s|@PORT@|$KAFKA_PORT|g" \
      -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
      -e "s|@DATA_DIR@|$DATA_DIR|g" \
      "$CONF_SRC/server.properties" >"$PROPS"

  local scram=()
  if [[ -n "$KAFKA_SASL_PORT" ]]; then
    secure_setup
    local u
    for u in "${KAFKA_SCRAM_USERS[@]}"; do
      scram+=(--add-scram "SCRAM-SHA-512=[name=$u,password=$(cat "$KAFKA_SECURE_DIR/$u.password")]")
    done
  fi

  local cluster_id
  cluster_id="$(random_cluster_id)"
  if ! tool kafka.tools.StorageTool format --cluster-id "$cluster_id" --config "$PROPS" --standalone \
      "${scram[@]}" >"$LOG_DIR/format.log" 2>&1; then
    cat "$LOG_DIR/format.log" >&2 || true
    die "formatting storage in $DATA_DIR failed"
  fi

  log "starting Kafka $KAFKA_VERSION on $BOOTSTRAP (controller 127.0.0.1:$KAFKA_CONTROLLER_PORT, dir $RUN_DIR)"
  launch "$java"
  if [[ -n "$KAFKA_SASL_PORT" ]]; then
    add_acls
    log "ready: SASL_SSL (SCRAM-SHA-512) on 127.0.0.1:$KAFKA_SASL_PORT; CA, users and passwords in $KAFKA_SECURE_DIR"
  fi
  log "ready: Kafka $KAFKA_VERSION on $BOOTSTRAP (pid $(read_pid))"
}

# launch JAVA: start the broker on the rendered $PROPS (stdout appended to
# $LOG_DIR/stdout.log) and wait until it answers, and its SASL_SSL port when
# one is configured.
launch() {
  # shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of JVM flags
  setsid nohup "$1" $KAFKA_HEAP_OPTS -XX:+UseSerialGC -Xss1m \
    -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
    -Dkafka.logs.dir="$LOG_DIR" \
    -Dlog4j2.configurationFile="$CONF_SRC/log4j2.properties" \
    -cp "$LIB_DIR/*" kafka.Kafka "$PROPS" \
    </dev/null >>"$LOG_DIR/stdout.log" 2>&1 &
  echo "$!" >"$PID_FILE"

  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  # Cheap wait for the listener first, then a real Kafka request.
  wait_ready "$deadline" 0.3 broker "broker did not open $BOOTSTRAP within ${KAFKA_START_TIMEOUT}s" \
    port_open "$KAFKA_PORT"
  wait_ready "$deadline" 1 broker "broker did not answer on $BOOTSTRAP within ${KAFKA_START_TIMEOUT}s" \
    answers
  if [[ -n "$KAFKA_SASL_PORT" ]]; then
    wait_ready "$deadline" 0.3 broker "broker did not open SASL_SSL 127.0.0.1:$KAFKA_SASL_PORT within ${KAFKA_START_TIMEOUT}s" \
      port_open "$KAFKA_SASL_PORT"
  fi
}

# restart_kept JAVA: start the broker left by `stop --keep-data` on its kept
# properties and data (the ports are the ones it was rendered with; the
# SCRAM users and ACLs live in its metadata log).
restart_kept() {
  local cluster_id
  cluster_id="$(sed -n 's/^cluster.id=//p' "$DATA_DIR/meta.properties")"
  log "starting Kafka $KAFKA_VERSION on $BOOTSTRAP again with its kept data (cluster $cluster_id, dir $RUN_DIR)"
  launch "$1"
  rm -f "$KEPT"
  log "ready: Kafka $KAFKA_VERSION on $BOOTSTRAP (pid $(read_pid)), data kept"
}

# secure_setup: the throwaway CA and broker certificate, the SCRAM users'
# passwords (one file each), and the SASL_SSL listener and authorizer
# appended to the rendered properties.
secure_setup() {
  require_port_free "$KAFKA_SASL_PORT" SASL_SSL
  make_tls "$KAFKA_SECURE_DIR"
  local u
  for u in "${KAFKA_SCRAM_USERS[@]}"; do
    make_secret "$KAFKA_SECURE_DIR/$u.password"
  done
  sed -i -e "s|^listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,|listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT,|" \
      -e "s|^advertised.listeners=.*|&,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT|" \
      -e "s|^listener.security.protocol.map=.*|&,SASL_SSL:SASL_SSL|" "$PROPS"
  cat >>"$PROPS" <<EOF

# SASL_SSL listener (kafka.sh with KAFKA_SASL_PORT).
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$KAFKA_SECURE_DIR/server-keystore.pem
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=false
EOF
}

# add_acls: the rights described at KAFKA_ACL_PREFIX, granted over the
# plaintext listener (a super user).
add_acls() {
  local acl=(org.apache.kafka.tools.AclCommand --bootstrap-server "$BOOTSTRAP"
    --command-config "$CONF_SRC/admin.properties" --add --resource-pattern-type prefixed)
  if ! tool "${acl[@]}" --allow-principal User:ncclwatch --producer --consumer \
      --topic "$KAFKA_ACL_PREFIX" --group "$KAFKA_ACL_PREFIX" >"$LOG_DIR/acl.log" 2>&1 ||
     ! tool "${acl[@]}" --allow-principal User:nogroup --operation Read --operation Describe \
      --topic "$KAFKA_ACL_PREFIX" >>"$LOG_DIR/acl.log" 2>&1; then
    cat "$LOG_DIR/acl.log" >&2 || true
    die "adding the ACLs failed"
  fi
}

stop() {
  stop_server "$KAFKA_PORT" "$KAFKA_STOP_TIMEOUT" 0.3
}

# stop_keep: stop the broker, keep $RUN_DIR for the next start.
stop_keep() {
  [[ -f "$DATA_DIR/meta.properties" ]] || die "no formatted data in $DATA_DIR to keep"
  stop_server "$KAFKA_PORT" "$KAFKA_STOP_TIMEOUT" 0.3 keep
  touch "$KEPT"
}

status() {
  server_status "$KAFKA_PORT" "$BOOTSTRAP" echo "Kafka $KAFKA_VERSION on $BOOTSTRAP"
}

usage() {
  cat >&2 <<EOF
usage: $0 start|stop|status|restart|fetch
       $0 stop --keep-data | restart --keep-data
       $0 tool CLASS [ARGS...]
env: KAFKA_PORT ($KAFKA_PORT) KAFKA_CONTROLLER_PORT ($KAFKA_CONTROLLER_PORT)
     KAFKA_SASL_PORT (${KAFKA_SASL_PORT:-unset: no SASL_SSL listener}) KAFKA_SECURE_DIR ($KAFKA_SECURE_DIR)
     KAFKA_ACL_PREFIX ($KAFKA_ACL_PREFIX)
     KAFKA_VERSION ($KAFKA_VERSION) NCCLWATCH_CACHE ($NCCLWATCH_CACHE)
     KAFKA_HEAP_OPTS ($KAFKA_HEAP_OPTS) KAFKA_START_TIMEOUT ($KAFKA_START_TIMEOUT)
     KAFKA_STOP_TIMEOUT ($KAFKA_STOP_TIMEOUT)
EOF
  exit 2
}

case "${1:-}" in
  start) start ;;
  stop)
    case "${2:-}" in
      "") stop ;;
      --keep-data) stop_keep ;;
      *) usage ;;
    esac ;;
  status) status ;;
  restart)
    case "${2:-}" in
      "") stop; start ;;
      --keep-data) stop_keep; start ;;
      *) usage ;;
    esac ;;
  fetch) fetch; log "jars in $LIB_DIR" ;;
  tool) shift; [[ $# -ge 1 ]] || usage; tool "$@" ;;
  *) usage ;;
esac
