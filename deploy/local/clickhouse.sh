#!/usr/bin/env bash
# ClickHouse server (Debian 12 package, 18.16) on 127.0.0.1 for the tests.
#
#   deploy/local/clickhouse.sh start|stop|status|restart|install
#   deploy/local/clickhouse.sh client [ARGS...]   clickhouse-client on the test server
#
# Installs clickhouse-server and clickhouse-client with apt-get when missing
# (needs root), never uses the Debian init script/systemd unit, and runs the
# server binary directly with the config in deploy/local/clickhouse/ rendered
# into ${TMPDIR:-/tmp}/ncclwatch-clickhouse-$CLICKHOUSE_PORT (removed by `stop`).
#
# With CLICKHOUSE_TLS_PORT set, the server also listens for the native
# protocol over TLS on that port (tcp_port_secure; a throwaway CA and server
# certificate) and has a password user "ncclwatch" (password in a file); both
# in $CLICKHOUSE_SECURE_DIR (see "Secured ClickHouse" in deploy/local/README.md).
# CLICKHOUSE_CONFIG_D adds config files; CLICKHOUSE_KEEP_DATA=1 restarts on
# the data a stopped or killed server left (clickhouse-cluster.sh uses both).
# See deploy/local/README.md.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF_SRC="$HERE/clickhouse"

CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-9000}"
CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-8123}"
CLICKHOUSE_START_TIMEOUT="${CLICKHOUSE_START_TIMEOUT:-60}"
CLICKHOUSE_STOP_TIMEOUT="${CLICKHOUSE_STOP_TIMEOUT:-30}"

RUN_DIR="$(run_dir clickhouse "$CLICKHOUSE_PORT")"
LOG_DIR="$RUN_DIR/logs"
PID_FILE="$RUN_DIR/clickhouse.pid"
CONFIG="$RUN_DIR/config.xml"
# Empty: no TLS port and no password user.
CLICKHOUSE_TLS_PORT="${CLICKHOUSE_TLS_PORT:-}"
CLICKHOUSE_SECURE_DIR="${CLICKHOUSE_SECURE_DIR:-$RUN_DIR/secure}"
# A directory of extra config files (e.g. a cluster member's remote_servers,
# zookeeper and macros, from clickhouse-cluster.sh), copied into config.d.
CLICKHOUSE_CONFIG_D="${CLICKHOUSE_CONFIG_D:-}"
# 1: start keeps the data of an earlier run in the run directory (a server
# brought back after a crash); otherwise start begins empty.
CLICKHOUSE_KEEP_DATA="${CLICKHOUSE_KEEP_DATA:-}"

# --- install ----------------------------------------------------------------

server_bin() {
  first_executable "$(command -v clickhouse-server 2>/dev/null || true)" /usr/sbin/clickhouse-server /usr/bin/clickhouse-server
}

client_bin() {
  first_executable "$(command -v clickhouse-client 2>/dev/null || true)" /usr/bin/clickhouse-client
}

install_packages() {
  if server_bin >/dev/null && client_bin >/dev/null; then
    return 0
  fi
  # apt_install keeps the package's init script from starting the server on
  # the default ports.
  apt_install clickhouse-server/clickhouse-client clickhouse-server clickhouse-client
  server_bin >/dev/null || die "clickhouse-server binary not found after install"
  client_bin >/dev/null || die "clickhouse-client binary not found after install"
}

# --- helpers ----------------------------------------------------------------

# True when the pid file names a live clickhouse-server started by this script for this port.
is_running() {
  pid_cmdline_has clickhouse "$CONFIG"
}

# Run a query over the HTTP interface, print the body; fails on an error status or no answer.
http_query() {
  http_request "$CLICKHOUSE_HTTP_PORT" / "$1"
}

answers() {
  local out
  out="$(http_query 'SELECT 1' 2>/dev/null)" || return 1
  [[ "$out" == "1" ]]
}

log_tail() {
  tail_logs 30 "$LOG_DIR/clickhouse-server.err.log" "$LOG_DIR/clickhouse-server.log" "$LOG_DIR/stdout.log"
}

# --- commands ---------------------------------------------------------------

