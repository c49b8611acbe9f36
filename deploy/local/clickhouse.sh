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
# See deploy/local/README.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF_SRC="$HERE/clickhouse"

CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-9000}"
CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-8123}"
CLICKHOUSE_START_TIMEOUT="${CLICKHOUSE_START_TIMEOUT:-60}"
CLICKHOUSE_STOP_TIMEOUT="${CLICKHOUSE_STOP_TIMEOUT:-30}"

RUN_DIR="${TMPDIR:-/tmp}/ncclwatch-clickhouse-$CLICKHOUSE_PORT"
RUN_DIR="${RUN_DIR//\/\//\/}"
LOG_DIR="$RUN_DIR/logs"
PID_FILE="$RUN_DIR/clickhouse.pid"
CONFIG="$RUN_DIR/config.xml"

log() { printf 'clickhouse.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- install ----------------------------------------------------------------

server_bin() {
  local b
  for b in "$(command -v clickhouse-server 2>/dev/null || true)" /usr/sbin/clickhouse-server /usr/bin/clickhouse-server; do
    if [[ -n "$b" && -x "$b" ]]; then
      printf '%s\n' "$b"
      return 0
    fi
  done
  return 1
}

client_bin() {
  local b
  for b in "$(command -v clickhouse-client 2>/dev/null || true)" /usr/bin/clickhouse-client; do
    if [[ -n "$b" && -x "$b" ]]; then
      printf '%s\n' "$b"
      return 0
    fi
  done
  return 1
}

POLICY_RC_D=/usr/sbin/policy-rc.d
POLICY_RC_D_OURS=""

remove_policy_rc_d() {
  if [[ -n "$POLICY_RC_D_OURS" ]]; then
    rm -f "$POLICY_RC_D"
    POLICY_RC_D_OURS=""
  fi
}

install_packages() {
  if server_bin >/dev/null && client_bin >/dev/null; then
    return 0
  fi
  [[ "$(id -u)" -eq 0 ]] || die "clickhouse-server/clickhouse-client missing; run as root (or: apt-get install clickhouse-server clickhouse-client)"
  command -v apt-get >/dev/null || die "clickhouse-server missing and apt-get not available"
  log "installing clickhouse-server and clickhouse-client with apt-get"
  # The package's postinst would start the server through its init script on
  # the default ports; forbid that for the duration of the install.
  if [[ ! -e "$POLICY_RC_D" ]]; then
    printf '#!/bin/sh\n# temporary, from ncclwatch deploy/local/clickhouse.sh\nexit 101\n' >"$POLICY_RC_D"
    chmod 755 "$POLICY_RC_D"
    POLICY_RC_D_OURS=1
    trap remove_policy_rc_d EXIT
  fi
  local apt_opts=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get -q -o DPkg::Lock::Timeout=300 update &&
         apt-get install "${apt_opts[@]}" --no-install-recommends clickhouse-server clickhouse-client; } \
       </dev/null >"${TMPDIR:-/tmp}/ncclwatch-clickhouse-apt.log" 2>&1; then
    tail -n 30 "${TMPDIR:-/tmp}/ncclwatch-clickhouse-apt.log" >&2 || true
    remove_policy_rc_d
    die "apt-get install clickhouse-server clickhouse-client failed"
  fi
  remove_policy_rc_d
  server_bin >/dev/null || die "clickhouse-server binary not found after install"
  client_bin >/dev/null || die "clickhouse-client binary not found after install"
}

# --- helpers ----------------------------------------------------------------

read_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  printf '%s\n' "$pid"
}

# True when the pid file names a live clickhouse-server started by this script for this port.
is_running() {
  local pid cmd
  pid="$(read_pid)" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *clickhouse* && "$cmd" == *"$CONFIG"* ]]
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Run a query over the HTTP interface, print the body; fails on non-200 or no answer.
http_query() {
  local q="$1"
  if command -v curl >/dev/null; then
    curl -fsS --max-time 5 --data-binary "$q" "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT/"
  elif command -v wget >/dev/null; then
    wget -q -T 5 -t 1 -O - --post-data="$q" "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT/"
  else
    # bash only: HTTP/1.0 POST over /dev/tcp.
    # shellcheck disable=SC2016 # the inner script is expanded by the inner bash
    timeout 5 "$BASH" -c '
      set -euo pipefail
      exec 3<>"/dev/tcp/127.0.0.1/$1"
      printf "POST / HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" "${#2}" "$2" >&3
      IFS= read -r status <&3
      [[ "$status" == "HTTP/1."?" 200"* ]] || exit 1
      while IFS= read -r line <&3 && [[ "${line%$'"'"'\r'"'"'}" != "" ]]; do :; done
      cat <&3' _ "$CLICKHOUSE_HTTP_PORT" "$q"
  fi
}

