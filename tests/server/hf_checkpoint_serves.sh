#!/usr/bin/env bash
# A user's Mamba-2, RWKV-4, LFM2 and Granite 4.0-H path end to end, with
# random weights in
# the public layouts (tests/tools/hf_checkpoints.py writes them, and a
# byte-level BPE tokenizer.json in GPT-NeoX's layout): attn-export turns a
# transformers Mamba-2 directory (bfloat16 safetensors, a config with
# Python's Infinity), a mamba_ssm one (float16 pytorch_model.bin, tied
# head stored twice, a padded vocabulary) and a sharded RWKV-4 one
# (rescale_every 2), and LFM2 and Granite 4.0-H hybrids (bfloat16 tied;
# float32 untied and sharded; Granite without positions and with rotary
# ones, and with a mixture of experts) into packages; each package's
# forward, run by PyTorch alone, equals a float64 implementation of the
# model on the checkpoint, and the TorchScript
# backend serves the Mamba-2, LFM2 and Granite packages to the native
# backend's greedy tokens; the hybrids' states are cached and resume on another server,
# through the client and through Redis, within --max_exported_state_bytes;
# the real server tokenizes as the package's tokenizer.json does, streams
# the float64 model's greedy tokens, and its streamed logprobs equal
# Score's. Options and tensors that do not fit are refused by name.
#   hf_checkpoint_serves.sh ATTN_SERVER ATTNCTL ATTN_EXPORT ATTN_TOKENIZE_JSON
set -euo pipefail
server_bin=$1 ctl_bin=$2 export_bin=$3 tokenize_bin=$4
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
tool="$repo/tests/tools/hf_checkpoints.py"
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/scripts/lib/local_redis.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; kill_redis; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== checkpoints in the public layouts, random weights"
$py "$tool" tokenizer --out "$work/tokenizer.json"
$py "$tool" write --family mamba2 --dtype bfloat16 --out "$work/mamba2" --tokenizer "$work/tokenizer.json"
$py "$tool" write --family mamba2-ssm --format bin --dtype float16 --out "$work/mamba2-ssm" 2>/dev/null
$py "$tool" write --family rwkv4 --layers 4 --vocab 530 --format sharded --out "$work/rwkv4" \
  --tokenizer "$work/tokenizer.json"
grep -q 'Infinity' "$work/mamba2/config.json" || fail "the config lacks Python's Infinity"
# GPT-NeoX-20B's real tokenizer.json (50,277 ids, 13 bytes without a token)
# with a vocabulary padded to 50,288 as mamba_ssm pads it.
# LFM2, a hybrid of short convolutions and grouped-query attention: tied in
# bfloat16, untied and sharded in float32.
$py "$tool" write --family lfm2 --layers 4 --dtype bfloat16 --out "$work/lfm2" \
  --tokenizer "$work/tokenizer.json"
$py "$tool" write --family lfm2 --layers 5 --untied --format sharded --seed 3 \
  --out "$work/lfm2-untied" --tokenizer "$work/tokenizer.json"
# Granite 4.0-H, Mamba-2 layers with attention among them: tied in bfloat16
# without positions, untied and sharded in float32 with rotary ones.
$py "$tool" write --family granite --layers 5 --dtype bfloat16 --out "$work/granite" \
  --tokenizer "$work/tokenizer.json"
$py "$tool" write --family granite --layers 4 --untied --rope --format sharded --seed 3 \
  --out "$work/granite-untied" --tokenizer "$work/tokenizer.json"
# Granite 4.0-H Tiny's kind: eight experts beside every layer's MLP, two per token.
$py "$tool" write --family granite --layers 4 --experts 8 --seed 4 --out "$work/granite-moe" \
  --tokenizer "$work/tokenizer.json"
neox_tokenizer=$repo/tests/data/tokenizers/gpt-neox-20b/tokenizer.json
$py "$tool" write --family mamba2-ssm --format bin --vocab 50288 --loud_padding --out "$work/neox"

echo "== attn-export: two commands' worth, one per directory"
"$export_bin" --input="$work/mamba2" --output="$work/mamba2.pt" || fail "export of mamba2"
"$export_bin" --input="$work/mamba2-ssm" --tokenizer="$work/tokenizer.json" \
  --output="$work/mamba2-ssm.pt" || fail "export of the mamba_ssm layout"
