# shellcheck shell=bash
# Shared helpers for the deploy/local scripts (kafka.sh, clickhouse.sh, zookeeper.sh,
# alertmanager.sh, promtool.sh). Sourced, never run:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Messages go to stderr prefixed with the sourcing script's name
# ("kafka.sh: ..."), taken from the file that sources this one.
#
#   log MSG... / die MSG...           message on stderr / message and exit 1
#   run_dir NAME PORT                 prints ${TMPDIR:-/tmp}/ncclwatch-NAME-PORT
#   first_executable PATH...          prints the first non-empty, executable PATH
#   apt_install WHAT PACKAGE...       apt-get install PACKAGEs as root, with a
#                                     temporary policy-rc.d so that no package
#                                     service starts
#   port_open PORT                    something accepts on 127.0.0.1:PORT
#   require_port_free PORT [LABEL]    die when 127.0.0.1:PORT is taken
#   http_request PORT PATH [BODY]     GET (POST BODY) on 127.0.0.1:PORT
#   tail_logs LINES FILE...           last LINES of each non-empty FILE
#   make_tls DIR                      throwaway CA (DIR/ca.pem) and a server
#                                     certificate for 127.0.0.1 and localhost
#                                     signed by it (DIR/server.pem, key in
#                                     DIR/server.key, both in DIR/server-keystore.pem)
#   make_secret FILE                  a random password in FILE (mode 0600)
#   mvn_fetch WHAT POM DIR JAR PROP=V...  jars of POM's dependencies from Maven
#                                     Central into DIR (complete once
#                                     DIR/.complete exists; JAR must be among them)
#   java_bin WHAT                     $JAVA_HOME/bin/java, else java on PATH
#
# Server lifecycle, for a server started in the background whose pid is in a
# pid file. The sourcing script sets PID_FILE (the pid file) and RUN_DIR
# (removed by stop) and defines three functions:
#   is_running   the pid file names a live server of ours (see pid_cmdline_has)
#   answers      the server answers a real request
#   log_tail     shows the end of the server's logs
# and then uses:
#   read_pid                          prints the pid from PID_FILE
#   pid_cmdline_has NEEDLE...         PID_FILE's process is alive and its
#                                     command line contains every NEEDLE
#   already_running WHERE             start's first step: true (and says so)
#                                     when running and answering; stops a
#                                     running server that does not answer
#   wait_ready DEADLINE POLL WHAT TIMEOUT_MSG CMD...
#                                     during start: poll CMD until it succeeds;
#                                     die (after log_tail) when the server
#                                     exits or SECONDS reaches DEADLINE
#   stop_server PORT TIMEOUT POLL [keep]
#                                     SIGTERM, wait up to TIMEOUT s, SIGKILL;
#                                     removes RUN_DIR unless "keep" is given;
#                                     exit 0 when not running
#   server_status PORT PROBE CMD...   0 when running and answering (describes
#                                     the server with CMD's output), else 1

LIB_SCRIPT="${BASH_SOURCE[1]:-$0}"
LIB_SCRIPT="${LIB_SCRIPT##*/}"

log() { printf '%s: %s\n' "$LIB_SCRIPT" "$*" >&2; }
die() { log "$*"; exit 1; }

# run_dir NAME PORT: the run directory of a server, without doubled slashes.
run_dir() {
  local d="${TMPDIR:-/tmp}/ncclwatch-$1-$2"
  printf '%s\n' "${d//\/\//\/}"
}

# first_executable PATH...: print the first PATH that is non-empty and
# executable; fail when there is none. Pass "$(command -v NAME 2>/dev/null ||
# true)" to look NAME up on PATH.
first_executable() {
  local b
  for b in "$@"; do
    if [[ -n "$b" && -x "$b" ]]; then
      printf '%s\n' "$b"
      return 0
    fi
  done
  return 1
}

# --- apt-get ----------------------------------------------------------------

POLICY_RC_D=/usr/sbin/policy-rc.d
POLICY_RC_D_OURS=""

remove_policy_rc_d() {
  if [[ -n "$POLICY_RC_D_OURS" ]]; then
    rm -f "$POLICY_RC_D"
    POLICY_RC_D_OURS=""
  fi
}

