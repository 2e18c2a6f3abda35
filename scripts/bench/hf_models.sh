#!/usr/bin/env bash
# Mamba-2, RWKV-4, LFM2 and Granite 4.0-H at the public shapes of
# mamba2-130m, rwkv-4-169m, LFM2-350M and granite-4.0-h-350m (random
# weights: weights do not change speed; any shape hf_checkpoints.py knows
# runs through SHAPES), and
# tokenizer.json throughput against tokenizers.js, for
# docs/benchmarks-log.md.
#
#   scripts/bench/hf_models.sh [WORK_DIR]
#
# Writes the checkpoints with tests/tools/hf_checkpoints.py, exports them
# with attn-export, times batch-1 decode, 16 and 64 rows and a 512-token
# prefill with attn-backend-bench (float32 and int8 weights), prints the
# state bytes per sequence, then encodes the same ~1 MB of text with
# attn-tokenize-json and with tokenizers.js (median of five passes each).
#   BUILD_DIR  (build)   NODE_TOOLS  (BUILD_DIR/node-tools)   REPEATS (40)
#   SHAPES  (mamba2-130m rwkv4-169m lfm2-350m)   TOKENIZERS (1; 0 skips them)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
node_tools=${NODE_TOOLS:-$build/node-tools}
repeats=${REPEATS:-40}
work=${1:-/tmp/attn-hf-bench}
mkdir -p "$work"
py=/usr/bin/python3
tool=tests/tools/hf_checkpoints.py

echo "== machine"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*\(avx512f\).*/Flags: ... avx512f .../'

$py "$tool" tokenizer --out "$work/tokenizer.json"
for shape in ${SHAPES:-mamba2-130m rwkv4-169m lfm2-350m}; do
  family=${shape%%-*}
  if [ ! -f "$work/$shape.pt" ]; then
    echo "== writing $shape (random weights) and exporting it"
    $py "$tool" write --family "$family" --shape "$shape" --out "$work/$shape" \
      --tokenizer "$work/tokenizer.json"
    "$build/export/attn-export" --input="$work/$shape" --output="$work/$shape.pt"
  fi
  echo "== $shape: attn-backend-bench (float32 and int8 weights)"
  "$build/bench/backend/attn-backend-bench" --model="$work/$shape.pt" --backends=native,int8 \
    --batch=1,16,64 --repeats="$repeats" --prefill_repeats=3 --prefill_tokens=512
done

[ "${TOKENIZERS:-1}" = 1 ] || exit 0
echo "== tokenizer.json throughput (the same text, median of five passes)"
for i in $(seq 1 12); do cat README.md docs/*.md; done > "$work/text.txt"
"$build/tests/attn-tokenize-json" "$work/tokenizer.json" --bench "$work/text.txt" 1
if [ ! -d "$node_tools/node_modules/@huggingface/tokenizers" ]; then
  npm install --silent --no-audit --no-fund --prefix "$node_tools" @huggingface/tokenizers@0.2 > /dev/null
fi
cp scripts/bench/tokenizer_bench.mjs "$node_tools/"
node "$node_tools/tokenizer_bench.mjs" "$work/tokenizer.json" "$work/text.txt"
