#!/usr/bin/env bash
# Load benchmark of ncclwatch on the local Kafka broker and ClickHouse server.
#
#   deploy/local/load.sh [RECORDS...] [-- LOAD_FLAGS...]
#
# Starts the servers with deploy/local/kafka.sh and clickhouse.sh when they
# are not running (and stops again only those it started), builds ncclwatch
# and the benchmark (cmd/ncclwatch-load), and runs
# `ncclwatch-load --peer --records N` once per RECORDS (default: 1000000
# 3000000), printing each report: ClickHouse's Kafka engine and then
# `ncclwatch run` consume the same fresh topic, and the ratio is printed.
# SHAPES="default random-steps cluster cluster-inspector" (or SHAPES=all) runs each stream
# shape in turn in one invocation per RECORDS, each on a fresh topic with
# its peer, and ends with one table of them all (shape, records, rows per
# table, ncclwatch and peer records/s, ratio, max RSS, CPU-s).
# LOAD_FLAGS go to every run, e.g. `-- --jobs 128 --partitions 16 --config
# tuned.yaml` (PEER=0 drops --peer); see `ncclwatch-load -h`. The report
# has the local server's and broker's CPU when clickhouse.sh's and
# kafka.sh's pid files are there. Every
# run uses a fresh topic and database (dropped at the end of the run; the
# topic's data goes with `kafka.sh stop`).
#
# env: KAFKA_PORT (9092) KAFKA_CONTROLLER_PORT (9093) CLICKHOUSE_PORT (9000)
#      CLICKHOUSE_HTTP_PORT (8123), as for the server scripts;
#      NCCLWATCH_BIN, NCCLWATCH_LOAD_BIN (built when unset); PEER (1);
#      SHAPES (unset: the default shape; a list of shapes or all);
#      KEEP_SERVERS=1 leaves servers this script started running;
#      TMPDIR (/tmp) holds the servers' data: TMPDIR=/dev/shm puts it in
#      RAM (the `disk:` line says where it is and warns of an ext4 without
#      a journal, whose file creation grows dearer run after run).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$HERE/lib.sh"
ROOT="$(cd "$HERE/../.." && pwd)"
export KAFKA_PORT="${KAFKA_PORT:-9092}"
export KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
export CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-9000}"
export CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-8123}"
KEEP_SERVERS="${KEEP_SERVERS:-}"
PEER="${PEER:-1}"
SHAPES="${SHAPES:-}"

counts=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  [[ "$1" =~ ^[0-9]+$ ]] || die "record count expected, got '$1' (usage: $0 [RECORDS...] [-- LOAD_FLAGS...])"
  counts+=("$1")
  shift
done
[[ "${1:-}" == "--" ]] && shift
[[ ${#counts[@]} -gt 0 ]] || counts=(1000000 3000000)

started=()
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local s
  if [[ -z "$KEEP_SERVERS" ]]; then
    for s in "${started[@]}"; do
      "$HERE/$s.sh" stop || true
    done
  fi
}
trap cleanup EXIT

for s in kafka clickhouse; do
  if "$HERE/$s.sh" status >/dev/null 2>&1; then
    log "$s already running"
  else
    "$HERE/$s.sh" start
    started+=("$s")
  fi
done

BIN="${NCCLWATCH_BIN:-}"
LOAD_BIN="${NCCLWATCH_LOAD_BIN:-}"
build_dir="${TMPDIR:-/tmp}/ncclwatch-load"
mkdir -p "$build_dir"
if [[ -z "$BIN" ]]; then
  BIN="$build_dir/ncclwatch"
  log "building $BIN"
  (cd "$ROOT" && go build -o "$BIN" ./cmd/ncclwatch)
fi
if [[ -z "$LOAD_BIN" ]]; then
  LOAD_BIN="$build_dir/ncclwatch-load"
  log "building $LOAD_BIN"
  (cd "$ROOT" && go build -o "$LOAD_BIN" ./cmd/ncclwatch-load)
fi
peer=()
[[ "$PEER" == 1 ]] && peer=(--peer --kafka-tool "$HERE/kafka.sh tool")
# SHAPES is blank- or comma-separated; --shape takes commas.
[[ -n "$SHAPES" ]] && peer+=(--shape "$(tr -s ' ' ',' <<<"$SHAPES" | sed 's/^,//; s/,$//')")
# The local server's pid (clickhouse.sh's pid file): the report gives its
# CPU during each consume phase.
data_dir="$(run_dir clickhouse "$CLICKHOUSE_PORT")"
chpid_file="$data_dir/clickhouse.pid"
server=()
[[ -r "$chpid_file" ]] && server=(--clickhouse-pid "$(cat "$chpid_file")")
# The local broker's pid (kafka.sh's pid file): its CPU too.
kpid_file="$(run_dir kafka "$KAFKA_PORT")/kafka.pid"
[[ -r "$kpid_file" ]] && server+=(--kafka-pid "$(cat "$kpid_file")")

log "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
# Where the ClickHouse server writes its parts. On ext4 without a journal
# the kernel checks each new inode against the ones freed in the last
# minutes, so every run's dropped part files make the next run's dearer
# (docs/performance.md); TMPDIR=/dev/shm puts the data in RAM.
fs="$(df --output=fstype "${TMPDIR:-/tmp}" 2>/dev/null | tail -1 | tr -d ' ')"
dev="$(basename "$(df --output=source "${TMPDIR:-/tmp}" 2>/dev/null | tail -1)")"
disk="server data in $data_dir on ${fs:-an unknown filesystem}"
if [[ "$fs" == ext4 && -d "/proc/fs/ext4/$dev" ]] && ! compgen -G "/proc/fs/jbd2/$dev-*" >/dev/null; then
  disk+=" without a journal: each run's part files make the next runs slower; TMPDIR=/dev/shm avoids it"
fi
log "disk: $disk"
status=0
for n in "${counts[@]}"; do
  log "ncclwatch-load ${peer[*]} --records $n $*"
  if ! "$LOAD_BIN" --ncclwatch "$BIN" "${peer[@]}" "${server[@]}" --brokers "127.0.0.1:$KAFKA_PORT" --clickhouse "127.0.0.1:$CLICKHOUSE_PORT" --records "$n" "$@"; then
    status=1
  fi
  echo
done
exit "$status"
