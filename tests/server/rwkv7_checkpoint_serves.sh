#!/usr/bin/env bash
# A user's RWKV-7 path end to end, with random weights in the public layouts
# (tests/tools/rwkv7_checkpoints.py writes them): attn-export turns a
# bfloat16 BlinkDL .pth and a float16 sharded Hugging Face directory, each
# with an RWKV World vocabulary, into packages; each package's forward, run
# by PyTorch alone, equals a float64 implementation of the RWKV-7 equations
# on the checkpoint's weights; the real server tokenizes as a reference
# greedy tokenizer does, streams the greedy tokens of the float64 model,
# and its streamed logprobs equal Score's within 1e-4. Broken inputs are
# refused with messages that name the problem.
#   rwkv7_checkpoint_serves.sh ATTN_SERVER ATTNCTL ATTN_EXPORT
set -euo pipefail
server_bin=$1 ctl_bin=$2 export_bin=$3
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
tool="$repo/tests/tools/rwkv7_checkpoints.py"
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== checkpoints in the public layouts, random weights"
$py "$tool" vocab --out "$work/vocab.txt"
$py "$tool" write --layout blinkdl --dtype bfloat16 --out "$work/model.pth" 2>/dev/null
$py "$tool" write --layout blinkdl --dtype float16 --out "$work/model16.pth" 2>/dev/null
$py "$tool" write --layout hf-sharded --dtype float16 --out "$work/hf" 2>/dev/null
$py "$tool" write --layout blinkdl --version 6 --out "$work/v6.pth" 2>/dev/null

echo "== attn-export"
"$export_bin" --input="$work/model.pth" --tokenizer="$work/vocab.txt" \
  --output="$work/blinkdl.pt" || fail "export of the .pth"
"$export_bin" --input="$work/hf" --tokenizer="$work/vocab.txt" --output="$work/hf.pt" \
  || fail "export of the Hugging Face directory"
expect_refusal() {  # expect_refusal WHAT TEXT ARGS...: the export fails and says TEXT
  local what=$1 text=$2
  shift 2
  if "$export_bin" "$@" --output="$work/refused.pt" > "$work/refused.log" 2>&1; then
    fail "$what was exported"
  fi
  grep -qF -- "$text" "$work/refused.log" || fail "$what: $(cat "$work/refused.log")"
}
expect_refusal "an RWKV-6 checkpoint" "an RWKV-6 checkpoint" --input="$work/v6.pth" \
  --tokenizer="$work/vocab.txt"
head -c 5000 "$work/model.pth" > "$work/cut.pth"
expect_refusal "a truncated .pth" "truncated or damaged" --input="$work/cut.pth" \
  --tokenizer="$work/vocab.txt"
expect_refusal "a checkpoint without its vocabulary" "give --tokenizer=" --input="$work/model.pth"
printf '1 b"\\x00" 1\n2 zz 2\n' > "$work/bad_vocab.txt"
expect_refusal "a broken vocabulary" "line 2:" --input="$work/model.pth" \
  --tokenizer="$work/bad_vocab.txt"

echo "== each package, in PyTorch alone, equals the float64 equations on the checkpoint"
$py - "$tool" "$work" <<'PY' || fail "package logits"
import importlib.util, json, sys
import numpy as np, torch
spec = importlib.util.spec_from_file_location("rc", sys.argv[1])
rc = importlib.util.module_from_spec(spec); spec.loader.exec_module(rc)
work = sys.argv[2]
tokens = [5, 257, 17, 299, 42, 0, 3, 260, 1, 2, 99, 150, 271, 276]
# The Hugging Face layout's group norm eps is head_dim x 1e-5 (16e-5 here).
for package, pth, eps in (("blinkdl.pt", "model.pth", 64e-5), ("hf.pt", "model16.pth", 16e-5)):
    module = torch.jit.load(f"{work}/{package}")
    got = module.forward(torch.tensor([tokens])).double().numpy()[0]
    want = rc.reference_logits(torch.load(f"{work}/{pth}"), tokens, eps)
    error = np.abs(got - want).max()
    assert error < 1e-4 * np.abs(want).max(), (package, error)
    config = json.loads(module.config)
    assert config["tokenizer"] == "rwkv-world" and config["chat_format"] == "rwkv-world", config
    assert config["source"]["files"][0]["sha256"], config
    print(f"   {package}: max |logit - float64| = {error:.2e}")
PY

echo "== served: tokenizer, greedy tokens of the float64 model, streamed logprobs == Score"
$py "$tool" state --out "$work/calm.pth" 2>/dev/null
start_server "$work/server.log" --models="$work/blinkdl.pt" --metrics_port=-1 \
  --initial_states="blinkdl:calm=$work/calm.pth"
