# shellcheck shell=bash
# The one way the project's tests and benchmarks run a throwaway Redis
# (Debian's redis-server) for the shared state tier: 127.0.0.1, a port of
# the caller's choosing, its own directory, no persistence.
# DEBUG is enabled from loopback so tests can make it slow (DEBUG SLEEP).
#
# Sourced after scripts/lib/local_server.sh (for free_port):
#   start_redis DIR [PORT]   # sets redis_pid, redis_port, redis_url; PORT
#                            # again restarts one on the same address
#   redis_cli ARGS...        # redis-cli against it
#   kill_redis               # SIGKILL: an outage, not a shutdown
#
# Needs redis-server and redis-tools (scripts/install_deps.sh).

redis_pid=
redis_port=
redis_url=

start_redis() {
  local dir=$1
  redis_port=${2:-$(free_port)}
  if ! command -v redis-server > /dev/null; then
    echo "needs redis-server: run scripts/install_deps.sh (apt-get install redis-server)" >&2
    return 2
  fi
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$dir" --save '' --appendonly no \
    --daemonize no --logfile "$dir/redis.log" --enable-debug-command local &
  redis_pid=$!
  redis_url="redis://127.0.0.1:$redis_port"
  for _ in $(seq 100); do
    redis_cli PING 2>/dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  echo "redis-server on port $redis_port did not answer; its log:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

redis_cli() {
  redis-cli -h 127.0.0.1 -p "$redis_port" "$@"
}

kill_redis() {
  [ -n "$redis_pid" ] || return 0
  kill -9 "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=
}
