#!/usr/bin/env bash
# Speculative decoding (docs/benchmarks.md "Speculative decoding"): STREAMS
# streams of one prompt at a time (1: batch 1), greedy or seeded, against
# two attn-server processes
# over the same package, one plain and one speculating, in alternating
# rounds: with --speculative=ngram, or with DRAFT_MODEL (a package served
# beside MODEL as --draft_model, quantised as DRAFT_QUANTIZE says; MODEL's
# own package under another name with DRAFT_QUANTIZE=int8 drafts by its
# int8 twin). Per prompt: median tokens/s of each side, their ratio,
# whether the tokens were identical, and the drafts' acceptance. Times are
# the servers' own (attn_e2e_request_latency_seconds, prefill included),
# acceptance from the speculative server's counters; with several streams
# tokens/s is each stream's (the latencies' mean). MIXED="edit open" (any
# of the prompts' names) runs those prompts at once instead, one stream
# each (three need EXTRA_FLAGS=--speculative_max_batch=3 to draft), and
# times each stream by its client's wall time (attnctl's start-up included
# on both sides); drafts are then counted per batch.
#   MODEL=models/rwkv7.pt TOKENS=256 ROUNDS=3 QUANTIZE=none DRAFT_TOKENS=8 TEMPERATURE=0 STREAMS=1 \
#     [MIXED="NAME ..."] [DRAFT_MODEL=PATH DRAFT_QUANTIZE=none SPECULATIVE=off] scripts/bench/speculative.sh
# Prompts: "quote" repeats a passage and asks for it again (extraction, a
# quoting answer), "edit" is a C function to be rewritten with one change,
# "open" is text that does not repeat (drafts only from chance matches).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-models/rwkv7.pt}
TOKENS=${TOKENS:-256}
ROUNDS=${ROUNDS:-3}
QUANTIZE=${QUANTIZE:-none}
DRAFT_TOKENS=${DRAFT_TOKENS:-8}
DRAFT_MODEL=${DRAFT_MODEL:-}
DRAFT_QUANTIZE=${DRAFT_QUANTIZE:-none}
SPECULATIVE=${SPECULATIVE:-$([ -n "$DRAFT_MODEL" ] && echo off || echo ngram)}
TEMPERATURE=${TEMPERATURE:-0}  # above 0: seeded sampling (--seed=7)
STREAMS=${STREAMS:-1}
MIXED=${MIXED:-}
BUILD_DIR=${BUILD_DIR:-build}
EXTRA_FLAGS=${EXTRA_FLAGS:-}  # more attn-server flags for both sides (--backend=torchscript)
OUT=${OUT:-/tmp/attn-speculative}
py=/usr/bin/python3
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT/runs.jsonl"
cmake --build "$BUILD_DIR" --target attn-server attnctl > /dev/null
ctl_bin=$BUILD_DIR/client/attnctl
. scripts/lib/local_server.sh
use_binaries "$BUILD_DIR/server/attn-server" "$ctl_bin"
trap kill_servers EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
common=(--models="$MODEL" --quantize="$QUANTIZE" --max_tokens=4096 --state_cache=off $EXTRA_FLAGS)
start_server "$OUT/plain.log" "${common[@]}"
plain_port=$server_port plain_metrics=$metrics_port
speculating=(--speculative="$SPECULATIVE" --draft_tokens="$DRAFT_TOKENS")
if [ -n "$DRAFT_MODEL" ]; then
  draft=$(basename "$DRAFT_MODEL" .pt)
  speculating+=(--models="$MODEL,$DRAFT_MODEL" --quantize="$QUANTIZE,$draft=$DRAFT_QUANTIZE"
                --draft_model="$draft" --default_model="$(basename "$MODEL" .pt)")
fi
start_server "$OUT/spec.log" "${common[@]}" "${speculating[@]}"
spec_port=$server_port spec_metrics=$metrics_port

quote="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the light from the darkness."
edit='int sum_positive(const int *values, int count) {
  int total = 0;
  for (int i = 0; i < count; ++i) {
    if (values[i] > 0) total += values[i];
  }
  return total;
}
/* The same function, renamed sum_negative, adding the values below zero: */
int sum_'
open_text="Of the making of many books there is no end; and much study is a weariness of the flesh. Let us hear the conclusion of the whole matter:"
names=(quote edit open)
prompts=("$quote Repeat it. $quote" "$edit" "$open_text")

