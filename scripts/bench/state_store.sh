#!/usr/bin/env bash
# Stateless chats behind round-robin, with and without the shared state
# tier: REPLICAS local servers, CLIENTS concurrent `attnctl chat
# --hold_state=false` clients (each resends its whole history every turn and
# sends turn t to replica (client + t) mod REPLICAS), TURNS turns each. Runs
# without the tier (each server's own state cache only) and then with one
# Redis behind all servers, and prints, per run: median TTFT at turn 1 and at
# the last turn and their ratio, tokens prefilled per turn, aggregate
# generated tokens per second, and Redis memory per conversation. The table
# goes to docs/benchmarks-log.md.
#   bash scripts/bench/state_store.sh [BUILD_DIR]          (default: build)
#   MODEL (aft-decay), REPLICAS (3), CLIENTS (64), TURNS (20), MAX_TOKENS (32),
#   PAUSE (200ms: a reader's pause between turns), THREADS (1 per server)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
cmake --build "$build" --target attn-server attnctl > /dev/null
. scripts/lib/local_server.sh
. scripts/lib/local_redis.sh
use_binaries "$build/server/attn-server" "$build/client/attnctl"
work=$(mktemp -d)
trap 'kill_servers; kill_redis; rm -rf "$work"' EXIT
model=${MODEL:-aft-decay} replicas=${REPLICAS:-3} clients=${CLIENTS:-64} turns=${TURNS:-20}
max_tokens=${MAX_TOKENS:-32} pause=${PAUSE:-200ms} threads=${THREADS:-1}
py=/usr/bin/python3

# Each client's turns: its own words, so no two conversations share a prefix.
for ((c = 0; c < clients; c++)); do
  for ((t = 1; t <= turns; t++)); do
    echo "Reader $c asks, for the $t time, what the evening and the morning were"
  done > "$work/turns-$c"
done

# run NAME [SERVER FLAGS...]: starts the replicas, runs the clients, stops.
run() {
  local name=$1 r c
  shift
  local servers=() pids=()
  for ((r = 0; r < replicas; r++)); do
    start_server "$work/$name-server-$r.log" --models="models/$model.pt" --threads="$threads" \
      --metrics_port=-1 "$@"
    servers+=("127.0.0.1:$server_port") pids+=("$server_pid")
  done
  local start end chatters=()
  start=$(date +%s.%N)
  for ((c = 0; c < clients; c++)); do
    # Rotate the list so that client c's turn t goes to replica (c + t - 1) mod REPLICAS.
    local order=()
    for ((r = 0; r < replicas; r++)); do order+=("${servers[$(((c + r) % replicas))]}"); done
    "$ATTNCTL_BIN" --servers="$(IFS=,; echo "${order[*]}")" --timeout_s=600 chat \
      --hold_state=false --temperature=0 --ignore_eos --max_tokens="$max_tokens" \
      --pause="$pause" --json < "$work/turns-$c" > "$work/$name-client-$c.jsonl" &
    chatters+=($!)
  done
  wait "${chatters[@]}"
  end=$(date +%s.%N)
  echo "$start $end" > "$work/$name-wall"
  for pid in "${pids[@]}"; do stop_server "$pid" || true; done
}

echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(date -u +%F)"
echo "== $replicas replicas of $model, $clients clients x $turns turns, $max_tokens tokens a reply"
echo "== without the tier (each server's state cache only)"
run local
start_redis "$work/redis"
echo "== with the tier (one Redis)"
run tier --state_store="$redis_url"
redis_bytes=$(redis_cli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
redis_keys=$(redis_cli DBSIZE)

$py - "$work" "$clients" "$turns" "$redis_bytes" "$redis_keys" <<'PY'
import json, statistics, sys
work, clients, turns, redis_bytes, redis_keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = {}
for name in ("local", "tier"):
    chats = [[json.loads(l) for l in open(f"{work}/{name}-client-{c}.jsonl")] for c in range(clients)]
    assert all(len(chat) == turns for chat in chats), f"{name}: a chat ended early"
    start, end = map(float, open(f"{work}/{name}-wall").read().split())
    by_turn = lambda key, t: statistics.median(chat[t][key] for chat in chats)
    generated = sum(t["completion_tokens"] for chat in chats for t in chat)
    rows[name] = dict(
        ttft1=by_turn("ttft_ms", 0), ttftn=by_turn("ttft_ms", turns - 1),
        prefill1=by_turn("prefilled_tokens", 0), prefilln=by_turn("prefilled_tokens", turns - 1),
        prompt=by_turn("prompt_tokens", turns - 1),
        prefill_mean=statistics.mean(t["prefilled_tokens"] for chat in chats for t in chat[1:]),
        tps=generated / (end - start))
    chats_replies = [[t["reply"] for t in chat] for chat in chats]
    rows[name]["replies"] = chats_replies
same = rows["local"]["replies"] == rows["tier"]["replies"]
print()
print(f"| run | TTFT turn 1 (ms) | TTFT turn {turns} (ms) | ratio | prefilled turn 1 | prefilled turn {turns} (of {rows['tier']['prompt']:.0f}) | mean prefilled, turns 2-{turns} | generated tokens/s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for name, label in (("local", "state cache only"), ("tier", "with the tier")):
    r = rows[name]
    print(f"| {label} | {r['ttft1']:.1f} | {r['ttftn']:.1f} | {r['ttftn'] / r['ttft1']:.2f}x | "
          f"{r['prefill1']:.0f} | {r['prefilln']:.0f} | {r['prefill_mean']:.1f} | {r['tps']:.0f} |")
print()
print(f"tier / cache only, generated tokens/s: {rows['tier']['tps'] / rows['local']['tps']:.3f}; "
      f"greedy replies identical in both runs: {same}")
print(f"Redis: {redis_bytes / 2**20:.1f} MiB used for {clients} conversations "
      f"({redis_bytes / clients / 1024:.0f} KiB each, {redis_keys} keys)")
PY
