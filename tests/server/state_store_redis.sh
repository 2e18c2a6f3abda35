#!/usr/bin/env bash
# The shared state tier (--state_store) with a real Redis started here:
#   1. a stateless chat (the whole history every turn) alternating between
#      two attn-server processes prefills only its new tokens from turn 2 on,
#      and its greedy replies equal the same chat on a server without any
#      cache;
#   2. Redis killed mid-chat: no turn fails and health stays SERVING;
#      restarted on the same address: hits resume;
#   3. entries edited in Redis: a miss and a counted verification failure,
#      the same replies;
#   4. a slow Redis (DEBUG SLEEP): turns go on after the time budget.
# The local state caches are off, so every reuse comes from the tier.
#   state_store_redis.sh ATTN_SERVER ATTNCTL [MODEL_DIR]
set -euo pipefail
server_bin=$1 ctl_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
models=${3:-$repo/models}
py=/usr/bin/python3
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/scripts/lib/local_redis.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; kill_redis; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

start_redis "$work/redis"
model=(--models="$models/aft-decay.pt" --state_cache_bytes=0)
tier=(--state_store="$redis_url" --state_store_timeout=50ms)
ports=() metrics=()
for name in a b; do
  start_server "$work/server-$name.log" "${model[@]}" "${tier[@]}"
  ports+=("$server_port") metrics+=("$metrics_port")
done
start_server "$work/reference.log" "${model[@]}"
reference=127.0.0.1:$server_port
both=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}
# A reader's pause between turns lets the last turn's write land first.
chat=(chat --hold_state=false --temperature=0 --max_tokens=6 --json --pause=100ms)

# metric NAME LABELS: the sum of NAME{LABELS...} over both tiered servers.
metric() {
  local total=0 m value
  for m in "${metrics[@]}"; do
    value=$(curl -sf "http://127.0.0.1:$m/metrics" |
      awk -v n="$1" -v l="$2" '$1 ~ "^"n"({|$)" && index($1, l) { s += $2 } END { print s + 0 }')
    total=$($py -c "print($total + $value)")
  done
  echo "$total"
}

# check_chat OUT.jsonl REFERENCE.jsonl: the turns agree with the reference,
# and each from the second starts from a state another server stored: where
# the last turn's prompt ended, or, at least once, where its reply ended
# (whenever the text of a reply tokenizes back to the tokens the model
# generated, which a small model's replies often do not).
check_chat() {
  $py - "$@" <<'PY'
import json, sys
turns = [json.loads(l) for l in open(sys.argv[1])]
reference = [json.loads(l) for l in open(sys.argv[2])]
assert [t["reply"] for t in turns] == [t["reply"] for t in reference], \
    ([t["reply"] for t in turns], [t["reply"] for t in reference])
servers = [t["server"] for t in turns]
assert all(servers[i] != servers[i + 1] for i in range(len(servers) - 1)), servers
whole_history = 0
for previous, t in zip(turns, turns[1:]):
    after_reply = previous["prompt_tokens"] + previous["completion_tokens"] - 1
    assert t["cached_tokens"] in (previous["prompt_tokens"], after_reply), (previous, t)
    assert t["prefilled_tokens"] == t["prompt_tokens"] - t["cached_tokens"], t
    whole_history += t["cached_tokens"] == after_reply
assert whole_history > 0, turns
print("  prompt", [t["prompt_tokens"] for t in turns], "prefilled",
      [t["prefilled_tokens"] for t in turns], "from the tier", [t["cached_tokens"] for t in turns])
PY
}

printf 'In the beginning\nAnd the earth was without form\nAnd God said\nLet there be light\nAnd there was light\nAnd God saw the light\n' > "$work/turns"
"$ctl_bin" --servers="$reference" "${chat[@]}" < "$work/turns" > "$work/reference.jsonl"

echo "== 1. a stateless chat alternating between two servers"
"$ctl_bin" --servers="$both" "${chat[@]}" < "$work/turns" > "$work/chat.jsonl"
check_chat "$work/chat.jsonl" "$work/reference.jsonl"
[ "$(metric attn_state_store_lookups_total hit)" != 0 ] || fail "no hits counted"
[ "$(metric attn_state_store_written_bytes_total '')" != 0 ] || fail "no bytes written counted"
echo "PASS: every turn from the second prefilled only its new tokens; replies equal the reference"