"$export_bin" --input="$work/rwkv4" --output="$work/rwkv4.pt" --quantize=none \
  || fail "export of rwkv4"
"$export_bin" --input="$work/neox" --tokenizer="$neox_tokenizer" --output="$work/neox.pt" \
  || fail "export with GPT-NeoX's real tokenizer.json"
"$export_bin" --input="$work/lfm2" --output="$work/lfm2.pt" || fail "export of lfm2"
"$export_bin" --input="$work/lfm2-untied" --output="$work/lfm2-untied.pt" \
  || fail "export of an untied, sharded lfm2"
"$export_bin" --input="$work/granite" --output="$work/granite.pt" || fail "export of granite"
"$export_bin" --input="$work/granite-untied" --output="$work/granite-untied.pt" \
  || fail "export of an untied, sharded granite with rotary positions"
"$export_bin" --input="$work/granite-moe" --output="$work/granite-moe.pt" \
  || fail "export of a granite with experts"

expect_refusal() {  # expect_refusal WHAT TEXT DIR EDIT: the edited copy of DIR is refused with TEXT
  local what=$1 text=$2 dir=$3 edit=$4
  rm -rf "$work/edited" && cp -r "$work/$dir" "$work/edited"
  $py - "$work/edited/config.json" "$edit" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
config = json.loads(text)
exec(sys.argv[2])
open(sys.argv[1], "w").write(json.dumps(config))
PY
  if "$export_bin" --input="$work/edited" --tokenizer="$work/tokenizer.json" \
      --output="$work/refused.pt" > "$work/refused.log" 2>&1; then
    fail "$what was exported"
  fi
  grep -qF -- "$text" "$work/refused.log" || fail "$what: $(cat "$work/refused.log")"
}
expect_refusal "another model_type" 'model_type: "llama"; supported' mamba2 'config["model_type"] = "llama"'
expect_refusal "a time-step limit" "time_step_limit" mamba2 'config["time_step_limit"] = [0.0, 5.0]'
expect_refusal "a gelu Mamba-2" "hidden_act" mamba2 'config["hidden_act"] = "gelu"'
expect_refusal "sizes the tensors do not have" "mixer.conv1d.weight has shape" mamba2 \
  'config["n_groups"] = 1'
expect_refusal "Mamba-1" "ssm_cfg.layer" mamba2-ssm 'del config["ssm_cfg"]["layer"]'
expect_refusal "a hybrid" "attn_layer_idx" mamba2-ssm 'config["attn_layer_idx"] = [1]'
expect_refusal "a wider attention" "attention_hidden_size" rwkv4 \
  'config["attention_hidden_size"] = 2 * config["hidden_size"]'
expect_refusal "one layer too many" "missing tensor rwkv.blocks.4." rwkv4 \
  'config["num_hidden_layers"] = 5'
expect_refusal "LFM2 convolution biases" "conv_bias" lfm2 'config["conv_bias"] = True'
expect_refusal "scaled rotary positions" "rope_scaling" lfm2 \
  'config["rope_scaling"] = {"type": "linear", "factor": 2.0}'
expect_refusal "an option LFM2 lacks" "sliding_window: is not an LFM2 option" lfm2 \
  'config["sliding_window"] = 512'
expect_refusal "a layer type LFM2 lacks" '"mamba" at 0' lfm2 'config["layer_types"][0] = "mamba"'
expect_refusal "attention where the checkpoint has a convolution" \
  "missing tensor model.layers.0.self_attn.q_proj.weight" lfm2 \
  'config["layer_types"][0] = "full_attention"'
expect_refusal "fewer key/value heads than stored" "self_attn.k_proj.weight has shape" lfm2 \
  'config["num_key_value_heads"] = 1'
expect_refusal "experts the checkpoint lacks" \
  "missing tensor model.layers.0.block_sparse_moe.input_linear.weight" granite \
  'config["num_local_experts"] = 4; config["num_experts_per_tok"] = 2'