answers() {
  local out
  out="$(http_query 'SELECT 1' 2>/dev/null)" || return 1
  [[ "$out" == "1" ]]
}

log_tail() {
  local f
  for f in "$LOG_DIR/clickhouse-server.err.log" "$LOG_DIR/clickhouse-server.log" "$LOG_DIR/stdout.log"; do
    if [[ -s "$f" ]]; then
      log "---- last lines of $f ----"
      tail -n 30 "$f" >&2 || true
    fi
  done
}

# --- commands ---------------------------------------------------------------

start() {
  if is_running; then
    if answers; then
      log "already running (pid $(read_pid), tcp 127.0.0.1:$CLICKHOUSE_PORT, http 127.0.0.1:$CLICKHOUSE_HTTP_PORT)"
      return 0
    fi
    log "pid $(read_pid) is running but not answering; restarting it"
    stop
  fi
  local p
  for p in "$CLICKHOUSE_PORT" "$CLICKHOUSE_HTTP_PORT"; do
    if port_open "$p"; then
      die "127.0.0.1:$p is already in use by another process"
    fi
  done

  install_packages
  local server
  server="$(server_bin)"

  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"/{data,tmp,user_files,format_schemas,logs}
  sed -e "s|@TCP_PORT@|$CLICKHOUSE_PORT|g" \
      -e "s|@HTTP_PORT@|$CLICKHOUSE_HTTP_PORT|g" \
      -e "s|@RUN_DIR@|$RUN_DIR|g" \
      "$CONF_SRC/config.xml" >"$CONFIG"
  cp "$CONF_SRC/users.xml" "$RUN_DIR/users.xml"

  log "starting clickhouse-server on tcp 127.0.0.1:$CLICKHOUSE_PORT, http 127.0.0.1:$CLICKHOUSE_HTTP_PORT (dir $RUN_DIR)"
  (cd "$RUN_DIR" && exec setsid nohup "$server" --config-file="$CONFIG" \
    </dev/null >"$LOG_DIR/stdout.log" 2>&1) &
  echo "$!" >"$PID_FILE"

  local deadline=$((SECONDS + CLICKHOUSE_START_TIMEOUT))
  until answers; do
    if ! is_running; then
      log_tail
      die "clickhouse-server exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      log_tail
      die "clickhouse-server did not answer SELECT 1 on http 127.0.0.1:$CLICKHOUSE_HTTP_PORT within ${CLICKHOUSE_START_TIMEOUT}s"
    fi
    sleep 0.3
  done
  local version
  version="$(http_query 'SELECT version()' 2>/dev/null || echo unknown)"
  log "ready: ClickHouse $version on tcp 127.0.0.1:$CLICKHOUSE_PORT, http 127.0.0.1:$CLICKHOUSE_HTTP_PORT (pid $(read_pid))"
}

stop() {
  local pid
  if ! is_running; then
    log "not running (port $CLICKHOUSE_PORT)"
    rm -rf "$RUN_DIR"
    return 0
  fi
  pid="$(read_pid)"
  log "stopping pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + CLICKHOUSE_STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "still running after ${CLICKHOUSE_STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.2
  done
  rm -rf "$RUN_DIR"
  log "stopped"
}

status() {
  if ! is_running; then
    log "not running (port $CLICKHOUSE_PORT)"
    return 1
  fi
  if answers; then
    log "running and answering: ClickHouse $(http_query 'SELECT version()' 2>/dev/null || echo '?') on tcp 127.0.0.1:$CLICKHOUSE_PORT, http 127.0.0.1:$CLICKHOUSE_HTTP_PORT (pid $(read_pid))"
    return 0
  fi
  log "pid $(read_pid) is running but SELECT 1 on http 127.0.0.1:$CLICKHOUSE_HTTP_PORT does not answer"
  return 1
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
