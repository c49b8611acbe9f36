#!/usr/bin/env bash
# Prometheus Alertmanager (Debian 12 package, 0.25, v2 API) on 127.0.0.1 for the tests.
#
#   deploy/local/alertmanager.sh start|stop|status|restart|install
#
# Installs prometheus-alertmanager with apt-get when missing (needs root; a
# `go install` from the Go module proxy does not work: the module lacks the
# built web assets), never uses the Debian init script/systemd unit, and runs
# the binary directly with deploy/local/alertmanager/alertmanager.yml rendered
# into ${TMPDIR:-/tmp}/ncclwatch-alertmanager-$ALERTMANAGER_PORT (removed by
# `stop`). Clustering is off, so nothing listens beyond the one port.
#
# env: ALERTMANAGER_PORT (9093; the tests use 19094, since the tests' Kafka
# controller listens on 19093), ALERTMANAGER_WEBHOOK_URL (where the test
# receiver sends notifications; default http://127.0.0.1:$((ALERTMANAGER_PORT+1))/alertmanager).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF_SRC="$HERE/alertmanager/alertmanager.yml"

ALERTMANAGER_PORT="${ALERTMANAGER_PORT:-9093}"
ALERTMANAGER_WEBHOOK_URL="${ALERTMANAGER_WEBHOOK_URL:-http://127.0.0.1:$((ALERTMANAGER_PORT + 1))/alertmanager}"
ALERTMANAGER_START_TIMEOUT="${ALERTMANAGER_START_TIMEOUT:-30}"
ALERTMANAGER_STOP_TIMEOUT="${ALERTMANAGER_STOP_TIMEOUT:-15}"

RUN_DIR="${TMPDIR:-/tmp}/ncclwatch-alertmanager-$ALERTMANAGER_PORT"
RUN_DIR="${RUN_DIR//\/\//\/}"
PID_FILE="$RUN_DIR/alertmanager.pid"
CONFIG="$RUN_DIR/alertmanager.yml"
LOG="$RUN_DIR/alertmanager.log"

log() { printf 'alertmanager.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

am_bin() {
  local b
  for b in "$(command -v prometheus-alertmanager 2>/dev/null || true)" /usr/bin/prometheus-alertmanager \
           "$(command -v alertmanager 2>/dev/null || true)"; do
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
  if am_bin >/dev/null; then
    return 0
  fi
  [[ "$(id -u)" -eq 0 ]] || die "prometheus-alertmanager missing; run as root (or: apt-get install prometheus-alertmanager)"
  command -v apt-get >/dev/null || die "prometheus-alertmanager missing and apt-get not available"
  log "installing prometheus-alertmanager with apt-get"
  # The package's postinst would start the service on the default ports;
  # forbid that for the duration of the install.
  if [[ ! -e "$POLICY_RC_D" ]]; then
    printf '#!/bin/sh\n# temporary, from ncclwatch deploy/local/alertmanager.sh\nexit 101\n' >"$POLICY_RC_D"
    chmod 755 "$POLICY_RC_D"
    POLICY_RC_D_OURS=1
    trap remove_policy_rc_d EXIT
  fi
  local apt_opts=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get -q -o DPkg::Lock::Timeout=300 update &&
         apt-get install "${apt_opts[@]}" --no-install-recommends prometheus-alertmanager; } \
       </dev/null >"${TMPDIR:-/tmp}/ncclwatch-alertmanager-apt.log" 2>&1; then
    tail -n 30 "${TMPDIR:-/tmp}/ncclwatch-alertmanager-apt.log" >&2 || true
    remove_policy_rc_d
    die "apt-get install prometheus-alertmanager failed"
  fi
  remove_policy_rc_d
  am_bin >/dev/null || die "prometheus-alertmanager binary not found after install"
}

read_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  printf '%s\n' "$pid"
}

# True when the pid file names a live Alertmanager started by this script for this port.
is_running() {
  local pid cmd
  pid="$(read_pid)" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *alertmanager* && "$cmd" == *"$CONFIG"* ]]
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# GET a path, print the body; fails on non-2xx or no answer.
http_get() {
  if command -v curl >/dev/null; then
    curl -fsS --max-time 5 "http://127.0.0.1:$ALERTMANAGER_PORT$1"
  elif command -v wget >/dev/null; then
    wget -q -T 5 -t 1 -O - "http://127.0.0.1:$ALERTMANAGER_PORT$1"
  else
    # shellcheck disable=SC2016 # the inner script is expanded by the inner bash
    timeout 5 "$BASH" -c '
      set -euo pipefail
      exec 3<>"/dev/tcp/127.0.0.1/$1"
      printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3
      IFS= read -r status <&3
      [[ "$status" == "HTTP/1."?" 2"* ]] || exit 1
      while IFS= read -r line <&3 && [[ "${line%$'"'"'\r'"'"'}" != "" ]]; do :; done
      cat <&3' _ "$ALERTMANAGER_PORT" "$1"
  fi
}

