#!/usr/bin/env bash
# The Responses API end to end (docs/openai.md, "Responses"):
#   1. the official openai npm client (tests/server/responses_client.mjs)
#      against two replicas sharing a real Redis, so that a conversation
#      continues by previous_response_id on either one and each turn
#      prefills only its new input;
#   2. the stored responses in the metrics (promtool checks the text);
#   3. --response_ttl: a response past it is gone, and counted as expired.
# The models are scripted (tests/python/make_scripted_model.py).
#   responses_serve.sh ATTN_SERVER ATTNCTL NODE_TOOLS
set -euo pipefail
server_bin=$1 ctl_bin=$2
node_tools=$(mkdir -p "$3" && cd "$3" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/scripts/lib/local_redis.sh"
. "$repo/scripts/lib/node_tools.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; kill_redis; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  for log in "$work"/*.log; do echo "--- $log" >&2; tail -15 "$log" >&2; done
  exit 1
}

npm_packages "$node_tools" openai@4 || fail "npm install openai"
cp "$repo/tests/server/responses_client.mjs" "$repo/tests/server/checks.mjs" "$node_tools/"

echo "== scripted models"
qwen=$repo/tests/data/chat_templates/qwen2.5.jinja
call=$'<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
make() { $py "$repo/tests/python/make_scripted_model.py" "$@" || fail "make_scripted_model $1"; }
make "$work/qwen-chat.pt" --cue $'<|im_start|>assistant\n' --first "Hello there." \
  --after "unused" --trigger $'\x01' --chat_template "$qwen"
make "$work/qwen-tools.pt" --cue $'<|im_start|>assistant\n' --first "$call" \
  --after "It is sunny in Paris." --trigger "<tool_response>" --chat_template "$qwen"
make "$work/plain-chat.pt" --cue "Assistant:" --first "Hello there." --after "unused" \
  --trigger $'\x01'
models=--models="$work/qwen-chat.pt,$work/qwen-tools.pt,$work/plain-chat.pt"

echo "== two replicas sharing Redis, driven by the openai client"
start_redis "$work/redis"
urls=() metrics=()
for name in a b; do
  start_server "$work/replica-$name.log" "$models" --default_max_tokens=256 \
    --state_store="$redis_url" --state_store_timeout=200ms
  urls+=("http://127.0.0.1:$http_port/v1") metrics+=("$metrics_port")
done
node "$node_tools/responses_client.mjs" "${urls[@]}" || fail "the openai client"

echo "== metrics"
curl -sf "http://127.0.0.1:${metrics[0]}/metrics" > "$work/metrics.txt"
promtool check metrics < "$work/metrics.txt" > /dev/null 2>&1 \
  || { promtool check metrics < "$work/metrics.txt"; fail "promtool"; }
stored=$(awk '$1 == "attn_responses_stored" { print $2 }' "$work/metrics.txt")
[ "${stored:-0}" -gt 0 ] 2>/dev/null || fail "attn_responses_stored is '$stored'"
# The client deleted through replica b.
curl -sf "http://127.0.0.1:${metrics[1]}/metrics" > "$work/metrics-b.txt"
grep -q '^attn_responses_removed_total{reason="deleted"} [1-9]' "$work/metrics-b.txt" \
  || fail "no deletion counted"
grep -q 'method="Responses"' "$work/metrics.txt" || fail "no Responses calls counted"
redis_cli --scan --pattern 'attn:response:v1:resp_*' > "$work/keys.txt"
[ -s "$work/keys.txt" ] || fail "no response in Redis"

echo "== --response_ttl"
start_server "$work/ttl.log" "$models" --response_ttl=1s
body='{"model": "qwen-chat", "input": "Hello?"}'
id=$(curl -sf "http://127.0.0.1:$http_port/v1/responses" -d "$body" |
  $py -c 'import json, sys; print(json.load(sys.stdin)["id"])') || fail "create"
curl -sf "http://127.0.0.1:$http_port/v1/responses/$id" > /dev/null || fail "not stored"
sleep 2.5
code=$(curl -s -o "$work/gone.json" -w '%{http_code}' "http://127.0.0.1:$http_port/v1/responses/$id")
[ "$code" = 404 ] || fail "a response past --response_ttl answered $code"
curl -sf "http://127.0.0.1:$metrics_port/metrics" > "$work/ttl-metrics.txt"
grep -q '^attn_responses_removed_total{reason="expired"} [1-9]' "$work/ttl-metrics.txt" \
  || fail "no expiry counted"
grep -q '^attn_responses_stored 0' "$work/ttl-metrics.txt" || fail "the expired response still counts"
stop_server "$server_pid" || fail "the server did not stop cleanly"
echo "PASS: /v1/responses through the openai client on two replicas, metrics and expiry"
