#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, broker+controller) on 127.0.0.1 for the tests.
#
#   deploy/local/kafka.sh start|stop|status|restart|fetch
#   deploy/local/kafka.sh tool CLASS [ARGS...]   run a Kafka tool class with the broker's classpath
#
# Jars come from Maven Central through `mvn` (deploy/local/kafka/pom.xml) and are
# cached in $NCCLWATCH_CACHE/kafka-$KAFKA_VERSION/libs. Data and logs live in
# ${TMPDIR:-/tmp}/ncclwatch-kafka-$KAFKA_PORT and are removed by `stop`.
# See deploy/local/README.md.
set -euo pipefail

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
RUN_DIR="${TMPDIR:-/tmp}/ncclwatch-kafka-$KAFKA_PORT"
RUN_DIR="${RUN_DIR//\/\//\/}"
DATA_DIR="$RUN_DIR/data"
LOG_DIR="$RUN_DIR/logs"
PID_FILE="$RUN_DIR/kafka.pid"
PROPS="$RUN_DIR/server.properties"
BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- jars -------------------------------------------------------------------

fetch() {
  if [[ -f "$LIB_DIR/.complete" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found on PATH (needed once to fetch Kafka $KAFKA_VERSION jars)"
  log "fetching Kafka $KAFKA_VERSION jars from Maven Central into $LIB_DIR"
  local partial="$LIB_DIR.partial.$$"
  rm -rf "$partial"
  mkdir -p "$partial"
  local mvn_log="$partial.mvn.log"
  if ! mvn -B -Dstyle.color=never -f "$CONF_SRC/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$partial" \
      </dev/null >"$mvn_log" 2>&1; then
    tail -n 30 "$mvn_log" >&2 || true
    rm -rf "$partial" "$mvn_log"
    die "mvn could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION"
  fi
  rm -f "$mvn_log"
  [[ -f "$partial/kafka_2.13-$KAFKA_VERSION.jar" ]] || { rm -rf "$partial"; die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn"; }
  touch "$partial/.complete"
  rm -rf "$LIB_DIR"
  mv "$partial" "$LIB_DIR"
}

java_bin() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    printf '%s\n' "$JAVA_HOME/bin/java"
  else
    command -v java >/dev/null || die "java not found on PATH (Kafka $KAFKA_VERSION needs Java 17+)"
    command -v java
  fi
}

# JVM command line for a Kafka command-line tool (short-lived, tuned for startup speed).
tool_java() {
  TOOL_JAVA=("$(java_bin)" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto
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

read_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  printf '%s\n' "$pid"
}

# True when the pid file names a live Kafka broker started by this script for this port.
is_running() {
  local pid
  pid="$(read_pid)" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  local cmd
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *kafka.Kafka* && "$cmd" == *"$PROPS"* ]]
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A real Kafka request: list topics through the Admin API.
answers() {
  tool_java
  timeout -k 5 30 "${TOOL_JAVA[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
    --command-config "$CONF_SRC/admin.properties" --list >/dev/null 2>&1
}

log_tail() {
  local f
  for f in "$LOG_DIR/server.log" "$LOG_DIR/stdout.log"; do
    if [[ -s "$f" ]]; then
      log "---- last lines of $f ----"
      tail -n 40 "$f" >&2 || true
    fi
  done
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
  if is_running; then
    if answers; then
      log "already running (pid $(read_pid), $BOOTSTRAP)"
      return 0
    fi
    log "pid $(read_pid) is running but not answering; restarting it"
    stop
  fi
  if port_open "$KAFKA_PORT"; then
    die "127.0.0.1:$KAFKA_PORT is already in use by another process"
  fi
  if port_open "$KAFKA_CONTROLLER_PORT"; then
    die "127.0.0.1:$KAFKA_CONTROLLER_PORT (controller) is already in use by another process"
  fi

  fetch
  local java
  java="$(java_bin)"

  rm -rf "$RUN_DIR"
  mkdir -p "$DATA_DIR" "$LOG_DIR"
  sed -e "s|@PORT@|$KAFKA_PORT|g" \
      -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
      -e "s|@DATA_DIR@|$DATA_DIR|g" \
      "$CONF_SRC/server.properties" >"$PROPS"

  local cluster_id
  cluster_id="$(random_cluster_id)"
  if ! tool kafka.tools.StorageTool format --cluster-id "$cluster_id" --config "$PROPS" --standalone \
      >"$LOG_DIR/format.log" 2>&1; then
    cat "$LOG_DIR/format.log" >&2 || true
    die "formatting storage in $DATA_DIR failed"
  fi

  log "starting Kafka $KAFKA_VERSION on $BOOTSTRAP (controller 127.0.0.1:$KAFKA_CONTROLLER_PORT, dir $RUN_DIR)"
  # shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of JVM flags
  setsid nohup "$java" $KAFKA_HEAP_OPTS -XX:+UseSerialGC -Xss1m \
    -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
    -Dkafka.logs.dir="$LOG_DIR" \
    -Dlog4j2.configurationFile="$CONF_SRC/log4j2.properties" \
    -cp "$LIB_DIR/*" kafka.Kafka "$PROPS" \
    </dev/null >"$LOG_DIR/stdout.log" 2>&1 &
  echo "$!" >"$PID_FILE"

  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  # Cheap wait for the listener first, then a real Kafka request.
  while ! port_open "$KAFKA_PORT"; do
    if ! is_running; then
      log_tail
      die "broker exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      log_tail
      die "broker did not open $BOOTSTRAP within ${KAFKA_START_TIMEOUT}s"
    fi
    sleep 0.3
  done
  until answers; do
    if ! is_running; then
      log_tail
      die "broker exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      log_tail
      die "broker did not answer on $BOOTSTRAP within ${KAFKA_START_TIMEOUT}s"
    fi
    sleep 1
  done
  log "ready: Kafka $KAFKA_VERSION on $BOOTSTRAP (pid $(read_pid))"
}

stop() {
  local pid
  if ! is_running; then
    log "not running (port $KAFKA_PORT)"
    rm -rf "$RUN_DIR"
    return 0
  fi
  pid="$(read_pid)"
  log "stopping pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "still running after ${KAFKA_STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.3
  done
  rm -rf "$RUN_DIR"
  log "stopped"
}

status() {
  if ! is_running; then
    log "not running (port $KAFKA_PORT)"
    return 1
  fi
  if answers; then
    log "running and answering: Kafka $KAFKA_VERSION on $BOOTSTRAP (pid $(read_pid))"
    return 0
  fi
  log "pid $(read_pid) is running but $BOOTSTRAP does not answer"
  return 1
}

usage() {
  cat >&2 <<EOF
usage: $0 start|stop|status|restart|fetch
       $0 tool CLASS [ARGS...]
env: KAFKA_PORT ($KAFKA_PORT) KAFKA_CONTROLLER_PORT ($KAFKA_CONTROLLER_PORT)
     KAFKA_VERSION ($KAFKA_VERSION) NCCLWATCH_CACHE ($NCCLWATCH_CACHE)
     KAFKA_HEAP_OPTS ($KAFKA_HEAP_OPTS) KAFKA_START_TIMEOUT ($KAFKA_START_TIMEOUT)
     KAFKA_STOP_TIMEOUT ($KAFKA_STOP_TIMEOUT)
EOF
  exit 2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; start ;;
  fetch) fetch; log "jars in $LIB_DIR" ;;
  tool) shift; [[ $# -ge 1 ]] || usage; tool "$@" ;;
  *) usage ;;
esac
