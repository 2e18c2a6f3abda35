#!/usr/bin/env bash
# What --quantize=int8 (or QUANT=bf16) costs in quality, through the real
# attn-server: two servers on loopback, one float32 and one quantised, score
# the same held-out text
# (WINDOWS windows of TOKENS tokens from the last 4% of the King James Bible,
# the held-out part of the bundled models' training text) and generate
# GREEDY tokens greedily from one prompt. Prints a markdown table: held-out
# perplexity of each model both ways, its change, and the first position
# where the greedy tokens differ (docs/benchmarks-log.md holds the recorded one).
#
#   QUANT      the quantisation compared with float32: int8 or bf16 (default int8)
#   MODELS     comma-separated packages (default: every models/*.pt)
#   TOKENS     tokens scored per window (default 2048)
#   WINDOWS    windows of the held-out text (default 4)
#   GREEDY     greedy tokens compared (default 256)
#   BUILD_DIR  build directory holding attn-server and attnctl (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/local_server.sh

BUILD_DIR=${BUILD_DIR:-build}
QUANT=${QUANT:-int8}
TOKENS=${TOKENS:-2048}
WINDOWS=${WINDOWS:-4}
GREEDY=${GREEDY:-256}
MODELS=${MODELS:-$(ls models/*.pt | paste -sd, -)}
cmake --build "$BUILD_DIR" --target attn-server attnctl >/dev/null
work=$(mktemp -d)
use_binaries "$BUILD_DIR/server/attn-server" "$BUILD_DIR/client/attnctl"
cleanup() {
  kill_servers
  rm -rf "$work"
}
trap cleanup EXIT

heldout_bible "$work/heldout.txt"
cut_windows "$work/heldout.txt" "$WINDOWS" $((TOKENS * 5)) "$work/window"  # about 5 characters a token

declare -A port
for q in none "$QUANT"; do
  start_server "$work/server-$q.log" --models="$MODELS" --metrics_port=-1 --quantize="$q" \
    --max_prompt_tokens="$TOKENS"
  port[$q]=$server_port
done
ctl() { "$BUILD_DIR/client/attnctl" --server="127.0.0.1:${port[$1]}" --timeout_s=600 "${@:2}"; }

echo "| model | float32 perplexity | $QUANT perplexity | change | first greedy difference (of $GREEDY) |"
echo "| --- | --- | --- | --- | --- |"
IFS=, read -ra packages <<< "$MODELS"
for package in "${packages[@]}"; do
  model=$(basename "$package" .pt)
  for q in none "$QUANT"; do
    for ((w = 0; w < WINDOWS; w++)); do
      echo "   $model ($q): window $((w + 1))/$WINDOWS" >&2
      ctl "$q" score --model="$model" --text_file="$work/window$w.txt" --score_tokens="$TOKENS" \
        --segments=$((TOKENS / 2)) | grep '^all' >> "$work/$model.$q.scores"
    done
    ctl "$q" generate --model="$model" --prompt="And it came to pass" --max_tokens="$GREEDY" \
      --ignore_eos --temperature=0 --json > "$work/$model.$q.json"
  done
  /usr/bin/python3 - "$work/$model" "$model" "$QUANT" <<'PY'
import json, math, sys
base, model, quant = sys.argv[1], sys.argv[2], sys.argv[3]
def perplexity(q):
    tokens = logprob = 0.0
    for line in open(f"{base}.{q}.scores"):  # all N tokens: total_logprob L perplexity P
        fields = line.split()
        tokens += float(fields[1]); logprob += float(fields[4])
    return math.exp(-logprob / tokens)
def ids(q):
    return [int(t) for t in json.load(open(f"{base}.{q}.json"))["token_ids"]]
f, q = perplexity("none"), perplexity(quant)
a, b = ids("none"), ids(quant)
first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"| {model} | {f:.3f} | {q:.3f} | {100 * (q / f - 1):+.2f}% | "
      f"{'none' if first is None else f'token {first}'} |")
PY
done
