#!/usr/bin/env bash
# Resident memory of attn-server per bundled model: idle after start, and at
# the peak of N concurrent streams that each run to 4096 tokens (a 128-token
# prompt and 3968 generated, eos ignored). One server per model, loopback
# only, 256 slots (the default --max_active). Prints a Markdown table for
# docs/benchmarks-log.md.
#
#   bash scripts/bench/measure_memory.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
server=$build/server/attn-server
client=$build/client/attnctl
. scripts/lib/local_server.sh
use_binaries "$server" "$client"
trap kill_servers EXIT
for f in "$server" "$client"; do
  [ -x "$f" ] || { echo "measure_memory: $f missing; build first (scripts/test.sh)" >&2; exit 1; }
done

rss_mb() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

# Peak RSS of process $1 while the command after it runs.
peak_during() {
  local pid=$1 peak=0 now
  shift
  "$@" > /dev/null &
  local job=$!
  while kill -0 "$job" 2> /dev/null; do
    now=$(rss_mb "$pid")
    [ "$now" -gt "$peak" ] && peak=$now
    sleep 0.2
  done
  wait "$job"
  echo "$peak"
}

echo "| model | idle RSS (MB) | peak RSS, 64 streams x 4096 tokens | peak RSS, 256 streams x 4096 tokens |"
echo "| --- | --- | --- | --- |"
for model in aft-decay aft-conv linear-decay mha-alibi; do
  start_server /tmp/measure_memory_server.log --models="models/$model.pt" --metrics_port=-1
  pid=$server_pid port=$server_port
  sleep 1
  idle=$(rss_mb $pid)
  row="| $model | $idle"
  for streams in 64 256; do
    echo "measure_memory: $model, $streams streams of 4096 tokens" >&2
    peak=$(peak_during $pid "$client" bench --server=127.0.0.1:$port --concurrency=$streams \
      --streams=$streams --prompt_tokens=128 --max_tokens=3968 --progress=false)
    row="$row | $peak"
  done
  echo "$row |"
  stop_server "$pid" || true
done
