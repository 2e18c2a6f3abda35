#!/usr/bin/env bash
# The HTTP API with real clients: trains two tiny models, starts the real
# attn-server on 127.0.0.1 with API keys, then
#   - the official `openai` npm client (tests/server/openai_client.mjs);
#   - curl for the server-sent events' framing, and a client that leaves a
#     stream: the running gauge is back to 0 within a second;
#   - HTTPS with the gRPC port's certificate files, client certificate
#     required;
#   - the chat page in Debian's headless Chromium (tests/server/chat_page.mjs),
#     which saves a screenshot to SCREENSHOT_DIR/chat_page.png.
# The npm packages are installed once into NODE_TOOLS.
#   openai_clients.sh ATTN_SERVER ATTNCTL ATTN_TRAIN NODE_TOOLS [SCREENSHOT_DIR]
set -euo pipefail
server_bin=$1 ctl_bin=$2 train_bin=$3 node_tools=$4 screenshot_dir=${5:-$PWD}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/scripts/lib/node_tools.sh"
. "$repo/tests/server/tiny_models.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/server.log" ] && tail -20 "$work/server.log" >&2; exit 1; }

echo "== npm packages ($node_tools)"
npm_packages "$node_tools" openai@4 puppeteer-core@23 || fail "npm install openai puppeteer-core"
export NODE_PATH="$node_tools/node_modules"
# Node resolves ES module imports from the script's folder upwards, not
# NODE_PATH: the scripts run from a copy beside the packages.
cp "$repo/tests/server/openai_client.mjs" "$repo/tests/server/chat_page.mjs" "$node_tools/"

echo "== training two tiny models"
train_tiny_models "$work" "$train_bin" web || fail "tiny models"

printf 'key-one\nkey-two\n' > "$work/keys"
echo "== starting attn-server with API keys"
start_server "$work/server.log" --models="$work/models" --default_model=web-aft \
  --api_keys_file="$work/keys" --max_requests_per_key=3 --max_tokens=100000 || fail "the server did not start"
base="http://127.0.0.1:$http_port"
grep -q "serving the OpenAI API on http://127.0.0.1:$http_port/v1" "$work/server.log" \
  || fail "the startup log does not name the HTTP port"

echo "== the openai npm client"
BASE_URL="$base/v1" KEY=key-one OTHER_KEY=key-two MODEL=web-aft OTHER_MODEL=web-linear \
  PER_KEY_LIMIT=3 node "$node_tools/openai_client.mjs" || fail "openai client checks"

echo "== curl: server-sent events"
curl -sS -N -D "$work/headers" -H "Authorization: Bearer key-one" \
  "$base/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"the river"}],"max_tokens":5,"stream":true,
       "stream_options":{"include_usage":true}}' > "$work/events" || fail "streamed chat"
grep -qi '^content-type: text/event-stream' "$work/headers" || fail "content type: $(cat "$work/headers")"
grep -qi '^transfer-encoding: chunked' "$work/headers" || fail "not chunked: $(cat "$work/headers")"
/usr/bin/python3 - "$work/events" <<'PY' || fail "SSE framing: $(cat "$work/events")"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), raw[-80:]
events = raw.split("\n\n")[:-1]
assert all(e.startswith("data: ") and "\n" not in e for e in events), events
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert chunks[-2]["choices"][0]["finish_reason"] in ("length", "stop")
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
assert len({c["id"] for c in chunks}) == 1
print(f"   {len(events)} events, one id, role first, usage last, [DONE]")
PY
code=$(curl -s -o "$work/bad.json" -w '%{http_code}' -H "Authorization: Bearer key-one" \
  "$base/v1/completions" -d '{"prompt": "x", "max_tokens": }')
[ "$code" = 400 ] && grep -q '"param":"body"' "$work/bad.json" \
  && grep -q 'invalid JSON at byte 31' "$work/bad.json" || fail "malformed JSON: $code $(cat "$work/bad.json")"
head -c 10485760 /dev/zero | tr '\0' 'x' > "$work/big"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer key-one" \
  "$base/v1/completions" --data-binary @"$work/big")
