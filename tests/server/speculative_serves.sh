#!/usr/bin/env bash
# Speculative decoding in the real attn-server: the bundled default model
# served with --speculative=ngram, and drafted for by the bundled aft-decay
# (--draft_model), streams, for prompts that quote themselves, the greedy
# and the seeded sampled tokens, and the logprobs, a server without it
# streams (within 1e-4: a prefill's rounding differs from a step's), and
# /metrics counts drafted, accepted and rejected tokens (drafted = accepted
# + rejected, some drafted) in an exposition promtool accepts; two streams
# at once give what each gives alone, with either drafter; an attention
# model (the bundled mha-alibi) drafted for by aft-decay gives its greedy
# tokens. A
# --draft_model that names no served package stops the start, naming it.
#   speculative_serves.sh ATTN_SERVER ATTNCTL
set -euo pipefail
server_bin=$1 ctl_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
model=$repo/models/rwkv7.pt
py=/usr/bin/python3
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
use_binaries "$server_bin" "$ctl_bin"
trap 'kill_servers; rm -rf "$work"' EXIT
start_server "$work/plain.log" --models="$model,$repo/models/mha-alibi.pt" --metrics_port=-1
plain_port=$server_port
start_server "$work/spec.log" --models="$model" --speculative=ngram --draft_tokens=6
spec_port=$server_port spec_metrics=$metrics_port
# aft-decay costs as much as the models it drafts for, so it could never pay
# for reading their prompts (--draft_prefill_share's 3% of an 80-token
# answer); this test is about the tokens, so it may.
start_server "$work/draft.log" --models="$model,$repo/models/aft-decay.pt,$repo/models/mha-alibi.pt" \
  --draft_model=aft-decay --draft_tokens=4 --draft_prefill_share=100
draft_port=$server_port draft_metrics=$metrics_port
for drafted in rwkv7 mha-alibi; do
  grep -q "$drafted drafts with aft-decay" "$work/draft.log" || { cat "$work/draft.log"; exit 1; }
done
if "$server_bin" --models="$model" --draft_model=nosuch --port=0 --http_port=-1 --metrics_port=-1 \
    > "$work/bad.log" 2>&1; then
  echo "FAIL: a --draft_model naming no package started"; exit 1
fi
grep -q -- "--draft_model: nosuch names no package" "$work/bad.log" || { cat "$work/bad.log"; exit 1; }

verse="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep."
prompts=("$verse And God said, Let there be light: and there was light. $verse"
         "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures. The LORD is my shepherd; I shall"
         "And he said unto them, Go ye into all the world. And he said unto them,")
# Each prompt greedy, then sampled with a seed (temperature 0.8, top_p 0.95).
sampling=("--temperature=0" "--temperature=0.8 --top_p=0.95 --seed=11")
for run in 0 1 2 3 4 5; do
  i=$((run % 3))
  for side in plain spec draft; do
    port=$plain_port
    [ "$side" = spec ] && port=$spec_port
    [ "$side" = draft ] && port=$draft_port
    # shellcheck disable=SC2086  # the sampling flags split into words
    "$ctl_bin" --server=127.0.0.1:$port --timeout_s=120 stream --prompt="${prompts[$i]}" \
      --max_tokens=80 ${sampling[$((run / 3))]} --ignore_eos --logprobs --json \
      > "$work/$side-$run.jsonl"
  done
  for side in spec draft; do
  $py - "$work/plain-$run.jsonl" "$work/$side-$run.jsonl" <<'PY'
import json, sys
def read(path):
    stream = [json.loads(l) for l in open(path)]
    return ([t for m in stream for t in m.get("token_ids", [])],
            [x for m in stream for x in m.get("logprobs", [])])
plain_ids, plain_lp = read(sys.argv[1])
spec_ids, spec_lp = read(sys.argv[2])
assert len(plain_ids) == 80, len(plain_ids)
assert spec_ids == plain_ids, f"tokens differ:\n{plain_ids}\n{spec_ids}"
worst = max(abs(a - b) for a, b in zip(plain_lp, spec_lp))
assert len(spec_lp) == 80 and worst < 1e-4, f"max |logprob difference| = {worst}"
PY
  done
done

# An attention model drafts with the draft model too (its key/value cache
# rolls back by length): greedy tokens as without it.
for i in 0 1 2; do
  for side in plain draft; do
    port=$plain_port
    [ "$side" = draft ] && port=$draft_port
    "$ctl_bin" --server=127.0.0.1:$port --timeout_s=120 --model=mha-alibi generate \
      --prompt="${prompts[$i]}" --max_tokens=80 --temperature=0 --ignore_eos --json \
      > "$work/$side-kv-$i.json"
  done
  $py - "$work/plain-kv-$i.json" "$work/draft-kv-$i.json" <<'PY'
import json, sys
plain, drafted = (json.load(open(path))["token_ids"] for path in sys.argv[1:])
assert len(plain) == 80 and drafted == plain, f"tokens differ:\n{plain}\n{drafted}"
PY
done

# Two streams at once (a decode batch of two: n-gram lookup drafts for
# both together, the draft model for neither): each greedy output is what
# plain decoding gives it alone.
for k in 0 1; do
  "$ctl_bin" --server=127.0.0.1:$plain_port --timeout_s=120 generate --prompt="${prompts[$k]}" \
    --max_tokens=400 --temperature=0 --ignore_eos --json > "$work/plain-pair-$k.json"
done
for side in spec draft; do
  port=$spec_port
  [ "$side" = draft ] && port=$draft_port
  pair=()
  for k in 0 1; do
    "$ctl_bin" --server=127.0.0.1:$port --timeout_s=120 generate --prompt="${prompts[$k]}" \
      --max_tokens=400 --temperature=0 --ignore_eos --json > "$work/$side-pair-$k.json" &
    pair+=($!)
  done
  wait "${pair[@]}"
  for k in 0 1; do
    $py - "$work/plain-pair-$k.json" "$work/$side-pair-$k.json" <<'PY'
import json, sys
plain, spec = (json.load(open(path))["token_ids"] for path in sys.argv[1:])
assert len(plain) == 400 and spec == plain, f"tokens differ:\n{plain}\n{spec}"
PY
  done
done

for side in spec draft; do
  port=$spec_metrics
  [ "$side" = draft ] && port=$draft_metrics
  curl -sf "http://127.0.0.1:$port/metrics" > "$work/metrics-$side.txt"
  promtool check metrics < "$work/metrics-$side.txt" > "$work/promtool.txt" 2>&1 \
    || { cat "$work/promtool.txt"; exit 1; }
  models=rwkv7
  [ "$side" = draft ] && models="rwkv7 mha-alibi"
  for m in $models; do
    $py - "$work/metrics-$side.txt" "$side" "$m" <<'PY'
import re, sys
text, side, model = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
def value(kind):
    m = re.search(r'^attn_spec_decode_num_%s_tokens_total\{model="%s"\} (\S+)$' % (kind, model),
                  text, re.M)
    assert m, f"no attn_spec_decode_num_{kind}_tokens_total for {model}"
    return float(m.group(1))
drafted, accepted, rejected = value("draft"), value("accepted"), value("rejected")
assert drafted > 0 and drafted == accepted + rejected, (model, drafted, accepted, rejected)
print(f"PASS ({side}, {model}): greedy tokens equal with and without speculation; "
      f"drafted {drafted:.0f}, accepted {accepted:.0f}, rejected {rejected:.0f}")
PY
  done
done
