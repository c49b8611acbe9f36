#!/bin/sh
# fabric-gate.sh NAMESPACE JOB — fail a training job that is not on the fabric.
#
# Asks ncclwatch's read API (GET /api/v1/jobs/NAMESPACE/JOB) for the job's
# verdict every GATE_INTERVAL seconds. An "ok" verdict passes the gate at
# once (exit 0). After GATE_AFTER seconds a verdict listed in GATE_FAIL
# (default socket_fallback) fails it: the job is annotated with the verdict
# and, by GATE_ACTION, deleted (default), suspended, or left alone (none);
# exit 1. Any other verdict, or no verdict yet, at the deadline passes with a
# warning (exit 0): the gate stops jobs on evidence only.
#
# Environment:
#   NCCLWATCH_URL         the service (default http://ncclwatch.ncclwatch.svc:9464)
#   NCCLWATCH_TOKEN_FILE  bearer token file for the API (optional)
#   GATE_AFTER            seconds to wait for the communicators to settle (default 600)
#   GATE_INTERVAL         seconds between checks (default 15)
#   GATE_FAIL             verdicts that fail the job, space-separated (default socket_fallback)
#   GATE_ACTION           delete | suspend | none (default delete)
#   GATE_KIND             the resource kubectl acts on (default job; e.g. jobset, pytorchjob)
#   GATE_CLUSTER          ncclwatch cluster name, when several clusters share one service
# Needs sh, curl and kubectl (RBAC: get, patch, delete on GATE_KIND in NAMESPACE).
set -u
ns=${1:?usage: fabric-gate.sh NAMESPACE JOB}
job=${2:?usage: fabric-gate.sh NAMESPACE JOB}
url=${NCCLWATCH_URL:-http://ncclwatch.ncclwatch.svc:9464}
after=${GATE_AFTER:-600}
interval=${GATE_INTERVAL:-15}
fail=${GATE_FAIL:-socket_fallback}
action=${GATE_ACTION:-delete}
kind=${GATE_KIND:-job}
query=
[ -n "${GATE_CLUSTER:-}" ] && query="?cluster=$GATE_CLUSTER"

verdict() {
	if [ -n "${NCCLWATCH_TOKEN_FILE:-}" ]; then
		body=$(curl -fsS --max-time 10 -H "Authorization: Bearer $(cat "$NCCLWATCH_TOKEN_FILE")" "$url/api/v1/jobs/$ns/$job$query" 2>/dev/null) || return 1
	else
		body=$(curl -fsS --max-time 10 "$url/api/v1/jobs/$ns/$job$query" 2>/dev/null) || return 1
	fi
	printf '%s\n' "$body" | sed -n 's/^ *"verdict": *"\([a-z_]*\)".*/\1/p'
}

start=$(date +%s)
v=
while :; do
	v=$(verdict) || v=
	if [ "$v" = ok ]; then
		echo "fabric-gate: $ns/$job is on the fabric (verdict ok)"
		exit 0
	fi
	now=$(date +%s)
	[ $((now - start)) -ge "$after" ] && break
	sleep "$interval"
done
for f in $fail; do
	if [ "$v" = "$f" ]; then
		echo "fabric-gate: $ns/$job verdict $v after ${after}s: failing it ($action)" >&2
		kubectl -n "$ns" annotate --overwrite "$kind" "$job" "ncclwatch.io/verdict=$v" >&2 || true
		case $action in
		delete) kubectl -n "$ns" delete "$kind" "$job" --wait=false >&2 ;;
		suspend) kubectl -n "$ns" patch "$kind" "$job" --type=merge -p '{"spec":{"suspend":true}}' >&2 ;;
		none) ;;
		*) echo "fabric-gate: GATE_ACTION=$action: want delete, suspend or none" >&2 ;;
		esac
		exit 1
	fi
done
echo "fabric-gate: $ns/$job verdict ${v:-none yet} after ${after}s: passing (no evidence of a fallback)" >&2
exit 0
