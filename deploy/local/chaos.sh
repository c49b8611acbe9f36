#!/usr/bin/env bash
# chaos.sh [long|short] [go test flags...]: the fault-injection test of
# docs/delivery.md (TestIntegrationChaos) by hand. Long (the
# default) is NCCLWATCH_CHAOS_LONG=1: 20 jobs of 4 MiB, 10 SIGKILLs, the
# test's own Kafka broker stopped for 30 s and started again with its data,
# its own ClickHouse SIGSTOPped 60 s, a second group member, 2 000 poison
# records; every table compared with a fault-free run. Short is the form
# `make test` runs (broker down 2 s; NCCLWATCH_CHAOS_BROKER=0: no restart;
# NCCLWATCH_CHAOS=0 leaves it out of make test).
#
# Starts the shared Kafka broker and ClickHouse server (kafka.sh,
# clickhouse.sh) when they are not running, and stops again the ones it
# started. The test starts its private broker and server itself, on free
# ports under a temporary directory. Ports as for the other scripts:
# KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093), CLICKHOUSE_PORT (9000),
# CLICKHOUSE_HTTP_PORT (8123). Long: about 16 minutes on the shared 2 cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
. "$here/lib.sh"

KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-9000}"
CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-8123}"
# Plaintext only: the test needs no secured listener.
export KAFKA_PORT KAFKA_CONTROLLER_PORT CLICKHOUSE_PORT CLICKHOUSE_HTTP_PORT
export KAFKA_SASL_PORT="" CLICKHOUSE_TLS_PORT=""

form="${1:-long}"
case "$form" in
  long) long=1 ;;
  short) long=0 ;;
  -h|--help|help)
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
  *) die "unknown form $form (long or short)" ;;
esac
shift || true

started=()
cleanup() {
  local s
  for s in "${started[@]}"; do
    "$here/$s.sh" stop || true
  done
}
trap cleanup EXIT

for s in kafka clickhouse; do
  if ! "$here/$s.sh" status >/dev/null 2>&1; then
    "$here/$s.sh" start
    started+=("$s")
  fi
done

export NCCLWATCH_TEST_KAFKA="127.0.0.1:$KAFKA_PORT" NCCLWATCH_TEST_CLICKHOUSE="127.0.0.1:$CLICKHOUSE_PORT"
export NCCLWATCH_REQUIRE_SERVERS=1 NCCLWATCH_CHAOS=1 NCCLWATCH_CHAOS_LONG="$long"
log "running TestIntegrationChaos ($form form)"
cd "$root"
go test -count=1 -timeout 40m -run '^TestIntegrationChaos$' ./cmd/ncclwatch -v "$@"
