#!/usr/bin/env bash
# Fidelity at long context: the bundled default model, served by the real
# attn-server, streams greedy tokens from a 4,096-token prompt out to 8,192
# tokens; every streamed logprob equals Score's logprob of the same token in
# the whole 8,192-token sequence within 1e-4. The stream runs the chunked
# prefill and then 4,096 recurrent steps; Score runs the prefill over all of
# it, so this holds only if the two forms agree far past the training length.
# DEVICE (cpu) serves from another device: scripts/gpu/device_run.sh runs it
# on a GPU, where the stream replays CUDA graphs and a capture that fails
# fails the test.
#   long_stream_matches_score.sh ATTN_SERVER ATTNCTL [MODEL]
#   DEVICE (cpu)   PYTHON (/usr/bin/python3, else python3 on PATH)
set -euo pipefail
server_bin=$1 ctl_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
model=${3:-$repo/models/rwkv7.pt}
device=${DEVICE:-cpu}
py=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)}
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
start_server "$work/server.log" --models="$model" --device="$device" --metrics_port=-1 \
  --max_prompt_tokens=8192 --max_tokens=8192
ctl=("$ctl_bin" --server=127.0.0.1:$server_port --timeout_s=600)
# A prompt of the model's own text: its tokenizer over the repository's README.
# (a file: the text is longer than one command-line argument may be).
cat "$repo/README.md" "$repo/docs/"*.md > "$work/text.txt"
"${ctl[@]}" tokenize --text_file="$work/text.txt" --json > "$work/text.json"
prompt=$($py -c '
import json, sys
ids = json.load(open(sys.argv[1]))["token_ids"]
assert len(ids) >= 4096, len(ids)
print(",".join(str(i) for i in ids[:4096]))' "$work/text.json")
"${ctl[@]}" stream --ids="$prompt" --max_tokens=4096 --temperature=0 --ignore_eos --logprobs \
  --json > "$work/stream.jsonl"
ids=$($py -c '
import json, sys
stream = [json.loads(l) for l in open(sys.argv[1])]
print(sys.argv[2] + "," + ",".join(str(t) for m in stream for t in m.get("token_ids", [])))' \
  "$work/stream.jsonl" "$prompt")
"${ctl[@]}" score --ids="$ids" --json > "$work/score.json"
$py - "$work/stream.jsonl" "$work/score.json" <<'PY'
import json, sys
stream = [json.loads(l) for l in open(sys.argv[1])]
streamed = [x for m in stream for x in m.get("logprobs", [])]
scored = json.load(open(sys.argv[2]))["logprobs"]
assert len(streamed) == 4096 and len(scored) == 8192, (len(streamed), len(scored))
worst = max(abs(a - b) for a, b in zip(streamed, scored[4096:]))
assert worst < 1e-4, f"max |stream - score| = {worst}"
print(f"PASS: 4096 streamed tokens after a 4096-token prompt, max |stream - score| = {worst:.2e}")
PY
if grep -h "CUDA graphs off" "$work/server.log"; then exit 1; fi
