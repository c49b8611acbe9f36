#!/usr/bin/env bash
# kcat (librdkafka's command-line producer and consumer, Debian package) for
# the tests that write what Fluent Bit's Kafka output writes: librdkafka's
# record batches, with its codecs and partitioner.
#
#   deploy/local/kcat.sh install|path
#
# install: apt-get install kcat when missing (needs root). path: print the
# binary's path (fails when missing).
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kcat_bin() {
  first_executable "$(command -v kcat 2>/dev/null || true)" /usr/bin/kcat "$(command -v kafkacat 2>/dev/null || true)"
}

case "${1:-}" in
  install)
    if ! kcat_bin >/dev/null; then
      apt_install kcat kcat
      kcat_bin >/dev/null || die "kcat binary not found after install"
    fi
    log "kcat: $(kcat_bin)"
    ;;
  path)
    kcat_bin || die "kcat missing: deploy/local/kcat.sh install"
    ;;
  *)
    die "usage: $0 install|path"
    ;;
esac
