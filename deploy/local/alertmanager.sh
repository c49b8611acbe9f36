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

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF_SRC="$HERE/alertmanager/alertmanager.yml"

ALERTMANAGER_PORT="${ALERTMANAGER_PORT:-9093}"
ALERTMANAGER_WEBHOOK_URL="${ALERTMANAGER_WEBHOOK_URL:-http://127.0.0.1:$((ALERTMANAGER_PORT + 1))/alertmanager}"
ALERTMANAGER_START_TIMEOUT="${ALERTMANAGER_START_TIMEOUT:-30}"
ALERTMANAGER_STOP_TIMEOUT="${ALERTMANAGER_STOP_TIMEOUT:-15}"

RUN_DIR="$(run_dir alertmanager "$ALERTMANAGER_PORT")"
PID_FILE="$RUN_DIR/alertmanager.pid"
CONFIG="$RUN_DIR/alertmanager.yml"
LOG="$RUN_DIR/alertmanager.log"

am_bin() {
  first_executable "$(command -v prometheus-alertmanager 2>/dev/null || true)" /usr/bin/prometheus-alertmanager \
    "$(command -v alertmanager 2>/dev/null || true)"
}

install_packages() {
  if am_bin >/dev/null; then
    return 0
  fi
  # apt_install keeps the package's init script from starting the service on
  # the default ports.
  apt_install prometheus-alertmanager prometheus-alertmanager
  am_bin >/dev/null || die "prometheus-alertmanager binary not found after install"
}

# True when the pid file names a live Alertmanager started by this script for this port.
is_running() {
  pid_cmdline_has alertmanager "$CONFIG"
}

# GET a path, print the body; fails on non-2xx or no answer.
http_get() {
  http_request "$ALERTMANAGER_PORT" "$1"
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
  tail_logs 30 "$LOG"
}

start() {
  if already_running "http 127.0.0.1:$ALERTMANAGER_PORT"; then
    return 0
  fi
  require_port_free "$ALERTMANAGER_PORT"

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

  wait_ready $((SECONDS + ALERTMANAGER_START_TIMEOUT)) 0.2 alertmanager \
    "alertmanager did not answer /-/ready on 127.0.0.1:$ALERTMANAGER_PORT within ${ALERTMANAGER_START_TIMEOUT}s" \
    answers
  log "ready: Alertmanager $(version) on http 127.0.0.1:$ALERTMANAGER_PORT (pid $(read_pid)), notifications to $ALERTMANAGER_WEBHOOK_URL"
}

stop() {
  stop_server "$ALERTMANAGER_PORT" "$ALERTMANAGER_STOP_TIMEOUT" 0.1
}

describe() {
  printf 'Alertmanager %s on http 127.0.0.1:%s\n' "$(version)" "$ALERTMANAGER_PORT"
}

status() {
  server_status "$ALERTMANAGER_PORT" "/-/ready on 127.0.0.1:$ALERTMANAGER_PORT" describe
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
