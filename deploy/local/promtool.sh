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

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROM_DIR="$(cd "$HERE/.." && pwd)/prometheus"

install_packages() {
  local missing=()
  command -v promtool >/dev/null || missing+=(prometheus)
  command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
  ((${#missing[@]} == 0)) && return 0
  apt_install "${missing[*]}" "${missing[@]}"
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