# apt_install WHAT PACKAGE...: install PACKAGEs with apt-get (needs root; dies
# otherwise, naming WHAT as what is missing). The packages' postinst would
# start their services through the init scripts on the default ports; unless
# /usr/sbin/policy-rc.d exists already, a temporary one (exit 101) forbids
# that for the duration of the install and is removed afterwards (also on
# exit). apt-get's output goes to ${TMPDIR:-/tmp}/ncclwatch-NAME-apt.log, NAME
# being the script's name without .sh; its tail is shown when apt-get fails.
apt_install() {
  local what="$1"
  shift
  [[ "$(id -u)" -eq 0 ]] || die "$what missing; run as root (or: apt-get install $*)"
  command -v apt-get >/dev/null || die "$what missing and apt-get not available"
  log "installing $* with apt-get"
  if [[ ! -e "$POLICY_RC_D" ]]; then
    printf '#!/bin/sh\n# temporary, from ncclwatch deploy/local/%s\nexit 101\n' "$LIB_SCRIPT" >"$POLICY_RC_D"
    chmod 755 "$POLICY_RC_D"
    POLICY_RC_D_OURS=1
    trap remove_policy_rc_d EXIT
  fi
  local apt_log="${TMPDIR:-/tmp}/ncclwatch-${LIB_SCRIPT%.sh}-apt.log"
  local apt_opts=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get -q -o DPkg::Lock::Timeout=300 update &&
         apt-get install "${apt_opts[@]}" --no-install-recommends "$@"; } \
       </dev/null >"$apt_log" 2>&1; then
    tail -n 30 "$apt_log" >&2 || true
    remove_policy_rc_d
    die "apt-get install $* failed"
  fi
  remove_policy_rc_d
}

# --- network ----------------------------------------------------------------

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# require_port_free PORT [LABEL]: die when another process holds 127.0.0.1:PORT.
require_port_free() {
  if port_open "$1"; then
    die "127.0.0.1:$1${2:+ ($2)} is already in use by another process"
  fi
}