echo "== 2. Redis killed mid-chat, then restarted"
head -3 "$work/turns" | sed 's/^/Again: /' > "$work/before"
tail -3 "$work/turns" | sed 's/^/Again: /' > "$work/after"
cat "$work/before" "$work/after" > "$work/again"
"$ctl_bin" --servers="$reference" "${chat[@]}" < "$work/again" > "$work/again-reference.jsonl"
errors_before=$(metric attn_state_store_errors_total '')
kill_redis
"$ctl_bin" --servers="$both" "${chat[@]}" < "$work/again" > "$work/down.jsonl" ||
  fail "a turn failed while Redis was down"
"$ctl_bin" --server="127.0.0.1:${ports[0]}" health > /dev/null || fail "health while Redis is down"
$py - "$work/down.jsonl" "$work/again-reference.jsonl" <<'PY'
import json, sys
down, reference = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [t["reply"] for t in down] == [t["reply"] for t in reference]
assert all(t["cached_tokens"] == 0 for t in down), down
PY
[ "$(metric attn_state_store_errors_total '')" != "$errors_before" ] || fail "no errors counted"
[ "$(metric attn_state_store_connected '')" = 0 ] || fail "still shown connected"
echo "PASS: six turns served with Redis down, errors counted, health SERVING"
start_redis "$work/redis" "$redis_port"
sleep 2.5  # the reconnect backoff is at most 2 s
"$ctl_bin" --servers="$both" "${chat[@]}" < "$work/again" > "$work/restarted.jsonl"
check_chat "$work/restarted.jsonl" "$work/again-reference.jsonl"
[ "$(metric attn_state_store_connected '')" = 2 ] || fail "not reconnected"
echo "PASS: hits resumed after the restart"

echo "== 3. entries edited in Redis"
# Written by A, edited, then the conversation again: its first turn on the
# reference (which writes nothing), its second on B.
edited=$(mktemp -p "$work")
printf 'Edited: In the beginning\nEdited: And the earth\n' > "$edited"
"$ctl_bin" --servers="127.0.0.1:${ports[0]}" "${chat[@]}" < "$edited" > /dev/null
sleep 0.5
for key in $(redis_cli --scan --pattern 'attn:state:*'); do
  length=$(redis_cli STRLEN "$key")
  redis_cli SETRANGE "$key" $((length - 9)) X > /dev/null
done
failures_before=$(metric attn_state_store_verify_failures_total '')
"$ctl_bin" --servers="$reference" "${chat[@]}" < "$edited" > "$work/edited-reference.jsonl"
"$ctl_bin" --servers="$reference,127.0.0.1:${ports[1]}" "${chat[@]}" < "$edited" \
  > "$work/edited.jsonl"
$py - "$work/edited.jsonl" "$work/edited-reference.jsonl" <<'PY'
import json, sys
edited, reference = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [t["reply"] for t in edited] == [t["reply"] for t in reference]
assert edited[1]["cached_tokens"] == 0, edited
PY
[ "$(metric attn_state_store_verify_failures_total '')" != "$failures_before" ] ||
  fail "no verification failure counted"
echo "PASS: an edited entry is a miss and a counted verification failure"

echo "== 4. a slow Redis"
timeouts_before=$(metric attn_state_store_lookups_total timeout)
redis_cli DEBUG SLEEP 4 > /dev/null &
sleeper=$!
sleep 0.3
start=$(date +%s.%N)
"$ctl_bin" --servers="$both" "${chat[@]}" < <(sed 's/^/Slow: /' "$work/turns" | head -2) \
  > "$work/slow.jsonl" || fail "a turn failed while Redis was slow"
took=$($py -c "import time; print(f'{time.time() - $start:.2f}')")
$py -c "import sys; sys.exit(0 if $took < 3 else 1)" || fail "turns waited for Redis: $took s"
wait "$sleeper"
[ "$(metric attn_state_store_lookups_total timeout)" != "$timeouts_before" ] ||
  fail "no timeout counted"
echo "PASS: two turns in $took s while Redis slept 4 s; timeouts counted"
