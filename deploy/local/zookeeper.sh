#!/usr/bin/env bash
# Apache ZooKeeper (standalone, jars from Maven Central) on 127.0.0.1, the
# coordination service of the ClickHouse test cluster (clickhouse-cluster.sh).
#
#   deploy/local/zookeeper.sh start|stop|status|restart|fetch
#
# Jars come through `mvn` (deploy/local/zookeeper/pom.xml) into
# $NCCLWATCH_CACHE/zookeeper-$ZOOKEEPER_VERSION/libs (default
# ~/.cache/ncclwatch), as kafka.sh does for Kafka. Data, config and logs are in
# ${TMPDIR:-/tmp}/ncclwatch-zookeeper-$ZOOKEEPER_PORT (removed by `stop`).
# Readiness: the four-letter word `srvr` answers with the server's version. The admin HTTP server
# (port 8080 by default) is off. See deploy/local/README.md.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF_SRC="$HERE/zookeeper"

ZOOKEEPER_VERSION="${ZOOKEEPER_VERSION:-3.9.5}"
ZOOKEEPER_PORT="${ZOOKEEPER_PORT:-2181}"
ZOOKEEPER_HEAP_OPTS="${ZOOKEEPER_HEAP_OPTS:--Xms32m -Xmx256m}"
ZOOKEEPER_START_TIMEOUT="${ZOOKEEPER_START_TIMEOUT:-60}"
ZOOKEEPER_STOP_TIMEOUT="${ZOOKEEPER_STOP_TIMEOUT:-20}"
NCCLWATCH_CACHE="${NCCLWATCH_CACHE:-$HOME/.cache/ncclwatch}"
LIB_DIR="$NCCLWATCH_CACHE/zookeeper-$ZOOKEEPER_VERSION/libs"

RUN_DIR="$(run_dir zookeeper "$ZOOKEEPER_PORT")"
PID_FILE="$RUN_DIR/zookeeper.pid"
CONFIG="$RUN_DIR/zoo.cfg"
LOG_DIR="$RUN_DIR/logs"

fetch() {
  mvn_fetch "ZooKeeper $ZOOKEEPER_VERSION" "$CONF_SRC/pom.xml" "$LIB_DIR" "zookeeper-$ZOOKEEPER_VERSION.jar" "zookeeper.version=$ZOOKEEPER_VERSION"
}

is_running() {
  pid_cmdline_has ZooKeeperServerMain "$CONFIG"
}

# four_letter WORD: send a ZooKeeper four-letter command, print the answer.
four_letter() {
  timeout 5 "$BASH" -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "%s" "$2" >&3; cat <&3' _ "$ZOOKEEPER_PORT" "$1" 2>/dev/null
}

# ruok answers imok before the server serves requests; srvr says
# "Zookeeper version: ..." only once it does.
answers() {
  [[ "$(four_letter srvr)" == "Zookeeper version:"* ]]
}

log_tail() {
  tail_logs 30 "$LOG_DIR/zookeeper.log"
}

start() {
  if already_running "127.0.0.1:$ZOOKEEPER_PORT"; then
    return 0
  fi
  require_port_free "$ZOOKEEPER_PORT"
  fetch
  local java
  java="$(java_bin "ZooKeeper $ZOOKEEPER_VERSION, Java 11+")"
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR/data" "$LOG_DIR"
  sed -e "s|@PORT@|$ZOOKEEPER_PORT|g" -e "s|@DATA_DIR@|$RUN_DIR/data|g" "$CONF_SRC/zoo.cfg" >"$CONFIG"
  log "starting ZooKeeper $ZOOKEEPER_VERSION on 127.0.0.1:$ZOOKEEPER_PORT (dir $RUN_DIR)"
  # shellcheck disable=SC2086 # ZOOKEEPER_HEAP_OPTS is a list of flags
  (cd "$RUN_DIR" && exec setsid nohup "$java" $ZOOKEEPER_HEAP_OPTS -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Djava.awt.headless=true -Dzookeeper.admin.enableServer=false \
    -Dorg.slf4j.simpleLogger.defaultLogLevel=info -Dorg.slf4j.simpleLogger.showDateTime=true \
    -cp "$LIB_DIR/*" org.apache.zookeeper.server.ZooKeeperServerMain "$CONFIG" \
    </dev/null >"$LOG_DIR/zookeeper.log" 2>&1) &
  echo "$!" >"$PID_FILE"
  wait_ready $((SECONDS + ZOOKEEPER_START_TIMEOUT)) 0.3 ZooKeeper \
    "ZooKeeper did not answer srvr on 127.0.0.1:$ZOOKEEPER_PORT within ${ZOOKEEPER_START_TIMEOUT}s" answers
  log "ready: ZooKeeper $ZOOKEEPER_VERSION on 127.0.0.1:$ZOOKEEPER_PORT (pid $(read_pid))"
}

stop() {
  stop_server "$ZOOKEEPER_PORT" "$ZOOKEEPER_STOP_TIMEOUT" 0.2
}

describe() {
  printf 'ZooKeeper on 127.0.0.1:%s, %s\n' "$ZOOKEEPER_PORT" "$(four_letter srvr | head -n 1)"
}

status() {
  server_status "$ZOOKEEPER_PORT" "srvr on 127.0.0.1:$ZOOKEEPER_PORT" describe
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; start ;;
  fetch) fetch; log "jars in $LIB_DIR" ;;
  *) echo "usage: $0 start|stop|status|restart|fetch   env: ZOOKEEPER_PORT ($ZOOKEEPER_PORT)" >&2; exit 2 ;;
esac
