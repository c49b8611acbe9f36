#!/usr/bin/env bash
# promtool (Debian 12 package `prometheus`, 2.42) for checking the rules in
# deploy/prometheus/, and amtool (package `prometheus-alertmanager`) for the
# example Alertmanager configuration.
#
#   deploy/local/promtool.sh install     install the packages when missing
#   deploy/local/promtool.sh check       promtool check rules + promtool test rules
#                                        + amtool check-config on deploy/prometheus/
#   deploy/local/promtool.sh promtool ARGS...   run promtool
#
# Installs with apt-get when missing (needs root); the packages' services are
# never started (a temporary policy-rc.d forbids it during the install).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROM_DIR="$(cd "$HERE/.." && pwd)/prometheus"

log() { printf 'promtool.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

POLICY_RC_D=/usr/sbin/policy-rc.d
POLICY_RC_D_OURS=""

remove_policy_rc_d() {
  if [[ -n "$POLICY_RC_D_OURS" ]]; then
    rm -f "$POLICY_RC_D"
    POLICY_RC_D_OURS=""
  fi
}

install_packages() {
  local missing=()
  command -v promtool >/dev/null || missing+=(prometheus)
  command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
  ((${#missing[@]} == 0)) && return 0
  [[ "$(id -u)" -eq 0 ]] || die "${missing[*]} missing; run as root (or: apt-get install ${missing[*]})"
  command -v apt-get >/dev/null || die "${missing[*]} missing and apt-get not available"
  log "installing ${missing[*]} with apt-get"
  if [[ ! -e "$POLICY_RC_D" ]]; then
    printf '#!/bin/sh\n# temporary, from ncclwatch deploy/local/promtool.sh\nexit 101\n' >"$POLICY_RC_D"
    chmod 755 "$POLICY_RC_D"
    POLICY_RC_D_OURS=1
    trap remove_policy_rc_d EXIT
  fi
  local apt_opts=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get -q -o DPkg::Lock::Timeout=300 update &&
         apt-get install "${apt_opts[@]}" --no-install-recommends "${missing[@]}"; } \
       </dev/null >"${TMPDIR:-/tmp}/ncclwatch-promtool-apt.log" 2>&1; then
    tail -n 30 "${TMPDIR:-/tmp}/ncclwatch-promtool-apt.log" >&2 || true
    remove_policy_rc_d
    die "apt-get install ${missing[*]} failed"
  fi
  remove_policy_rc_d
  command -v promtool >/dev/null || die "promtool not found after install"
  command -v amtool >/dev/null || die "amtool not found after install"
}

check() {
  install_packages
  local rules=() tests=()
  mapfile -t rules < <(find "$PROM_DIR/rules" -name '*.rules.yml' | sort)
  mapfile -t tests < <(find "$PROM_DIR/tests" -name '*.test.yml' | sort)
  ((${#rules[@]} > 0)) || die "no rule files in $PROM_DIR/rules"
  ((${#tests[@]} > 0)) || die "no rule tests in $PROM_DIR/tests"
  promtool check rules "${rules[@]}"
  # Each rule has its own test file; promtool resolves rule_files relative
  # to the test file.
  promtool test rules "${tests[@]}"
  amtool check-config "$PROM_DIR/alertmanager.yml"
}

case "${1:-}" in
  install) install_packages; log "promtool: $(command -v promtool), amtool: $(command -v amtool)" ;;
  check) check ;;
  promtool) shift; install_packages; exec promtool "$@" ;;
  *) echo "usage: $0 install|check|promtool ARGS..." >&2; exit 2 ;;
esac