metric() {  # metric PORT REGEX: the value of the first series REGEX matches
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v k="$2" '$1 ~ "^"k && !found {print $2; found = 1}'
}
model_label=$(basename "$MODEL" .pt)
counter() { metric "$spec_metrics" "attn_spec_decode_num_${1}_tokens_total[{]model=\"$model_label\""; }
# The server's own time from a request's arrival to its end (attnctl's
# start-up, most of a short request's wall time, left out).
served() { metric "$1" "attn_e2e_request_latency_seconds_sum[{]model=\"$model_label\",protocol=\"grpc\""; }
# generate PORT I FILE: prompt I's output, as JSON, to FILE.
generate() {
  "$ctl_bin" --server="127.0.0.1:$1" --timeout_s=600 generate --prompt="${prompts[$2]}" \
    --max_tokens="$TOKENS" --temperature="$TEMPERATURE" --seed=7 --ignore_eos --json > "$3"
}
# timed PORT I FILE: generate, and its wall seconds to FILE.seconds.
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  generate "$@"
  t1=$(date +%s.%N)
  awk "BEGIN {print $t1 - $t0}" > "$3.seconds"
}
# mixed_round ROUND: the prompts MIXED names at once on each side.
mixed_round() {
  local side port clients i drafted accepted mixed=()
  for i in "${!names[@]}"; do
    [[ " $MIXED " == *" ${names[$i]} "* ]] && mixed+=("$i")
  done
  for side in plain spec; do
    port=$plain_port
    [ "$side" = spec ] && port=$spec_port
    drafted=$(counter draft) accepted=$(counter accepted)
    clients=()
    for i in "${mixed[@]}"; do
      timed "$port" "$i" "$OUT/$side-${names[$i]}-$1-1.json" &
      clients+=($!)
    done
    wait "${clients[@]}"
    for i in "${mixed[@]}"; do
      echo "{\"prompt\": \"${names[$i]}\", \"side\": \"$side\", \"round\": $1," \
        "\"seconds\": $(cat "$OUT/$side-${names[$i]}-$1-1.json.seconds"), \"drafted\": 0, \"accepted\": 0}" \
        >> "$OUT/runs.jsonl"
    done
    [ "$side" = spec ] && echo "{\"batch\": $1, \"drafted\": $(awk "BEGIN {print $(counter draft) - $drafted}")," \
      "\"accepted\": $(awk "BEGIN {print $(counter accepted) - $accepted}")}" >> "$OUT/batches.jsonl"
  done
}
rm -f "$OUT/batches.jsonl"
[ -n "$MIXED" ] && STREAMS=1
for ((round = 1; round <= ROUNDS; round++)); do
  if [ -n "$MIXED" ]; then
    mixed_round "$round"
    continue
  fi
  # Which side goes first alternates between rounds, so that a drift in
  # the machine's speed does not favour one side.
  sides=(plain spec)
  ((round % 2 == 0)) && sides=(spec plain)
  for i in "${!names[@]}"; do
    for side in "${sides[@]}"; do
      port=$plain_port mport=$plain_metrics
      [ "$side" = spec ] && port=$spec_port mport=$spec_metrics
      drafted=$(counter draft) accepted=$(counter accepted)
      start=$(served "$mport")
      clients=()
      for ((k = 1; k <= STREAMS; k++)); do
        generate "$port" "$i" "$OUT/$side-${names[$i]}-$round-$k.json" &
        clients+=($!)
      done
      wait "${clients[@]}"
      end=$(served "$mport")
      echo "{\"prompt\": \"${names[$i]}\", \"side\": \"$side\", \"round\": $round, \"seconds\": $(awk "BEGIN {print ($end - $start) / $STREAMS}")," \
        "\"drafted\": $(awk "BEGIN {print $(counter draft) - $drafted}"), \"accepted\": $(awk "BEGIN {print $(counter accepted) - $accepted}")}" \
        >> "$OUT/runs.jsonl"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
$py - "$OUT" "$TOKENS" "$ROUNDS" "$STREAMS" <<'PY'
import json, os, statistics, sys
out, tokens, rounds, streams = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl"))]
print(f"| prompt | plain tokens/s | speculative tokens/s | ratio | drafted | accepted | same tokens |")
print(f"|---|---|---|---|---|---|---|")
for name in ("quote", "edit", "open"):
    if not any(r["prompt"] == name for r in runs):
        continue
    rate = {s: statistics.median(tokens / r["seconds"] for r in runs
                                 if r["prompt"] == name and r["side"] == s) for s in ("plain", "spec")}
    spec = [r for r in runs if r["prompt"] == name and r["side"] == "spec"]
    drafted, accepted = sum(r["drafted"] for r in spec), sum(r["accepted"] for r in spec)
    same = all(json.load(open(os.path.join(out, f"plain-{name}-{k}-{j}.json")))["token_ids"] ==
               json.load(open(os.path.join(out, f"spec-{name}-{k}-{j}.json")))["token_ids"]
               for k in range(1, rounds + 1) for j in range(1, streams + 1))
    print(f"| {name} | {rate['plain']:.1f} | {rate['spec']:.1f} | {rate['spec'] / rate['plain']:.2f}x"
          f" | {drafted:.0f} | {accepted:.0f} ({accepted / max(drafted, 1):.0%}) | {'yes' if same else 'NO'} |")
batches = os.path.join(out, "batches.jsonl")
if os.path.exists(batches):
    b = [json.loads(l) for l in open(batches)]
    drafted, accepted = sum(x["drafted"] for x in b), sum(x["accepted"] for x in b)
    print(f"the prompts at once: drafted {drafted:.0f}, accepted {accepted:.0f}"
          f" ({accepted / max(drafted, 1):.0%}); tokens/s from each client's wall time")
PY
