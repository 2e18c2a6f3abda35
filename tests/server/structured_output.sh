#!/usr/bin/env bash
# Structured output end to end (docs/structured-output.md): the bundled
# rwkv7 model behind the real server, driven by the official openai npm
# client (tests/server/structured_client.mjs): a dozen real JSON Schemas
# (tests/data/schemas), a stream, zod's helper, json_object, choice, regex
# and GBNF, forced tool calls and the Responses API, every finished output
# checked by ajv; then the grammar metrics in the Prometheus text.
#   structured_output.sh ATTN_SERVER ATTNCTL NODE_TOOLS
set -euo pipefail
server_bin=$1 ctl_bin=$2
node_tools=$(mkdir -p "$3" && cd "$3" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/scripts/lib/node_tools.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/server.log" ] && tail -20 "$work/server.log" >&2; exit 1; }

npm_packages "$node_tools" openai@4 zod@3 ajv@8 ajv-formats@3 || fail "npm install"
cp "$repo/tests/server/structured_client.mjs" "$repo/tests/server/checks.mjs" "$node_tools/"

start_server "$work/server.log" --models="$repo/models/rwkv7.pt"
echo "== the openai client"
node "$node_tools/structured_client.mjs" "http://127.0.0.1:$http_port/v1" "$repo/tests/data/schemas" ||
  fail "structured output"

echo "== metrics"
curl -sf "http://127.0.0.1:$metrics_port/metrics" > "$work/metrics.txt" || fail "scrape"
promtool check metrics < "$work/metrics.txt" > "$work/promtool.txt" 2>&1 \
  || fail "promtool: $(cat "$work/promtool.txt")"
[ ! -s "$work/promtool.txt" ] || fail "promtool lint: $(cat "$work/promtool.txt")"
/usr/bin/python3 - "$work/metrics.txt" <<'PY' || fail "grammar metrics"
import re, sys
text = open(sys.argv[1]).read()
def value(pattern):
    m = re.search(pattern + r" ([0-9.e+-]+)", text)
    assert m, pattern
    return float(m.group(1))
assert value(r'attn_grammar_requests_total\{cache="miss"\}') >= 15
assert value(r'attn_grammar_requests_total\{cache="hit"\}') >= 10
assert value(r"attn_grammar_compile_seconds_count") >= 15
assert value(r'attn_grammar_mask_seconds_count\{model="rwkv7"\}') >= 100
PY
stop_server "$server_pid" || fail "the server did not stop cleanly"
echo "PASS: structured output through the openai client, validated by ajv"
