#!/usr/bin/env bash
# Client-held state between two real attn-server processes: a state written
# by one server (attnctl --state_out) and sent to the other (--state_in)
# continues exactly as one uninterrupted request over the same tokens; a
# conversation whose turns alternate between the two servers (attnctl chat
# --servers=A,B) prefills only each turn's new text; and a state of another
# model is refused with FAILED_PRECONDITION naming both fingerprints.
#   state_resumes_across_servers.sh ATTN_SERVER ATTNCTL [MODEL_DIR]
set -euo pipefail
server_bin=$1 ctl_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
models=${3:-$repo/models}
py=/usr/bin/python3
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
ports=()
for name in a b; do
  start_server "$work/server-$name.log" --models="$models/aft-decay.pt,$models/linear-decay.pt" \
    --default_model=aft-decay --metrics_port=-1
  ports+=("$server_port")
done
a=(--server=127.0.0.1:${ports[0]} --timeout_s=120) b=(--server=127.0.0.1:${ports[1]} --timeout_s=120)
greedy=(--temperature=0 --ignore_eos --max_tokens=24)

# 1. Generate on A with --state_out, continue on B with --state_in; the same
# continuation on A from the whole token sequence must give the same tokens.
"$ctl_bin" "${a[@]}" generate "${greedy[@]}" --prompt="In the beginning God created" \
  --state_out="$work/s1" --json > "$work/turn1.json"
"$ctl_bin" "${b[@]}" generate "${greedy[@]}" --prompt=" And the earth" --state_in="$work/s1" \
  --logprobs --json > "$work/turn2.json"
"$ctl_bin" "${a[@]}" tokenize --text=" And the earth" --json > "$work/more.json"
whole=$($py -c '
import json, sys
t1, more = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(",".join(str(i) for i in t1["state_token_ids"] + more["token_ids"]))' "$work/turn1.json" "$work/more.json")
"$ctl_bin" "${a[@]}" generate "${greedy[@]}" --ids="$whole" --logprobs --json > "$work/whole.json"
$py - "$work/turn2.json" "$work/whole.json" <<'PY'
import json, sys
resumed, whole = (json.load(open(p)) for p in sys.argv[1:3])
assert resumed["token_ids"] == whole["token_ids"], (resumed["token_ids"], whole["token_ids"])
worst = max(abs(x - y) for x, y in zip(resumed["logprobs"], whole["logprobs"]))
assert worst < 1e-4, worst
assert int(resumed["usage"]["cached_tokens"]) > 24, resumed["usage"]
print(f"PASS: resumed on the second server = uninterrupted, max |dlogprob| = {worst:.1e}")
PY

# 2. A chat alternating between the servers: after the first turn each
# prefills only its own text, the rest of the context coming with the state.
printf 'And God said, Let there be light\nAnd God saw the light\nAnd the evening\n' > "$work/turns"
"$ctl_bin" --servers=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} chat "${greedy[@]}" --json \
  < "$work/turns" > "$work/chat.jsonl"
$py - "$work/chat.jsonl" <<'PY'
import json, sys
turns = [json.loads(l) for l in open(sys.argv[1])]
assert [t["server"].split(":")[1] for t in turns][0] != turns[1]["server"].split(":")[1]
for t in turns[1:]:
    assert t["cached_tokens"] > 0 and t["prefilled_tokens"] == t["prompt_tokens"], t
print("PASS: three turns over two servers, prefilled per turn:",
      [t["prefilled_tokens"] for t in turns], "reused:", [t["cached_tokens"] for t in turns])
PY

# 3. A state of one model sent for another: FAILED_PRECONDITION, both named.
if "$ctl_bin" "${b[@]}" generate --model=linear-decay --prompt=" x" --state_in="$work/s1" \
    2> "$work/refused.txt"; then
  echo "FAIL: a state of aft-decay was accepted by linear-decay"; exit 1
fi
grep -q "FAILED_PRECONDITION" "$work/refused.txt" && grep -q "aft-decay-" "$work/refused.txt" &&
  grep -q "linear-decay-" "$work/refused.txt" || { cat "$work/refused.txt"; exit 1; }
echo "PASS: $(head -c 200 "$work/refused.txt")"