start() {
  if already_running "tcp 127.0.0.1:$CLICKHOUSE_PORT, http 127.0.0.1:$CLICKHOUSE_HTTP_PORT"; then
    return 0
  fi
  require_port_free "$CLICKHOUSE_PORT"
  require_port_free "$CLICKHOUSE_HTTP_PORT"

  install_packages
  local server
  server="$(server_bin)"

  if [[ "$CLICKHOUSE_KEEP_DATA" == 1 && -d "$RUN_DIR/data" ]]; then
    log "keeping the data in $RUN_DIR (CLICKHOUSE_KEEP_DATA=1)"
  else
    rm -rf "$RUN_DIR"
  fi
  mkdir -p "$RUN_DIR"/{data,tmp,user_files,format_schemas,logs}
  sed -e "s|@TCP_PORT@|$CLICKHOUSE_PORT|g" \
      -e "s|@HTTP_PORT@|$CLICKHOUSE_HTTP_PORT|g" \
      -e "s|@RUN_DIR@|$RUN_DIR|g" \
      "$CONF_SRC/config.xml" >"$CONFIG"
  cp "$CONF_SRC/users.xml" "$RUN_DIR/users.xml"
  if [[ -n "$CLICKHOUSE_CONFIG_D" ]]; then
    mkdir -p "$RUN_DIR/config.d"
    cp "$CLICKHOUSE_CONFIG_D"/*.xml "$RUN_DIR/config.d/" || die "no config files in CLICKHOUSE_CONFIG_D=$CLICKHOUSE_CONFIG_D"
  fi
  if [[ -n "$CLICKHOUSE_TLS_PORT" ]]; then
    secure_setup
  fi

  log "starting clickhouse-server on tcp 127.0.0.1:$CLICKHOUSE_PORT, http 127.0.0.1:$CLICKHOUSE_HTTP_PORT (dir $RUN_DIR)"
  (cd "$RUN_DIR" && exec setsid nohup "$server" --config-file="$CONFIG" \
    </dev/null >"$LOG_DIR/stdout.log" 2>&1) &
  echo "$!" >"$PID_FILE"

  wait_ready $((SECONDS + CLICKHOUSE_START_TIMEOUT)) 0.3 clickhouse-server \
    "clickhouse-server did not answer SELECT 1 on http 127.0.0.1:$CLICKHOUSE_HTTP_PORT within ${CLICKHOUSE_START_TIMEOUT}s" \
    answers
  local version
  version="$(http_query 'SELECT version()' 2>/dev/null || echo unknown)"
  if [[ -n "$CLICKHOUSE_TLS_PORT" ]]; then
    wait_ready $((SECONDS + CLICKHOUSE_START_TIMEOUT)) 0.3 clickhouse-server \
      "clickhouse-server did not open its TLS port 127.0.0.1:$CLICKHOUSE_TLS_PORT" port_open "$CLICKHOUSE_TLS_PORT"
    log "ready: native TLS on 127.0.0.1:$CLICKHOUSE_TLS_PORT, user ncclwatch; CA and password in $CLICKHOUSE_SECURE_DIR"
  fi
  log "ready: ClickHouse $version on tcp 127.0.0.1:$CLICKHOUSE_PORT, http 127.0.0.1:$CLICKHOUSE_HTTP_PORT (pid $(read_pid))"
}

# secure_setup: certificates, the password user and the TLS port, as config.d
# and users.d files beside the rendered config (18.16 merges both).
secure_setup() {
  require_port_free "$CLICKHOUSE_TLS_PORT" TLS
  make_tls "$CLICKHOUSE_SECURE_DIR"
  make_secret "$CLICKHOUSE_SECURE_DIR/ncclwatch.password"
  local hash
  hash="$(tr -d '\n' <"$CLICKHOUSE_SECURE_DIR/ncclwatch.password" | sha256sum | cut -d' ' -f1)"
  mkdir -p "$RUN_DIR/config.d" "$RUN_DIR/users.d"
  sed -e "s|@TLS_PORT@|$CLICKHOUSE_TLS_PORT|g" -e "s|@SECURE_DIR@|$CLICKHOUSE_SECURE_DIR|g" \
    "$CONF_SRC/secure.xml" >"$RUN_DIR/config.d/secure.xml"
  sed -e "s|@PASSWORD_SHA256@|$hash|g" "$CONF_SRC/users-secure.xml" >"$RUN_DIR/users.d/secure.xml"
}

stop() {
  stop_server "$CLICKHOUSE_PORT" "$CLICKHOUSE_STOP_TIMEOUT" 0.2
}

describe() {
  printf 'ClickHouse %s on tcp 127.0.0.1:%s, http 127.0.0.1:%s\n' \
    "$(http_query 'SELECT version()' 2>/dev/null || echo '?')" "$CLICKHOUSE_PORT" "$CLICKHOUSE_HTTP_PORT"
}

status() {
  server_status "$CLICKHOUSE_PORT" "SELECT 1 on http 127.0.0.1:$CLICKHOUSE_HTTP_PORT" describe
}

client() {
  install_packages
  exec "$(client_bin)" --host 127.0.0.1 --port "$CLICKHOUSE_PORT" "$@"
}

usage() {
  cat >&2 <<EOF
usage: $0 start|stop|status|restart|install
       $0 client [ARGS...]
env: CLICKHOUSE_PORT ($CLICKHOUSE_PORT) CLICKHOUSE_HTTP_PORT ($CLICKHOUSE_HTTP_PORT)
     CLICKHOUSE_TLS_PORT (${CLICKHOUSE_TLS_PORT:-unset: no TLS port}) CLICKHOUSE_SECURE_DIR ($CLICKHOUSE_SECURE_DIR)
     CLICKHOUSE_START_TIMEOUT ($CLICKHOUSE_START_TIMEOUT) CLICKHOUSE_STOP_TIMEOUT ($CLICKHOUSE_STOP_TIMEOUT)
EOF
  exit 2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; start ;;
  install) install_packages; log "clickhouse-server: $(server_bin), clickhouse-client: $(client_bin)" ;;
  client) shift; client "$@" ;;
  *) usage ;;
esac