ctl=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
"${ctl[@]}" models --json > "$work/models.json"
grep -q '"mixer":"rwkv7"' "$work/models.json" || fail "ListModels: $(cat "$work/models.json")"
grep -q '"chat_format":"rwkv-world"' "$work/models.json" || fail "chat format not listed"
printf 'the river 日本語 🙂 it'"'"'s\n\ntab\there \\n \xc3\xa9t\xc3\xa9 river\n' > "$work/text.txt"
"${ctl[@]}" tokenize --text_file="$work/text.txt" --json > "$work/tokens.json"
$py "$tool" tokenize --vocab "$work/vocab.txt" --text-file "$work/text.txt" > "$work/reference.json"
$py - "$work/tokens.json" "$work/reference.json" <<'PY' || fail "tokenizer"
import json, sys
served = [int(i) for i in json.load(open(sys.argv[1]))["token_ids"]]
reference = json.load(open(sys.argv[2]))
assert served == reference, (served, reference)
print(f"   {len(served)} tokens as the reference tokenizer")
PY
"${ctl[@]}" stream --ids=5,257,17 --max_tokens=24 --temperature=0 --logprobs --ignore_eos \
  --json > "$work/stream.jsonl"
ids=$($py - "$work/stream.jsonl" <<'PY'
import json, sys
messages = [json.loads(line) for line in open(sys.argv[1])]
print(",".join(["5", "257", "17"] + [t for m in messages for t in m.get("token_ids", [])]))
PY
)
"${ctl[@]}" score --ids="$ids" --json > "$work/score.json"
$py - "$tool" "$work" "$ids" <<'PY' || fail "greedy tokens or logprobs"
import importlib.util, json, sys
import numpy as np, torch
spec = importlib.util.spec_from_file_location("rc", sys.argv[1])
rc = importlib.util.module_from_spec(spec); spec.loader.exec_module(rc)
work, ids = sys.argv[2], [int(i) for i in sys.argv[3].split(",")]
stream = [json.loads(line) for line in open(f"{work}/stream.jsonl")]
streamed = [float(x) for m in stream for x in m.get("logprobs", [])]
scored = [float(x) for x in json.load(open(f"{work}/score.json"))["logprobs"]][3:]
assert len(streamed) == len(scored) == 24, (len(streamed), len(scored))
assert max(abs(a - b) for a, b in zip(streamed, scored)) < 1e-4, (streamed, scored)
logits = rc.reference_logits(torch.load(f"{work}/model.pth"), ids[:-1])
# The embedding's rows past the vocabulary's ids are never sampled.
known = 1 + max(int(line.split(" ", 1)[0]) for line in open(f"{work}/vocab.txt"))
assert known < logits.shape[1], (known, logits.shape)
greedy = [int(np.argmax(row[:known])) for row in logits[2:]]
assert greedy == ids[3:], (greedy, ids[3:])
print("   24 greedy tokens equal the float64 model's; streamed logprobs equal Score's")
PY

echo "== an initial state: as the float64 model started from it; cached apart; unknown: NOT_FOUND"
grep -q '"initial_states":\["calm"\]' "$work/models.json" || fail "ListModels lacks calm"
for run in 1 2; do
  "${ctl[@]}" generate --ids=7,258,19 --max_tokens=12 --temperature=0 --ignore_eos \
    --initial_state=calm --json > "$work/calm$run.json" || fail "generate from calm"
done
"${ctl[@]}" generate --ids=7,258,19 --max_tokens=12 --temperature=0 --ignore_eos --json \
  > "$work/plain.json"
$py - "$tool" "$work" <<'PY' || fail "initial state"
import importlib.util, json, sys
import numpy as np, torch
spec = importlib.util.spec_from_file_location("rc", sys.argv[1])
rc = importlib.util.module_from_spec(spec); spec.loader.exec_module(rc)
work = sys.argv[2]
first, again, plain = (json.load(open(f"{work}/{n}.json")) for n in ("calm1", "calm2", "plain"))
ids = [7, 258, 19] + [int(t) for t in first["token_ids"]]
logits = rc.reference_logits(torch.load(f"{work}/model.pth"), ids[:-1],
                             time_state=torch.load(f"{work}/calm.pth"))
known = 1 + max(int(line.split(" ", 1)[0]) for line in open(f"{work}/vocab.txt"))
assert [int(np.argmax(r[:known])) for r in logits[2:]] == ids[3:], "not the float64 model from calm"
assert again["token_ids"] == first["token_ids"], "the cached calm state answered otherwise"
assert int(again["usage"]["cached_tokens"]) > 0, again["usage"]  # the first run's prompt end
assert plain["token_ids"] != first["token_ids"], "calm made no difference"
assert int(plain["usage"].get("cached_tokens", 0)) == 0, "the empty sequence hit calm's entry"
print("   12 greedy tokens from calm as the float64 model's; cached apart from the empty start")
PY
if "${ctl[@]}" generate --prompt=the --initial_state=stormy 2> "$work/unknown.txt"; then
  fail "an unknown initial state was accepted"
fi
grep -q 'NOT_FOUND: initial_state: "stormy" is not one of blinkdl' "$work/unknown.txt" \
  || fail "unknown initial state: $(cat "$work/unknown.txt")"

echo "== attnctl chat in the package's format (rwkv-world): turns continue the held state"
printf 'the river\nit'"'"'s the river\n' | "${ctl[@]}" chat --max_tokens=8 --temperature=0 --json \
  > "$work/chat.jsonl" || fail "chat"
$py - "$work/chat.jsonl" <<'PY' || fail "chat turns"
import json, sys
turns = [json.loads(line) for line in open(sys.argv[1])]
assert len(turns) == 2 and turns[1]["cached_tokens"] > 0, turns
print("   two turns; the second prefilled", turns[1]["prefilled_tokens"], "tokens")
PY
echo "PASS"
