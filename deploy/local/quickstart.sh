#!/usr/bin/env bash
# quickstart.sh start|stop|status: the first minutes of a real deployment on
# one machine. start brings up Kafka and ClickHouse (kafka.sh,
# clickhouse.sh), applies the migrations, starts `ncclwatch run` in the
# background, replays three bundled real NCCL logs as three jobs, prints
# job_verdicts and leaves everything running with the URLs to open. stop
# stops run and both servers.
#
# Ports as for the other deploy/local scripts: KAFKA_PORT (9092),
# CLICKHOUSE_PORT (9000), CLICKHOUSE_HTTP_PORT (8123); run's /metrics on
# NCCLWATCH_LISTEN (127.0.0.1:9464). NCCLWATCH is the binary (default
# bin/ncclwatch, built when missing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
. "$here/lib.sh"

KAFKA_PORT="${KAFKA_PORT:-9092}"
CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-9000}"
CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-8123}"
LISTEN="${NCCLWATCH_LISTEN:-127.0.0.1:9464}"
export KAFKA_PORT CLICKHOUSE_PORT CLICKHOUSE_HTTP_PORT
NCCLWATCH="${NCCLWATCH:-$root/bin/ncclwatch}"
RUN_DIR="$(run_dir quickstart "$KAFKA_PORT")"
PID_FILE="$RUN_DIR/run.pid"
TOPIC=quickstart-logs
# Three real excerpts (testdata/corpus/): healthy InfiniBand with GPUDirect
# RDMA, AWS EFA, and a silent socket fallback.
JOBS=(
  "ib-gdr:testdata/corpus/083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log"
  "efa:testdata/corpus/082_efa_aws_libfabric_gdrdma_p4d_eks_2node_16rank_channels.log"
  "socket-fallback:testdata/corpus/107_silent_socket_fallback_cross_dc_h100nvl_a100_16rank_nccl2.26.2.log"
)

ch() { clickhouse-client --host 127.0.0.1 --port "$CLICKHOUSE_PORT" "$@"; }

run_alive() { [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

start() {
  "$here/kafka.sh" start
  "$here/clickhouse.sh" start
  if [[ ! -x "$NCCLWATCH" ]]; then
    log "building $NCCLWATCH"
    (cd "$root" && go build -o "$NCCLWATCH" ./cmd/ncclwatch)
  fi
  "$NCCLWATCH" migrate --clickhouse "127.0.0.1:$CLICKHOUSE_PORT"
  mkdir -p "$RUN_DIR"
  if run_alive; then
    log "ncclwatch run already running (pid $(cat "$PID_FILE"))"
  else
    # setsid: run outlives this script and the terminal's Ctrl-C.
    setsid "$NCCLWATCH" run --brokers "127.0.0.1:$KAFKA_PORT" --topic "$TOPIC" --group ncclwatch-quickstart \
      --clickhouse "127.0.0.1:$CLICKHOUSE_PORT" --listen "$LISTEN" >"$RUN_DIR/run.log" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    local deadline=$((SECONDS + 30))
    until curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1; do
      run_alive || { tail_logs 30 "$RUN_DIR/run.log"; die "ncclwatch run exited"; }
      (( SECONDS < deadline )) || { tail_logs 30 "$RUN_DIR/run.log"; die "ncclwatch run not healthy after 30 s"; }
      sleep 0.5
    done
    log "ncclwatch run started (pid $(cat "$PID_FILE"), log $RUN_DIR/run.log)"
  fi
  local j
  for j in "${JOBS[@]}"; do
    (cd "$root" && "$NCCLWATCH" replay --brokers "127.0.0.1:$KAFKA_PORT" --topic "$TOPIC" \
      --job "${j%%:*}" --namespace quickstart "${j#*:}")
  done
  local deadline=$((SECONDS + 60)) n=0
  until n="$(ch --query "SELECT count() FROM ncclwatch.job_verdicts WHERE namespace = 'quickstart'" 2>/dev/null)" \
      && (( n >= ${#JOBS[@]} )); do
    (( SECONDS < deadline )) || { tail_logs 30 "$RUN_DIR/run.log"; die "only ${n:-0} of ${#JOBS[@]} verdicts after 60 s"; }
    sleep 1
  done
  ch --query "SELECT job, verdict, network, network_class, gdr, nnodes, nranks FROM ncclwatch.job_verdicts
              WHERE namespace = 'quickstart' ORDER BY job FORMAT PrettyCompactMonoBlock"
  cat <<MSG

Running (stop with: deploy/local/quickstart.sh stop):
  ncclwatch metrics   http://$LISTEN/metrics   (also /healthz, /readyz; log $RUN_DIR/run.log)
  ClickHouse HTTP     http://127.0.0.1:$CLICKHOUSE_HTTP_PORT/?query=SELECT%20job,verdict,network%20FROM%20ncclwatch.job_verdicts
  ClickHouse native   clickhouse-client --port $CLICKHOUSE_PORT --query 'SELECT * FROM ncclwatch.job_verdicts'
  Kafka               127.0.0.1:$KAFKA_PORT, topic $TOPIC (more: bin/ncclwatch replay --brokers 127.0.0.1:$KAFKA_PORT --topic $TOPIC --job NAME FILE)
MSG
}

stop() {
  if run_alive; then
    local pid; pid="$(cat "$PID_FILE")"
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    log "ncclwatch run stopped"
  fi
  rm -rf "$RUN_DIR"
  "$here/kafka.sh" stop || true
  "$here/clickhouse.sh" stop || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if run_alive; then log "ncclwatch run running (pid $(cat "$PID_FILE"))"; else log "ncclwatch run not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