# Ready when /-/ready answers and the v2 API serves its status.
answers() {
  http_get /-/ready >/dev/null 2>&1 && http_get /api/v2/status >/dev/null 2>&1
}

version() {
  local out
  out="$(http_get /api/v2/status 2>/dev/null || true)"
  out="${out#*\"version\":\"}"
  printf '%s\n' "${out%%\"*}"
}

log_tail() {
  if [[ -s "$LOG" ]]; then
    log "---- last lines of $LOG ----"
    tail -n 30 "$LOG" >&2 || true
  fi
}

start() {
  if is_running; then
    if answers; then
      log "already running (pid $(read_pid), http 127.0.0.1:$ALERTMANAGER_PORT)"
      return 0
    fi
    log "pid $(read_pid) is running but not answering; restarting it"
    stop
  fi
  if port_open "$ALERTMANAGER_PORT"; then
    die "127.0.0.1:$ALERTMANAGER_PORT is already in use by another process"
  fi

  install_packages
  local bin
  bin="$(am_bin)"

  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR/data"
  sed -e "s|@WEBHOOK_URL@|$ALERTMANAGER_WEBHOOK_URL|g" "$CONF_SRC" >"$CONFIG"

  log "starting $bin on http 127.0.0.1:$ALERTMANAGER_PORT (dir $RUN_DIR)"
  # --cluster.listen-address= turns gossip off: no second port, no peers.
  (cd "$RUN_DIR" && exec setsid nohup "$bin" \
      --config.file="$CONFIG" \
      --storage.path="$RUN_DIR/data" \
      --web.listen-address="127.0.0.1:$ALERTMANAGER_PORT" \
      --cluster.listen-address= \
      --log.level=info \
    </dev/null >"$LOG" 2>&1) &
  echo "$!" >"$PID_FILE"

  local deadline=$((SECONDS + ALERTMANAGER_START_TIMEOUT))
  until answers; do
    if ! is_running; then
      log_tail
      die "alertmanager exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      log_tail
      die "alertmanager did not answer /-/ready on 127.0.0.1:$ALERTMANAGER_PORT within ${ALERTMANAGER_START_TIMEOUT}s"
    fi
    sleep 0.2
  done
  log "ready: Alertmanager $(version) on http 127.0.0.1:$ALERTMANAGER_PORT (pid $(read_pid)), notifications to $ALERTMANAGER_WEBHOOK_URL"
}

stop() {
  local pid
  if ! is_running; then
    log "not running (port $ALERTMANAGER_PORT)"
    rm -rf "$RUN_DIR"
    return 0
  fi
  pid="$(read_pid)"
  log "stopping pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + ALERTMANAGER_STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "still running after ${ALERTMANAGER_STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.1
  done
  rm -rf "$RUN_DIR"
  log "stopped"
}

status() {
  if ! is_running; then
    log "not running (port $ALERTMANAGER_PORT)"
    return 1
  fi
  if answers; then
    log "running and answering: Alertmanager $(version) on http 127.0.0.1:$ALERTMANAGER_PORT (pid $(read_pid))"
    return 0
  fi
  log "pid $(read_pid) is running but /-/ready on 127.0.0.1:$ALERTMANAGER_PORT does not answer"
  return 1
}

usage() {
  cat >&2 <<USAGE
usage: $0 start|stop|status|restart|install
env: ALERTMANAGER_PORT ($ALERTMANAGER_PORT) ALERTMANAGER_WEBHOOK_URL ($ALERTMANAGER_WEBHOOK_URL)
     ALERTMANAGER_START_TIMEOUT ($ALERTMANAGER_START_TIMEOUT) ALERTMANAGER_STOP_TIMEOUT ($ALERTMANAGER_STOP_TIMEOUT)
USAGE
  exit 2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; start ;;
  install) install_packages; log "alertmanager: $(am_bin)" ;;
  *) usage ;;
esac
