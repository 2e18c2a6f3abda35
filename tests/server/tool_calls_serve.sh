#!/usr/bin/env bash
# Tool calling end to end with the official openai npm client
# (tests/server/tool_calls_client.mjs) against the real server. The models
# are scripted (tests/python/make_scripted_model.py): byte-level TorchScript
# models that call get_weather after the prompt's last turn cue, and answer
# once a tool result is in the conversation, in three formats:
#   plain-tools  the built-in plain format: tools in the system turn,
#                Hermes-style <tool_call> replies with text before them;
#   qwen-tools   Qwen 2.5's real chat template (hermes);
#   lfm-tools    LFM2.5's real chat template: Pythonic calls, two at once;
#   granite-tools Granite 4.0's real chat template (hermes; tool results
#                come back inside a user turn).
#   tool_calls_serve.sh ATTN_SERVER ATTNCTL NODE_TOOLS
set -euo pipefail
server_bin=$1 ctl_bin=$2
node_tools=$(mkdir -p "$3" && cd "$3" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/scripts/lib/node_tools.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/server.log" ] && tail -20 "$work/server.log" >&2; exit 1; }

npm_packages "$node_tools" openai@4 || fail "npm install openai"
cp "$repo/tests/server/tool_calls_client.mjs" "$repo/tests/server/checks.mjs" "$node_tools/"

echo "== scripted models"
call=$'<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
answer="It is sunny in Paris."
make() { $py "$repo/tests/python/make_scripted_model.py" "$@" || fail "make_scripted_model $1"; }
make "$work/plain-tools.pt" --cue "Assistant:" --first $'Checking.\n'"$call" --after "$answer" \
  --trigger "<tool_response>"
make "$work/qwen-tools.pt" --cue $'<|im_start|>assistant\n' --first "$call" --after "$answer" \
  --trigger "<tool_response>" --chat_template "$repo/tests/data/chat_templates/qwen2.5.jinja"
make "$work/lfm-tools.pt" --cue $'<|im_start|>assistant\n' --after "$answer" \
  --first '<|tool_call_start|>[get_weather(city="Paris"), get_weather(city="Zürich")]<|tool_call_end|>' \
  --trigger $'<|im_start|>tool\n' --chat_template "$repo/tests/data/chat_templates/lfm2.5.jinja"
make "$work/granite-tools.pt" --cue "<|start_of_role|>assistant<|end_of_role|>" --first "$call" \
  --after "$answer" --trigger "<tool_response>" \
  --chat_template "$repo/tests/data/chat_templates/granite-4.0.jinja"

start_server "$work/server.log" --metrics_port=-1 --default_max_tokens=256 \
  --models="$work/plain-tools.pt,$work/qwen-tools.pt,$work/lfm-tools.pt,$work/granite-tools.pt"
curl -sf "http://127.0.0.1:$http_port/v1/models" > "$work/models.json"
$py - "$work/models.json" <<'PY' || fail "tool-call formats in /v1/models"
import json, sys
models = {m["id"]: m["attn"] for m in json.load(open(sys.argv[1]))["data"]}
assert models["qwen-tools"]["tool_call_format"] == "hermes", models["qwen-tools"]
assert models["lfm-tools"]["tool_call_format"] == "lfm2", models["lfm-tools"]
assert models["granite-tools"]["tool_call_format"] == "hermes", models["granite-tools"]
assert "chat_template" not in models["plain-tools"], models["plain-tools"]
PY

echo "== the openai client"
node "$node_tools/tool_calls_client.mjs" "http://127.0.0.1:$http_port/v1" || fail "tool calls"
stop_server "$server_pid" || fail "the server did not stop cleanly"
echo "PASS: tool calls in three formats and four templates through the openai client, streamed and in runTools"
