# shellcheck shell=bash
# The one way the project's scripts and shell tests run the real attn-server
# on loopback: a free port, flags for 127.0.0.1, the wait until it answers
# health, and the stop. Also the held-out text the quality scripts score.
#
# Sourced:
#   . scripts/lib/local_server.sh
#   use_binaries SERVER_BIN ATTNCTL_BIN
#   start_server LOG [ATTN-SERVER FLAGS...]   # sets server_pid, server_port,
#                                             # http_port, metrics_port; fails
#                                             # with the log
#   ... "$ATTNCTL_BIN" --server="127.0.0.1:$server_port" ...
#   stop_server "$server_pid"                 # SIGTERM; returns its exit status
#   kill_servers                              # in the caller's EXIT trap
# Run as a command (for programs in other languages, bench_state_reuse.py):
#   bash scripts/lib/local_server.sh start SERVER_BIN ATTNCTL_BIN LOG [FLAGS...]
# prints "PID PORT METRICS_PORT HTTP_PORT" once the server is healthy; the server runs
# on after the command returns, until the caller stops it.
#
# start_server passes --host=127.0.0.1 and free --port, --http_port and
# --metrics_port before the caller's flags; a flag the caller repeats wins
# (--metrics_port=-1 turns metrics off).

ATTN_SERVER_BIN=${ATTN_SERVER_BIN:-}
ATTNCTL_BIN=${ATTNCTL_BIN:-}
started_pids=()

# use_binaries SERVER_BIN ATTNCTL_BIN: the programs start_server runs.
use_binaries() {
  ATTN_SERVER_BIN=$1
  ATTNCTL_BIN=$2
}

# Prints a TCP port on 127.0.0.1 that nothing listens on.
# (Debian's python3 where it is, else the first on PATH, as on a GPU machine.)
free_port() {
  local python=/usr/bin/python3
  [ -x "$python" ] || python=python3
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# running PID: whether process PID still runs. A child that exited stays a
# zombie until its parent waits for it, and kill -0 still finds a zombie.
running() {
  local state=
  if [ -r "/proc/$1/stat" ]; then read -r _ _ state _ < "/proc/$1/stat" 2> /dev/null || true; fi
  [ -n "$state" ] && [ "$state" != Z ]
}

# wait_healthy ATTNCTL PORT PID LOG: waits up to ATTN_START_SECONDS (120)
# for the server (process PID, writing LOG) to answer health on PORT. If it
# exits (a bad flag, a package refused) or never answers, prints its log
# and fails at once.
wait_healthy() {
  local attnctl=$1 port=$2 pid=$3 log=$4
  local deadline=$((SECONDS + ${ATTN_START_SECONDS:-120}))
  while [ "$SECONDS" -lt "$deadline" ]; do
    "$attnctl" --server="127.0.0.1:$port" health > /dev/null 2>&1 && return 0
    if ! running "$pid"; then
      echo "attn-server exited before it answered health on port $port; its log:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "attn-server on port $port did not become healthy within ${ATTN_START_SECONDS:-120} s" \
    "(ATTN_START_SECONDS waits longer); its log:" >&2
  cat "$log" >&2
  return 1
}

# start_server LOG [FLAGS...]: see the file comment.
start_server() {
  local log=$1
  shift
  if [ -z "$ATTN_SERVER_BIN" ] || [ -z "$ATTNCTL_BIN" ]; then
    echo "start_server: call use_binaries SERVER_BIN ATTNCTL_BIN first" >&2
    return 2
  fi
  server_port=$(free_port)
  http_port=$(free_port)
  metrics_port=$(free_port)
  "$ATTN_SERVER_BIN" --host=127.0.0.1 --port="$server_port" --http_port="$http_port" \
    --metrics_port="$metrics_port" "$@" > "$log" 2>&1 &
  server_pid=$!
  started_pids+=("$server_pid")
  wait_healthy "$ATTNCTL_BIN" "$server_port" "$server_pid" "$log"
}

# stop_server PID: SIGTERM, then waits; returns the server's exit status.
stop_server() {
  kill -TERM "$1" 2>/dev/null || true
  local status=0
  wait "$1" || status=$?
  return "$status"
}

# kill_servers: ends every server start_server started that still runs.
kill_servers() {
  local pid
  for pid in "${started_pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

# heldout_bible OUT: writes the last 4% of the King James Bible to OUT: the
# held-out part of the bundled models' training text
# (scripts/models/train_bundled_models.sh). Needs the bible-kjv package.
heldout_bible() {
  if ! command -v bible > /dev/null; then
    echo "needs the bible-kjv package (apt-get install bible-kjv)" >&2
    return 2
  fi
  local whole
  whole=$(mktemp)
  bible gen1:1-rev22:21 > "$whole"
  tail -c $(($(wc -c < "$whole") * 4 / 100)) "$whole" > "$1"
  rm -f "$whole"
}

# cut_windows TEXT COUNT CHARS PREFIX: writes COUNT windows of CHARS
# characters of TEXT to PREFIX0.txt, PREFIX1.txt, ..., starting evenly from
# its beginning to its end, so that they overlap when the text is short.
cut_windows() {
  local text=$1 count=$2 chars=$3 prefix=$4 size w
  size=$(wc -c < "$text")
  if [ "$size" -lt "$chars" ]; then
    echo "$text has $size characters; the windows need $chars" >&2
    return 2
  fi
  for ((w = 0; w < count; w++)); do
    dd if="$text" of="$prefix$w.txt" bs=64K iflag=skip_bytes,count_bytes status=none \
      skip=$((count > 1 ? w * (size - chars) / (count - 1) : 0)) count="$chars"
  done
}

# As a command: start one server and print where it is.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  if [ "${1:-}" != start ] || [ $# -lt 4 ]; then
    echo "usage: bash $0 start SERVER_BIN ATTNCTL_BIN LOG [ATTN-SERVER FLAGS...]" >&2
    exit 2
  fi
  use_binaries "$2" "$3"
  log=$4
  shift 4
  start_server "$log" "$@"
  echo "$server_pid $server_port $metrics_port $http_port"
fi