expect_refusal "more experts than stored" "block_sparse_moe.input_linear.weight has shape" \
  granite-moe 'config["num_local_experts"] = 5'
expect_refusal "B and C in groups" "mamba_n_groups" granite 'config["mamba_n_groups"] = 2'
expect_refusal "an attention layer where the checkpoint has Mamba" \
  "missing tensor model.layers.0.self_attn.q_proj.weight" granite \
  'config["layer_types"][0] = "attention"'
expect_refusal "a narrower shared MLP" "shared_mlp.input_linear.weight has shape" granite \
  'config["shared_intermediate_size"] = 64'
rm -rf "$work/edited" && cp -r "$work/mamba2" "$work/edited"
echo '{"model": {"type": "Unigram"}}' > "$work/edited/tokenizer.json"
"$export_bin" --input="$work/edited" --output="$work/refused.pt" > "$work/refused.log" 2>&1 \
  && fail "a Unigram tokenizer.json was exported"
grep -qF 'model.type: "Unigram" is not supported' "$work/refused.log" \
  || fail "Unigram: $(cat "$work/refused.log")"

echo "== each package, in PyTorch alone, equals the float64 model on the checkpoint"
$py - "$tool" "$work" <<'PY' || fail "package logits"
import importlib.util, json, sys
import numpy as np, torch
spec = importlib.util.spec_from_file_location("hc", sys.argv[1])
hc = importlib.util.module_from_spec(spec); spec.loader.exec_module(hc)
work = sys.argv[2]
tokens = [5, 257, 17, 299, 42, 0, 3, 260, 1, 2, 99, 150, 271, 276, 511, 40, 41, 42]
for name in ("mamba2", "mamba2-ssm", "rwkv4", "lfm2", "lfm2-untied", "granite", "granite-untied",
             "granite-moe"):
    module = torch.jit.load(f"{work}/{name}.pt")
    got = module.forward(torch.tensor([tokens])).double().numpy()[0]
    want = hc.reference_logits(f"{work}/{name}", tokens)
    error = np.abs(got - want).max()
    assert error < 1e-4 * np.abs(want).max(), (name, error)
    config = json.loads(module.config)
    assert config["tokenizer"] == "tokenizer-json", config
    assert config["source"]["files"][0]["sha256"], config
    print(f"   {name}: max |logit - float64| = {error:.2e} ({config['source']['format']})")
PY

echo "== served: tokenizer, greedy tokens of the float64 model, streamed logprobs == Score"
start_server "$work/server.log" \
  --models="$work/mamba2.pt,$work/mamba2-ssm.pt,$work/rwkv4.pt,$work/neox.pt,$work/lfm2.pt,$work/lfm2-untied.pt,$work/granite.pt,$work/granite-untied.pt,$work/granite-moe.pt" \
  --metrics_port=-1
ctl=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
"${ctl[@]}" models --json > "$work/models.json"
for kind in mamba2 rwkv4 short-conv; do
  grep -q "\"mixer\":\"$kind\"" "$work/models.json" || fail "ListModels: $(cat "$work/models.json")"
