#!/usr/bin/env bash
# chDB (PyPI chdb-core: ClickHouse's current engine, 26.x, in a Python
# library) in a virtualenv, for checking the schema and queries written for
# 23.x+ servers without running one (sinks/chdb_test.go).
#
#   deploy/local/chdb.sh install     make the virtualenv when missing; print its python
#   deploy/local/chdb.sh python      print the virtualenv's python (installing first)
#   deploy/local/chdb.sh version     print chDB's engine version
#   deploy/local/chdb.sh exec DIR    run chdb/exec.py on DIR (statements on stdin)
#
# The virtualenv lives in $NCCLWATCH_CACHE/chdb-core-$CHDB_VERSION/venv
# (default ~/.cache/ncclwatch, as the Kafka jars), complete once .complete
# exists beside it, so a clean clone on the same machine reuses it. Only
# PyPI through pip; chdb-core alone (not the chdb package: its session API is
# all the test uses; pip brings numpy, pandas and pyarrow as its dependencies).
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR disable=SC1091 # shellcheck -x follows it
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The newest chdb-core on PyPI as of 2026-11 (engine 26.9.2.1).
CHDB_VERSION="${CHDB_VERSION:-26.9.0}"
NCCLWATCH_CACHE="${NCCLWATCH_CACHE:-$HOME/.cache/ncclwatch}"
VENV_ROOT="$NCCLWATCH_CACHE/chdb-core-$CHDB_VERSION"
VENV="$VENV_ROOT/venv"
PYTHON_BIN="${PYTHON:-python3}"

install() {
  if [[ -f "$VENV_ROOT/.complete" && -x "$VENV/bin/python" ]]; then
    return 0
  fi
  command -v "$PYTHON_BIN" >/dev/null || apt_install python3 python3 python3-venv
  rm -rf "$VENV_ROOT"
  mkdir -p "$VENV_ROOT"
  local pip_log="$VENV_ROOT/pip.log"
  log "installing chdb-core==$CHDB_VERSION into $VENV (log $pip_log)"
  if ! "$PYTHON_BIN" -m venv "$VENV" >"$pip_log" 2>&1; then
    # Debian's python3 lacks ensurepip without python3-venv.
    apt_install python3-venv python3-venv
    "$PYTHON_BIN" -m venv "$VENV" >"$pip_log" 2>&1 || { tail -n 20 "$pip_log" >&2; die "python3 -m venv failed"; }
  fi
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "chdb-core==$CHDB_VERSION" >>"$pip_log" 2>&1; then
    tail -n 20 "$pip_log" >&2
    die "pip install chdb-core==$CHDB_VERSION failed"
  fi
  "$VENV/bin/python" -c 'import chdb' >>"$pip_log" 2>&1 || { tail -n 20 "$pip_log" >&2; die "chdb does not import"; }
  touch "$VENV_ROOT/.complete"
}

case "${1:-}" in
  install) install; log "chDB $(TZ=UTC "$VENV/bin/python" -c 'import chdb; print(chdb.engine_version)'): $VENV/bin/python" ;;
  python) install; printf '%s\n' "$VENV/bin/python" ;;
  version) install; TZ=UTC "$VENV/bin/python" -c 'import chdb; print(chdb.engine_version)' ;;
  exec) shift; install; TZ=UTC exec "$VENV/bin/python" "$HERE/chdb/exec.py" "$@" ;;
  *) echo "usage: $0 install|python|version|exec DIR" >&2; exit 2 ;;
esac