# http_request PORT PATH [BODY]: GET PATH on 127.0.0.1:PORT, or POST BODY to
# it when BODY is given; print the response body. Fails on an error status or
# when there is no answer within 5 s. Uses curl, else wget, else bash's
# /dev/tcp (HTTP/1.0, 2xx only).
http_request() {
  local url="http://127.0.0.1:$1$2"
  if command -v curl >/dev/null; then
    if (($# >= 3)); then
      curl -fsS --max-time 5 --data-binary "$3" "$url"
    else
      curl -fsS --max-time 5 "$url"
    fi
  elif command -v wget >/dev/null; then
    if (($# >= 3)); then
      wget -q -T 5 -t 1 -O - --post-data="$3" "$url"
    else
      wget -q -T 5 -t 1 -O - "$url"
    fi
  else
    # shellcheck disable=SC2016 # the inner script is expanded by the inner bash
    timeout 5 "$BASH" -c '
      set -euo pipefail
      exec 3<>"/dev/tcp/127.0.0.1/$1"
      if (($# >= 3)); then
        printf "POST %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" "$2" "${#3}" "$3" >&3
      else
        printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3
      fi
      IFS= read -r status <&3
      [[ "$status" == "HTTP/1."?" 2"* ]] || exit 1
      while IFS= read -r line <&3 && [[ "${line%$'"'"'\r'"'"'}" != "" ]]; do :; done
      cat <&3' _ "$@"
  fi
}

# tail_logs LINES FILE...: show the last LINES lines of every non-empty FILE.
tail_logs() {
  local n="$1" f
  shift
  for f in "$@"; do
    if [[ -s "$f" ]]; then
      log "---- last lines of $f ----"
      tail -n "$n" "$f" >&2 || true
    fi
  done
}

# --- server lifecycle (PID_FILE, RUN_DIR, is_running, answers, log_tail) ----

read_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  printf '%s\n' "$pid"
}

# pid_cmdline_has NEEDLE...: true when the process named by PID_FILE is alive
# and its command line contains every NEEDLE (so that a reused pid is not
# mistaken for our server).
pid_cmdline_has() {
  local pid cmd needle
  pid="$(read_pid)" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  for needle in "$@"; do
    [[ "$cmd" == *"$needle"* ]] || return 1
  done
}

# already_running WHERE: for start. True, saying so, when the server is
# running and answering; a running server that does not answer is stopped
# (with the script's stop) and the result is false, as when none runs.
already_running() {
  if is_running; then
    if answers; then
      log "already running (pid $(read_pid), $1)"
      return 0
    fi
    log "pid $(read_pid) is running but not answering; restarting it"
    stop
  fi
  return 1
}

# wait_ready DEADLINE POLL WHAT TIMEOUT_MSG CMD...: run CMD every POLL seconds
# until it succeeds. Dies with "WHAT exited during startup" when the server
# is gone, or with TIMEOUT_MSG once SECONDS reaches DEADLINE, showing log_tail
# first in both cases. Gone means its pid no longer lives: right after the
# start the pid can still be the subshell that is about to exec the server
# (its command line not the server's yet), which is starting, not gone.
wait_ready() {
  local deadline="$1" poll="$2" what="$3" timeout_msg="$4" pid
  shift 4
  until "$@"; do
    if ! is_running && ! { pid="$(read_pid)" && kill -0 "$pid" 2>/dev/null; }; then
      log_tail
      die "$what exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      log_tail
      die "$timeout_msg"
    fi
    sleep "$poll"
  done
}

# stop_server PORT TIMEOUT POLL [keep]: stop the server named by PID_FILE
# (SIGTERM, up to TIMEOUT seconds of waiting in steps of POLL, then SIGKILL)
# and remove RUN_DIR, or leave it in place when the fourth argument is
# "keep". Succeeds when nothing runs (PORT only names it in the message).
stop_server() {
  local port="$1" timeout="$2" poll="$3" keep="${4:-}" pid
  if ! is_running; then
    log "not running (port $port)"
    [[ "$keep" == keep ]] || rm -rf "$RUN_DIR"
    return 0
  fi
  pid="$(read_pid)"
  log "stopping pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + timeout))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "still running after ${timeout}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep "$poll"
  done
  if [[ "$keep" == keep ]]; then
    log "stopped; $RUN_DIR kept"
  else
    rm -rf "$RUN_DIR"
    log "stopped"
  fi
}

# server_status PORT PROBE CMD...: 0 when the server runs and answers (the
# message describes it with CMD's output, run only then); 1 when it does not
# run (PORT names it) or does not answer PROBE (what answers asks, and where).
server_status() {
  local port="$1" probe="$2"
  shift 2
  if ! is_running; then
    log "not running (port $port)"
    return 1
  fi
  if answers; then
    log "running and answering: $("$@") (pid $(read_pid))"
    return 0
  fi
  log "pid $(read_pid) is running but $probe does not answer"
  return 1
}

# make_tls DIR: a throwaway CA and a server certificate signed by it, for the
# secured listeners of kafka.sh and clickhouse.sh. The server certificate
# names IP 127.0.0.1 and DNS localhost, so that a client that checks the host
# name accepts it on loopback. Keys are unencrypted PKCS#8 (what Kafka's PEM
# keystore and ClickHouse's OpenSSL config both read); valid for 2 days.
make_tls() {
  local dir="$1"
  command -v openssl >/dev/null || apt_install openssl openssl
  command -v openssl >/dev/null || die "openssl not found on PATH (needed for the throwaway TLS certificates)"
  mkdir -p "$dir"
  (
    cd "$dir"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
      -subj "/CN=ncclwatch throwaway test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
      -extfile server.ext 2>/dev/null
    cat server.key server.pem >server-keystore.pem
    rm -f server.csr server.ext ca.srl
    chmod 644 ca.pem server.pem
  ) || die "openssl could not make the TLS certificates in $dir"
}

# make_secret FILE: a random 24-character password, readable by the owner only.
make_secret() {
  (umask 077 && head -c 18 /dev/urandom | base64 | tr '+/' '-_' | tr -d '\n' >"$1")
}

# mvn_fetch WHAT POM DIR JAR PROP=VALUE...: copy the runtime dependencies of
# POM (a pom that only lists them) into DIR with mvn, once: DIR is complete
# when DIR/.complete exists, and is filled in a temporary directory beside it
# first, so an interrupted fetch leaves no half cache. JAR must be among the
# jars; WHAT names them in messages; each PROP=VALUE is passed as -DPROP=VALUE.
mvn_fetch() {
  local what="$1" pom="$2" dir="$3" jar="$4"
  shift 4
  if [[ -f "$dir/.complete" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found on PATH (needed once to fetch the $what jars)"
  log "fetching $what jars from Maven Central into $dir"
  local partial="$dir.partial.$$" props=() p
  for p in "$@"; do props+=("-D$p"); done
  rm -rf "$partial"
  mkdir -p "$partial"
  local mvn_log="$partial.mvn.log"
  if ! mvn -B -Dstyle.color=never -f "$pom" "${props[@]}" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$partial" \
      </dev/null >"$mvn_log" 2>&1; then
    tail -n 30 "$mvn_log" >&2 || true
    rm -rf "$partial" "$mvn_log"
    die "mvn could not resolve the $what jars ($pom)"
  fi
  rm -f "$mvn_log"
  [[ -f "$partial/$jar" ]] || { rm -rf "$partial"; die "$jar missing after mvn"; }
  touch "$partial/.complete"
  rm -rf "$dir"
  mv "$partial" "$dir"
}

# java_bin WHAT: the java to run WHAT with: $JAVA_HOME/bin/java, else java on PATH.
java_bin() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    printf '%s\n' "$JAVA_HOME/bin/java"
  else
    command -v java >/dev/null || die "java not found on PATH (needed for $1)"
    command -v java
  fi
}