done
printf 'the river 日本語 🙂 it'"'"'s\n\ntab\there    four \xc3\xa9t\xc3\xa9 <|endoftext|>' > "$work/text.txt"
"${ctl[@]}" tokenize --model=rwkv4 --text_file="$work/text.txt" --json > "$work/tokens.json"
$py -c "import sys; print(open(sys.argv[1], 'rb').read().hex())" "$work/text.txt" > "$work/text.hex"
"$tokenize_bin" "$work/tokenizer.json" "$work/text.hex" > "$work/reference.jsonl"
$py - "$work/tokens.json" "$work/reference.jsonl" <<'PY' || fail "tokenizer"
import json, sys
served = [int(i) for i in json.load(open(sys.argv[1]))["token_ids"]]
reference = json.loads(open(sys.argv[2]).readline())["ids"]
assert served == reference and 0 in served, (served, reference)
print(f"   {len(served)} tokens as tokenizer.json says, <|endoftext|> among them")
PY
for name in mamba2 mamba2-ssm rwkv4 lfm2 lfm2-untied granite granite-untied granite-moe; do
  "${ctl[@]}" stream --model="$name" --ids=5,257,17 --max_tokens=16 --temperature=0 --logprobs \
    --ignore_eos --json > "$work/stream.jsonl"
  ids=$($py -c '
import json, sys
messages = [json.loads(line) for line in open(sys.argv[1])]
print(",".join(["5", "257", "17"] + [t for m in messages for t in m.get("token_ids", [])]))' \
    "$work/stream.jsonl")
  "${ctl[@]}" score --model="$name" --ids="$ids" --json > "$work/score.json"
  $py - "$tool" "$work" "$name" "$ids" <<'PY' || fail "$name: greedy tokens or logprobs"
import importlib.util, json, sys
import numpy as np
spec = importlib.util.spec_from_file_location("hc", sys.argv[1])
hc = importlib.util.module_from_spec(spec); spec.loader.exec_module(hc)
work, name, ids = sys.argv[2], sys.argv[3], [int(i) for i in sys.argv[4].split(",")]
stream = [json.loads(line) for line in open(f"{work}/stream.jsonl")]
streamed = [float(x) for m in stream for x in m.get("logprobs", [])]
scored = [float(x) for x in json.load(open(f"{work}/score.json"))["logprobs"]][3:]
assert len(streamed) == len(scored) == 16, (len(streamed), len(scored))
assert max(abs(a - b) for a, b in zip(streamed, scored)) < 1e-4, (streamed, scored)
logits = hc.reference_logits(f"{work}/{name}", ids[:-1])
# Ids past the tokenizer's are never sampled (an untied head's rows there
# are as strong as any other).
vocab = json.load(open(f"{work}/tokenizer.json"))
known = 1 + max(list(vocab["model"]["vocab"].values()) + [t["id"] for t in vocab["added_tokens"]])
greedy = [int(np.argmax(row[:known])) for row in logits[2:]]
assert greedy == ids[3:], (greedy, ids[3:])
shifted = logits - logits.max(-1, keepdims=True)
logprobs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
want = [logprobs[i + 2][t] for i, t in enumerate(ids[3:])]
assert max(abs(a - b) for a, b in zip(streamed, want)) < 1e-3, (streamed, want)
print(f"   {name}: 16 greedy tokens and their logprobs as the float64 model's")
PY
done
echo "== GPT-NeoX's tokenizer: padded ids are input, never output"
printf 'caf\xc3\xa9 \xc3\x80 la carte 日本語 🙂 <|endoftext|>  x' > "$work/neox.txt"
"${ctl[@]}" tokenize --model=neox --text_file="$work/neox.txt" --json > "$work/neox_tokens.json"
$py -c "import sys; print(open(sys.argv[1], 'rb').read().hex())" "$work/neox.txt" > "$work/neox.hex"
"$tokenize_bin" "$neox_tokenizer" "$work/neox.hex" > "$work/neox_reference.jsonl"
"${ctl[@]}" stream --model=neox --ids=5,50280,17 --max_tokens=12 --temperature=0 --ignore_eos \
  --json > "$work/neox_stream.jsonl" || fail "ids of the padded rows refused as input"
$py - "$tool" "$work" <<'PY' || fail "GPT-NeoX tokenizer with a padded vocabulary"
import importlib.util, json, sys
import numpy as np
spec = importlib.util.spec_from_file_location("hc", sys.argv[1])
hc = importlib.util.module_from_spec(spec); spec.loader.exec_module(hc)
work = sys.argv[2]
served = [int(i) for i in json.load(open(f"{work}/neox_tokens.json"))["token_ids"]]
reference = json.loads(open(f"{work}/neox_reference.jsonl").readline())["ids"]
assert served == reference and 0 in served, (served, reference)
out = [int(t) for line in open(f"{work}/neox_stream.jsonl") for t in json.loads(line).get("token_ids", [])]
logits = hc.reference_logits(f"{work}/neox", [5, 50280, 17] + out[:-1])[2:]
assert logits.shape[1] == 50288, logits.shape
masked = [int(np.argmax(row[:50277])) for row in logits]
unmasked = sum(int(np.argmax(row)) >= 50277 for row in logits)
assert out == masked, (out, masked)
assert unmasked > 0, "no step would have chosen a padded id: the check tests nothing"
print(f"   {len(served)} tokens as tokenizer.json says; 12 greedy tokens below 50,277 although "
      f"{unmasked} steps' maximum lies in the padding")
PY

# state_reuse NAME: a hybrid's state (recurrent and convolution states, the
# attention layers' key/value caches) is cached at token granularity and,
# held by the client, resumes on a server without a cache.
state_reuse() {
  local name=$1 first_port=$server_port
  local prompt greedy whole
  prompt=$(seq -s, 3 60)
  greedy=(--model="$name" --max_tokens=8 --temperature=0 --ignore_eos --json)
  "${ctl[@]}" generate "${greedy[@]}" --ids="$prompt" --state_out="$work/$name.state" \
    > "$work/first.json"
  "${ctl[@]}" generate "${greedy[@]}" --ids="$prompt" > "$work/repeated.json"
  "${ctl[@]}" generate "${greedy[@]}" --ids="$prompt,61,62,63" > "$work/extended.json"
  start_server "$work/server_nocache_$name.log" --models="$work/$name.pt" --state_cache=off \
    --metrics_port=-1
  local other=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
  server_port=$first_port
  "${other[@]}" generate "${greedy[@]}" --ids="$prompt,61,62,63" > "$work/extended_nocache.json"
  "${other[@]}" generate "${greedy[@]}" --ids=64,65 --state_in="$work/$name.state" \
    > "$work/resumed.json"
  whole=$($py -c '
import json, sys
print(",".join(str(i) for i in json.load(open(sys.argv[1]))["state_token_ids"] + [64, 65]))' \
    "$work/first.json")
  "${other[@]}" generate "${greedy[@]}" --ids="$whole" > "$work/whole.json"
  $py - "$work" "$name" <<'PY' || fail "$name state reuse"
import json, sys
work, name = sys.argv[1:]
load = lambda name: json.load(open(f"{work}/{name}.json"))
first, repeated, extended = load("first"), load("repeated"), load("extended")
assert repeated["token_ids"] == first["token_ids"], (repeated, first)
assert int(repeated["usage"]["cached_tokens"]) >= 57, repeated["usage"]
assert int(extended["usage"]["cached_tokens"]) >= 57, extended["usage"]
assert extended["token_ids"] == load("extended_nocache")["token_ids"]
assert int(load("extended_nocache")["usage"].get("cached_tokens", 0)) == 0
resumed, whole = load("resumed"), load("whole")
assert resumed["token_ids"] == whole["token_ids"], (resumed, whole)
assert int(resumed["usage"]["cached_tokens"]) >= 58, resumed["usage"]
print(f"   {name}: repeated and extended prompts reuse {repeated['usage']['cached_tokens']} and "
      f"{extended['usage']['cached_tokens']} tokens, greedy as without a cache; a state held "
      f"by the client resumes on another server as the whole prompt there")
PY
}
echo "== the hybrids' states: cached at token granularity, held by the client"
state_reuse lfm2
state_reuse granite

echo "== questions about one LFM2 document each start from its cached state"
# The cache holds the document's keys and values with their room once, not
# twice: each question copies them (the first took the room behind them),
# and the document's state moves onto the copy instead of being dropped.
first_port=$server_port
start_server "$work/server_document.log" --models="$work/lfm2.pt" --state_cache_bytes=170000 \
  --metrics_port=-1
document_ctl=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
server_port=$first_port
document=$(seq -s, 3 302)
brief=(--model=lfm2 --max_tokens=2 --temperature=0 --ignore_eos --json)
"${document_ctl[@]}" generate "${brief[@]}" --ids="$document" > /dev/null
for q in 1 2 3 4; do
  "${document_ctl[@]}" generate "${brief[@]}" --ids="$document,$((400 + q)),$((420 + q))" \
    > "$work/question_$q.json"
done
$py - "$work" <<'PY' || fail "questions about one document"
import json, sys
reused = [int(json.load(open(f"{sys.argv[1]}/question_{q}.json"))["usage"]["cached_tokens"])
          for q in range(1, 5)]
assert reused == [300] * 4, reused
print("   four questions each reuse the document's 300 tokens in a cache too small for two copies")
PY

echo "== a Granite conversation resumes through Redis; --max_exported_state_bytes bounds it"
start_redis "$work/redis"
tier=(--models="$work/granite.pt" --state_cache_bytes=0 --state_store="$redis_url"
  --state_store_timeout=200ms --metrics_port=-1)
first_port=$server_port
start_server "$work/tier_a.log" "${tier[@]}"
tier_a=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
start_server "$work/tier_b.log" "${tier[@]}"
tier_b=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
# A state of 58 tokens is about 46 KB here: past a 30,000-byte bound.
start_server "$work/tier_small.log" "${tier[@]}" --max_exported_state_bytes=30000
small=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
server_port=$first_port
greedy=(--model=granite --max_tokens=8 --temperature=0 --ignore_eos --json)
prompt=$(seq -s, 3 60)
"${tier_a[@]}" generate "${greedy[@]}" --ids="$prompt" > /dev/null
sleep 0.3  # the tier's write lands
"${tier_b[@]}" generate "${greedy[@]}" --ids="$prompt,61,62,63" > "$work/tier_b.json"
other=$(seq -s, 100 157)
"${small[@]}" generate "${greedy[@]}" --ids="$other" > /dev/null
sleep 0.3
"${tier_b[@]}" generate "${greedy[@]}" --ids="$other,61" > "$work/tier_other.json"
if "${small[@]}" generate "${greedy[@]}" --ids="$prompt" --state_out="$work/too_big.state" \
    > "$work/too_big.log" 2>&1; then
  fail "a state past --max_exported_state_bytes was returned"
fi
grep -q "INVALID_ARGUMENT" "$work/too_big.log" && grep -q "return_state" "$work/too_big.log" &&
  grep -q -- "--max_exported_state_bytes" "$work/too_big.log" ||
  fail "the refusal does not say why: $(cat "$work/too_big.log")"
"${small[@]}" generate "${greedy[@]}" --ids=5,6 --state_out="$work/small.state" > /dev/null ||
  fail "a state within the bound was refused"
$py - "$work" <<'PY' || fail "Granite through Redis"
import json, sys
work = sys.argv[1]
load = lambda name: json.load(open(f"{work}/{name}.json"))
b, reference, other = load("tier_b"), load("extended_nocache"), load("tier_other")
assert int(b["usage"]["cached_tokens"]) >= 58, b["usage"]
assert b["token_ids"] == reference["token_ids"], (b, reference)
assert int(other["usage"].get("cached_tokens", 0)) == 0, other["usage"]
print(f"   another replica reuses {b['usage']['cached_tokens']} tokens from Redis, greedy as "
      f"without it; a state past the bound is neither stored nor returned (INVALID_ARGUMENT)")
PY

echo "== the TorchScript backend serves the same packages to the same greedy tokens"
ts_models=(mamba2 lfm2 granite-untied)
for name in "${ts_models[@]}"; do
  "${ctl[@]}" generate --model="$name" --ids=5,257,17 --max_tokens=12 --temperature=0 \
    --ignore_eos --json > "$work/native_$name.json"
done
kill_servers
wait "$server_pid" 2> /dev/null || true
start_server "$work/server_ts.log" --backend=torchscript --metrics_port=-1 \
  --models="$work/mamba2.pt,$work/lfm2.pt,$work/granite-untied.pt"
ctl=("$ctl_bin" --server="127.0.0.1:$server_port" --timeout_s=120)
for name in "${ts_models[@]}"; do
  "${ctl[@]}" generate --model="$name" --ids=5,257,17 --max_tokens=12 --temperature=0 \
    --ignore_eos --json > "$work/scripted_$name.json"
done
$py - "$work" "${ts_models[@]}" <<'PY' || fail "TorchScript backend"
import json, sys
work = sys.argv[1]
for name in sys.argv[2:]:
    native, scripted = (json.load(open(f"{work}/{side}_{name}.json")) for side in ("native", "scripted"))
    assert native["token_ids"] == scripted["token_ids"], (name, native, scripted)
    print(f"   {name}: 12 greedy tokens, the same on both backends")
PY
echo "PASS"
