#!/usr/bin/env bash
# Overload: what a client sees when streams arrive faster than the server can
# serve them. Starts the real attn-server on 127.0.0.1 with a small admission
# bound (--max_active slots, --max_waiting queue), measures the rate it
# sustains (a closed loop that keeps every slot busy), then offers Poisson
# arrivals (attnctl bench --rate) at 0.5x, 1x and 10x that rate. Prints, per
# load: streams served and rejected, the time a rejected call took to hear
# RESOURCE_EXHAUSTED, and the admitted streams' inter-token latency. The raw
# JSON lines go to $OUT (default /tmp/attn-overload.jsonl).
#
#   scripts/check/overload.sh [SECONDS_PER_LOAD]      (default 20; needs a build)
#   MODEL=aft-decay ACTIVE=16 WAITING=16 PROMPT=64 TOKENS=64 SERVER_FLAGS="--prefill_chunk=64"
#
# The engine runs on the last CPU this script may use, the gRPC threads and
# the client on the others, as in scripts/bench/bench_server.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$repo/build}
seconds=${1:-20}
model=${MODEL:-aft-decay}
active=${ACTIVE:-16}
waiting=${WAITING:-16}
prompt=${PROMPT:-64}
tokens=${TOKENS:-64}
py=/usr/bin/python3
ctl=$build/client/attnctl
. "$repo/scripts/lib/local_server.sh"
read -r engine_cpu client_cpus < <($py -c '
import os
cpus = sorted(os.sched_getaffinity(0))
print(cpus[-1], ",".join(map(str, cpus[:-1] or cpus)))')
log=$(mktemp)
use_binaries "$build/server/attn-server" "$ctl"
trap 'kill_servers; rm -f "$log"' EXIT
# shellcheck disable=SC2086  # SERVER_FLAGS holds several flags
start_server "$log" --models="$repo/models/$model.pt" --metrics_port=-1 \
  --engine_cpus="$engine_cpu" --max_active="$active" --max_waiting="$waiting" --state_cache=off \
  ${SERVER_FLAGS:-}
port=$server_port pid=$server_pid
bench() {  # bench FLAGS...: one JSON line
  taskset -c "$client_cpus" "$ctl" --server=127.0.0.1:$port bench --json --progress=false \
    --prompt_tokens="$prompt" --max_tokens="$tokens" --duration_s="$seconds" "$@"
}
echo "== $model, --max_active=$active --max_waiting=$waiting ${SERVER_FLAGS:-}, prompt $prompt, $tokens tokens," \
  "engine on CPU $engine_cpu, client on $client_cpus, ${seconds}s per load" >&2
echo "== capacity: closed loop at concurrency $active" >&2
capacity_json=$(bench --concurrency="$active")
rate=$(echo "$capacity_json" | $py -c 'import json,sys; r=json.load(sys.stdin); print(r["streams"]/r["seconds"])')
echo "   $rate streams/s" >&2
results=("$capacity_json")
for load in 0.5 1 10; do
  offered=$($py -c "print($rate * $load)")
  echo "== ${load}x: Poisson arrivals at $offered streams/s" >&2
  results+=("$(bench --rate="$offered")")
done
printf '%s\n' "${results[@]}" > "${OUT:-/tmp/attn-overload.jsonl}"
$py - "$rate" "${results[@]}" <<'PY'
import json, sys
capacity = float(sys.argv[1])
runs = [json.loads(r) for r in sys.argv[2:]]
print("| load | offered streams/s | served | rejected | rejected in p50 / p99 / max (ms) "
      "| TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) | ITL p99 vs 1x |")
print("|---|---|---|---|---|---|---|---|")
base = runs[2]["itl_ms"]["p99"]  # closed loop, 0.5x, 1x, 10x
for r in runs:
    name = "closed loop" if r["rate"] == 0 else f"{r['rate'] / capacity:.1f}x"
    offered = "-" if r["rate"] == 0 else f"{r['rate']:.1f}"
    rej = r["reject_ms"]
    rejected = (f"{rej['p50']:.2f} / {rej['p99']:.2f} / {rej['max']:.2f}" if r["rejected"] else "-")
    print(f"| {name} | {offered} | {r['streams']} | {r['rejected']} | {rejected} | "
          f"{r['ttft_ms']['p50']:.2f} / {r['ttft_ms']['p99']:.2f} | "
          f"{r['itl_ms']['p50']:.2f} / {r['itl_ms']['p99']:.2f} | {r['itl_ms']['p99'] / base:.2f}x |")
other = sum(r["errors"] - r["rejected"] for r in runs)
print(f"\nerrors other than RESOURCE_EXHAUSTED: {other}")
PY