[ "$code" = 413 ] || fail "a 10 MB body got $code"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] || fail "/health"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health/web-linear")" = 200 ] || fail "/health/model"

echo "== curl: a client that leaves a stream frees its slot within a second"
running() {
  curl -s "http://127.0.0.1:$metrics_port/metrics" \
    | awk '/^attn_num_requests_running\{model="web-aft"\}/ {print $2}'
}
cancelled() {
  curl -s "http://127.0.0.1:$metrics_port/metrics" | grep -F \
    'attn_requests_total{code="CANCELLED",method="Completions",model="web-aft",protocol="http"}' \
    | awk '{n = $2} END {print n + 0}'
}
# The streams the openai client aborted above may still be ending.
for _ in $(seq 100); do [ "$(running)" = 0 ] && break; sleep 0.02; done
[ "$(running)" = 0 ] || fail "streams of the checks before still run"
cancelled_before=$(cancelled)
curl -sS -N --max-time 20 -H "Authorization: Bearer key-one" "$base/v1/completions" \
  -d '{"prompt":"the river","max_tokens":100000,"stream":true,"attn_ignore_eos":true}' \
  > /dev/null 2>&1 &
leaver=$!
for _ in $(seq 100); do [ "$(running)" = 1 ] && break; sleep 0.02; done
[ "$(running)" = 1 ] || fail "the stream never ran"
kill "$leaver" 2>/dev/null || true
wait "$leaver" 2>/dev/null || true
left=$(date +%s%N)
until [ "$(running)" = 0 ]; do
  [ $(( ($(date +%s%N) - left) / 1000000 )) -lt 1000 ] || fail "the slot was still held after 1 s"
  sleep 0.02
done
echo "   freed in $(( ($(date +%s%N) - left) / 1000000 )) ms"
# The HTTP side counts the call once it has seen the end, just after the slot.
for _ in $(seq 100); do [ "$(cancelled)" -gt "$cancelled_before" ] && break; sleep 0.02; done
[ "$(cancelled)" -gt "$cancelled_before" ] || fail "the cancelled stream is not counted within \
2 s; counted: $(curl -s "http://127.0.0.1:$metrics_port/metrics" | grep '^attn_requests_total')"

echo "== the chat page in headless Chromium"
PAGE_URL="$base/" KEY=key-one SCREENSHOT="$screenshot_dir/chat_page.png" \
  node "$node_tools/chat_page.mjs" || fail "chat page"
[ -s "$screenshot_dir/chat_page.png" ] || fail "no screenshot"
stop_server "$server_pid" || fail "the server did not exit 0 on SIGTERM"

echo "== HTTPS with the gRPC port's certificates (client certificate required)"
bash "$repo/tests/server/make_test_certs.sh" "$work/certs"
tls_http=$(free_port)
"$server_bin" --host=127.0.0.1 --port="$(free_port)" --http_port="$tls_http" --metrics_port=-1 \
  --models="$work/models/web-linear.pt" --tls_cert="$work/certs/server.pem" \
  --tls_key="$work/certs/server.key" --tls_client_ca="$work/certs/ca.pem" > "$work/tls.log" 2>&1 &
started_pids+=("$!")
tls=(curl -sS --cacert "$work/certs/ca.pem")
client=(--cert "$work/certs/client.pem" --key "$work/certs/client.key")
for _ in $(seq 300); do
  "${tls[@]}" "${client[@]}" -o /dev/null "https://127.0.0.1:$tls_http/health" 2> /dev/null && break
  sleep 0.2
done
"${tls[@]}" "${client[@]}" "https://127.0.0.1:$tls_http/v1/completions" \
  -d '{"prompt":"the river","max_tokens":2}' | grep -q '"object":"text_completion"' \
  || fail "HTTPS completion: $(cat "$work/tls.log")"
if "${tls[@]}" -o /dev/null "https://127.0.0.1:$tls_http/health" 2> /dev/null; then
  fail "HTTPS without a client certificate was served"
fi
if curl -s -o /dev/null "http://127.0.0.1:$tls_http/health"; then
  fail "plain HTTP was served on the TLS port"
fi
echo "ok"
