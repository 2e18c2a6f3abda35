#!/usr/bin/env bash
# A chat model's own template end to end, with real files: Qwen3's and
# DeepSeek V3's tokenizer.json and tokenizer_config.json beside a Mamba-2
# checkpoint with random weights (tests/tools/hf_checkpoints.py).
# attn-export records the template; the real server says which template and
# tool-call format each model has (/v1/models, attnctl models); POST
# /tokenize with messages gives the ids transformers.js's
# apply_chat_template gives on the same files, for conversations with
# system turns, several turns, tools, assistant tool calls (arguments sent as JSON
# strings, as OpenAI's wire has them) and tool results; a chat completion
# prefills exactly those ids and stops at the template's end of turn.
# --chat_template at serve time replaces the template, and the template's
# own refusals (raise_exception) come back as 400 naming messages.
#   chat_template_serves.sh ATTN_SERVER ATTNCTL ATTN_EXPORT NODE_TOOLS
set -euo pipefail
server_bin=$1 ctl_bin=$2 export_bin=$3
node_tools=$(mkdir -p "$4" && cd "$4" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/scripts/lib/export_once.sh"
. "$repo/scripts/lib/node_tools.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The JavaScript port of transformers, without its ONNX runtime's install
# step: only its tokenizers and chat templates run here.
npm_packages "$node_tools" --ignore-scripts @huggingface/transformers@4.3.1 \
  || fail "npm install @huggingface/transformers"
. "$repo/tests/text/real_tokenizers.sh"
real_tokenizers "$work" "$node_tools" || fail "the real tokenizer files"

echo "== checkpoints with the real tokenizer files beside them"
while IFS=$'\t' read -r name _ sha; do
  case $name in '#'*|'') continue ;; esac
  config=$repo/tests/data/tokenizers/$name/tokenizer_config.json
  echo "$sha  $config" | sha256sum --check --quiet || fail "$config is not the file CONFIGS.tsv records"
  $py "$repo/tests/tools/hf_checkpoints.py" write --family mamba2 --d 32 --layers 1 --vocab 151680 \
    --out "$work/$name" --tokenizer "$work/$name.json"
  cp "$config" "$work/$name/tokenizer_config.json"
  # As scripts/serve.sh --export=DIR does it; a second call finds it done.
  export_once "$export_bin" "$work/$name" "$work" > /dev/null 2> "$work/$name.export.log" \
    || fail "export of $name: $(cat "$work/$name.export.log")"
  [ "$(export_once "$export_bin" "$work/$name" "$work" 2>&1)" = "$work/$name.pt" ] \
    || fail "$name was exported again"
  grep -q "chat template from tokenizer_config.json" "$work/$name.export.log" \
    || fail "$name: the export did not record the template: $(cat "$work/$name.export.log")"
done < "$repo/tests/data/tokenizers/CONFIGS.tsv"
grep -q "tool calls in the hermes format" "$work/qwen3.export.log" || fail "qwen3's tool-call format"

start_server "$work/server.log" --models="$work/qwen3.pt,$work/deepseek-v3.pt" --metrics_port=-1
api=http://127.0.0.1:$http_port

echo "== the models say which template they render with"
curl -sf "$api/v1/models" > "$work/models.json"
$py - "$work/models.json" <<'PY' || fail "/v1/models"
import json, sys
models = {m["id"]: m["attn"] for m in json.load(open(sys.argv[1]))["data"]}
assert models["qwen3"]["chat_template"] == "tokenizer_config.json", models["qwen3"]
assert models["qwen3"]["tool_call_format"] == "hermes", models["qwen3"]
assert models["deepseek-v3"]["chat_template"] == "tokenizer_config.json", models["deepseek-v3"]
assert "tool_call_format" not in models["deepseek-v3"], models["deepseek-v3"]
PY
"$ctl_bin" --server="127.0.0.1:$server_port" models > "$work/models.txt"
grep -q "tokenizer_config.json" "$work/models.txt" || fail "attnctl models: $(cat "$work/models.txt")"

echo "== /tokenize with messages equals transformers.js's apply_chat_template"
$py "$repo/tests/text/chat_templates.py" cases - - "$work/cases.jsonl"
for name in qwen3 deepseek-v3; do
  # Where Jinja2 (as transformers renders) fails, the server must refuse:
  # JavaScript would render a dict added to a string as "[object Object]".
  $py - "$work/$name/tokenizer_config.json" "$work/$name.jinja" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
open(sys.argv[2], "w").write(config["chat_template"])
PY
  $py "$repo/tests/text/chat_templates.py" render "$work/$name.jinja" "$work/cases.jsonl" \
    > "$work/$name.jinja2"
  mkdir -p "$work/js/$name"
  ln -sf "$(readlink -f "$work/$name.json")" "$work/js/$name/tokenizer.json"
  cp "$work/$name/tokenizer_config.json" "$work/js/$name/"
  # The server's answers for every case, tools included.
  $py - "$api" "$name" "$work/cases.jsonl" > "$work/$name.ours" <<'PY' || fail "$name: /tokenize"
