#!/usr/bin/env bash
# A ClickHouse cluster on 127.0.0.1: several clickhouse-server 18.16 processes
# (clickhouse.sh, one run directory each) in one cluster of shards and
# replicas, coordinated by a real ZooKeeper (zookeeper.sh).
#
#   deploy/local/clickhouse-cluster.sh start|stop|status|restart
#   deploy/local/clickhouse-cluster.sh kill-node N     SIGKILL server N, keep its data
#   deploy/local/clickhouse-cluster.sh start-node N    start server N again on its data
#   deploy/local/clickhouse-cluster.sh client N ARGS   clickhouse-client on server N
#   deploy/local/clickhouse-cluster.sh addrs           host:port of every server, comma-separated
#
# CLICKHOUSE_CLUSTER_SHARDS lists the shard of each server, in order
# (default "1 1 2": shard 1 has two replicas, shard 2 one). Server N (from 1)
# listens on CLICKHOUSE_CLUSTER_PORT + 10*(N-1) (native), +1 (HTTP), +2
# (interserver, for replica fetches). Its macros are {shard} (the shard
# number) and {replica} (chN, unique in the whole cluster). The cluster is
# named CLICKHOUSE_CLUSTER_NAME in remote_servers, internal_replication on
# (a Distributed table writes one replica; replication copies the rest).
# See deploy/local/README.md.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

CLICKHOUSE_CLUSTER_NAME="${CLICKHOUSE_CLUSTER_NAME:-ncclwatch}"
CLICKHOUSE_CLUSTER_SHARDS="${CLICKHOUSE_CLUSTER_SHARDS:-1 1 2}"
CLICKHOUSE_CLUSTER_PORT="${CLICKHOUSE_CLUSTER_PORT:-9100}"
export ZOOKEEPER_PORT="${ZOOKEEPER_PORT:-2181}"

read -r -a SHARDS <<<"$CLICKHOUSE_CLUSTER_SHARDS"
((${#SHARDS[@]} > 0)) || die "CLICKHOUSE_CLUSTER_SHARDS is empty"

tcp_port() { echo $((CLICKHOUSE_CLUSTER_PORT + 10 * ($1 - 1))); }
http_port() { echo $((CLICKHOUSE_CLUSTER_PORT + 10 * ($1 - 1) + 1)); }
interserver_port() { echo $((CLICKHOUSE_CLUSTER_PORT + 10 * ($1 - 1) + 2)); }

check_node() {
  [[ "$1" =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= ${#SHARDS[@]})) || die "no server $1 (1..${#SHARDS[@]})"
}

# remote_servers: one <shard> per distinct shard number, its servers as replicas.
remote_servers() {
  local max=0 s n
  for s in "${SHARDS[@]}"; do ((s > max)) && max=$s; done
  printf '    <remote_servers>\n        <%s>\n' "$CLICKHOUSE_CLUSTER_NAME"
  for ((s = 1; s <= max; s++)); do
    printf '            <shard>\n                <internal_replication>true</internal_replication>\n'
    for ((n = 1; n <= ${#SHARDS[@]}; n++)); do
      if ((SHARDS[n - 1] == s)); then
        printf '                <replica><host>127.0.0.1</host><port>%s</port></replica>\n' "$(tcp_port "$n")"
      fi
    done
    printf '            </shard>\n'
  done
  printf '        </%s>\n    </remote_servers>\n' "$CLICKHOUSE_CLUSTER_NAME"
}

# node_env N: run the rest with clickhouse.sh's environment for server N.
node_env() {
  local n="$1"
  shift
  local conf
  conf="$(run_dir clickhouse-cluster-conf "$(tcp_port "$n")")"
  mkdir -p "$conf"
  {
    printf '<?xml version="1.0"?>\n<!-- server %s of cluster %s, by clickhouse-cluster.sh -->\n<yandex>\n' "$n" "$CLICKHOUSE_CLUSTER_NAME"
    printf '    <interserver_http_host>127.0.0.1</interserver_http_host>\n'
    printf '    <interserver_http_port>%s</interserver_http_port>\n' "$(interserver_port "$n")"
    remote_servers
    printf '    <zookeeper>\n        <node><host>127.0.0.1</host><port>%s</port></node>\n' "$ZOOKEEPER_PORT"
    printf '        <session_timeout_ms>30000</session_timeout_ms>\n    </zookeeper>\n'
    printf '    <macros>\n        <shard>%s</shard>\n        <replica>ch%s</replica>\n    </macros>\n' "${SHARDS[n - 1]}" "$n"
    printf '    <distributed_ddl>\n        <path>/clickhouse/task_queue/ddl</path>\n    </distributed_ddl>\n'
    printf '</yandex>\n'
  } >"$conf/cluster.xml"
  CLICKHOUSE_PORT="$(tcp_port "$n")" CLICKHOUSE_HTTP_PORT="$(http_port "$n")" CLICKHOUSE_TLS_PORT= \
    CLICKHOUSE_CONFIG_D="$conf" "$@"
}

start_node() {
  check_node "$1"
  node_env "$1" env CLICKHOUSE_KEEP_DATA="${2:-}" "$HERE/clickhouse.sh" start
}

kill_node() {
  check_node "$1"
  local pid_file pid
  pid_file="$(run_dir clickhouse "$(tcp_port "$1")")/clickhouse.pid"
  pid="$(cat "$pid_file" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || die "server $1 is not running"
  grep -q clickhouse "/proc/$pid/cmdline" 2>/dev/null || die "pid $pid of server $1 is not clickhouse-server"
  kill -KILL "$pid"
  local deadline=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  log "server $1 (pid $pid) killed; its data stays for start-node $1"
}

start() {
  "$HERE/zookeeper.sh" start
  local n
  for ((n = 1; n <= ${#SHARDS[@]}; n++)); do
    start_node "$n"
  done
  log "ready: cluster $CLICKHOUSE_CLUSTER_NAME, shards of servers 1..${#SHARDS[@]}: ${SHARDS[*]}; native ports $(addrs)"
}

stop() {
  local n
  for ((n = 1; n <= ${#SHARDS[@]}; n++)); do
    node_env "$n" "$HERE/clickhouse.sh" stop || true
    rm -rf "$(run_dir clickhouse-cluster-conf "$(tcp_port "$n")")"
  done
  "$HERE/zookeeper.sh" stop
}

status() {
  local n rc=0
  "$HERE/zookeeper.sh" status || rc=1
  for ((n = 1; n <= ${#SHARDS[@]}; n++)); do
    node_env "$n" "$HERE/clickhouse.sh" status || rc=1
  done
  return "$rc"
}

addrs() {
  local n out=()
  for ((n = 1; n <= ${#SHARDS[@]}; n++)); do out+=("127.0.0.1:$(tcp_port "$n")"); done
  local IFS=,
  printf '%s\n' "${out[*]}"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; start ;;
  kill-node) kill_node "${2:-}" ;;
  start-node) start_node "${2:-}" 1 ;;
  client) n="${2:-}"; check_node "$n"; shift 2; node_env "$n" "$HERE/clickhouse.sh" client "$@" ;;
  addrs) addrs ;;
  *) echo "usage: $0 start|stop|status|restart|kill-node N|start-node N|client N ARGS|addrs" >&2; exit 2 ;;
esac