import json, sys, urllib.request, urllib.error
api, model, cases = sys.argv[1:4]
for line in open(cases, encoding="utf-8"):
    case = json.loads(line)
    messages = json.loads(json.dumps(case["messages"]))
    for m in messages:  # OpenAI's wire: tool-call arguments as JSON text
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    body = {"model": model, "messages": messages,
            "add_generation_prompt": case["add_generation_prompt"]}
    if case.get("tools"):
        body["tools"] = case["tools"]
    request = urllib.request.Request(api + "/tokenize", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        print(json.dumps(json.load(urllib.request.urlopen(request))["tokens"]))
    except urllib.error.HTTPError as e:
        print(json.dumps({"error": json.load(e)["error"]["message"]}))
PY
  cat > "$node_tools/apply_chat_template.mjs" <<'JS'
import { AutoTokenizer, env } from '@huggingface/transformers';
import { readFileSync } from 'fs';
const [dir, model, cases] = process.argv.slice(2);
env.allowRemoteModels = false;
env.localModelPath = dir;
const tokenizer = await AutoTokenizer.from_pretrained(model);
for (const line of readFileSync(cases, 'utf8').split('\n').filter(Boolean)) {
  const c = JSON.parse(line);
  try {
    const ids = tokenizer.apply_chat_template(c.messages, {
      tools: c.tools?.length ? c.tools : undefined,
      add_generation_prompt: c.add_generation_prompt, tokenize: true, return_tensor: false });
    console.log(JSON.stringify(Array.from(Array.isArray(ids) ? ids : ids.input_ids)));
  } catch (e) {
    console.log(JSON.stringify({ error: String(e.message) }));
  }
}
JS
  node "$node_tools/apply_chat_template.mjs" "$work/js/" "$name" "$work/cases.jsonl" \
    > "$work/$name.js" 2> "$work/$name.js.log" || fail "$name: transformers.js: $(cat "$work/$name.js.log")"
  $py - "$name" "$work/$name.ours" "$work/$name.js" "$work/$name.jinja2" <<'PY' || fail "$name: ids differ"
import json, sys
name, ours, js, jinja2 = sys.argv[1:5]
got = [json.loads(l) for l in open(ours)]
want = [json.loads(l) for l in open(js)]
python = [json.loads(l) for l in open(jinja2)]
assert len(got) == len(want) == len(python) > 0, (len(got), len(want), len(python))
same = 0
for i, (g, w, p) in enumerate(zip(got, want, python)):
    if "error" in p:
        assert isinstance(g, dict), f"case {i}: Jinja2 fails ({p['error']}), the server tokenized"
        continue
    if isinstance(w, dict):
        assert isinstance(g, dict), f"case {i}: transformers.js refused ({w}), the server tokenized"
        continue
    assert isinstance(g, list), f"case {i}: the server refused ({g}), transformers.js tokenized"
    assert g == w, f"case {i}: ids differ\n  server:          {g[:40]}...\n  transformers.js: {w[:40]}..."
    same += 1
print(f"  {name}: {same} conversations, identical ids")
PY
done

echo "== a chat completion prefills those ids and stops at the end of turn"
body='{"model": "qwen3", "max_tokens": 3, "temperature": 0,
       "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]}'
curl -sf "$api/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" > "$work/chat.json" \
  || fail "chat completion on the template model"
curl -sf "$api/tokenize" -H 'Content-Type: application/json' \
  -d '{"model": "qwen3", "add_generation_prompt": true, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]}' \
  > "$work/tokens.json"
$py - "$work/chat.json" "$work/tokens.json" <<'PY' || fail "prompt tokens"
import json, sys
chat, tokens = (json.load(open(p)) for p in sys.argv[1:3])
assert chat["usage"]["prompt_tokens"] == tokens["count"], (chat["usage"], tokens["count"])
assert chat["choices"][0]["finish_reason"] in ("stop", "length"), chat
PY
code=$(curl -s -o "$work/state.json" -w '%{http_code}' "$api/v1/chat/completions" \
  -H 'Content-Type: application/json' \
  -d '{"model": "qwen3", "messages": [{"role": "user", "content": "x"}], "attn_state": {"data": "AA=="}}')
[ "$code" = 400 ] && grep -q '"param":"attn_state"' "$work/state.json" \
  || fail "attn_state on a template model: $code $(cat "$work/state.json")"
stop_server "$server_pid" || fail "the server did not stop cleanly"

echo "== --chat_template replaces the template; its refusals are 400s naming messages"
start_server "$work/server2.log" --models="$work/qwen3.pt" --metrics_port=-1 \
  --chat_template="$repo/tests/data/chat_templates/mistral-nemo.jinja"
api=http://127.0.0.1:$http_port
curl -sf "$api/v1/models" | grep -q '"chat_template":"mistral-nemo.jinja"' || fail "override not listed"
curl -sf "$api/tokenize" -H 'Content-Type: application/json' \
  -d '{"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}' > "$work/mistral.json"
curl -sf "$api/detokenize" -H 'Content-Type: application/json' \
  -d "{\"model\": \"qwen3\", \"tokens\": $($py -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens'])" "$work/mistral.json")}" \
  | grep -qF '[INST]Hi[/INST]' || fail "the override did not render"
code=$(curl -s -o "$work/refused.json" -w '%{http_code}' "$api/v1/chat/completions" \
  -H 'Content-Type: application/json' \
  -d '{"model": "qwen3", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}')
[ "$code" = 400 ] || fail "the template's refusal: $code $(cat "$work/refused.json")"
grep -q '"param":"messages"' "$work/refused.json" && grep -q 'roles must alternate' "$work/refused.json" \
  || fail "the refusal does not carry the template's message: $(cat "$work/refused.json")"
curl -sf "$api/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "qwen3", "max_tokens": 2, "messages": [{"role": "user", "content": "still served"}]}' \
  > /dev/null || fail "the server stopped serving after a refusal"
stop_server "$server_pid" || fail "the server did not stop cleanly"
echo "PASS: real chat templates recorded, listed, rendered as transformers.js renders them, and overridden"
