#!/usr/bin/env bash
# Encoding throughput of every real tokenizer.json the tests use
# (tests/data/tokenizers/SOURCES.tsv): this project's against tokenizers.js
# on the same text (the README and docs, twelve times, line by line), median
# of five passes each, side by side in one run, for docs/benchmarks-log.md.
#   scripts/bench/tokenizers.sh [WORK_DIR]
#   BUILD_DIR  (build)   NODE_TOOLS  (BUILD_DIR/node-tools)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
node_tools=${NODE_TOOLS:-$build/node-tools}
work=${1:-/tmp/attn-tokenizer-bench}
mkdir -p "$work" "$node_tools"
node_tools=$(cd "$node_tools" && pwd)

echo "== machine"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*\(avx512f\).*/Flags: ... avx512f .../'
if [ ! -d "$node_tools/node_modules/@huggingface/tokenizers" ]; then
  npm install --silent --no-audit --no-fund --prefix "$node_tools" @huggingface/tokenizers@0.2 > /dev/null
fi
cp scripts/bench/tokenizer_bench.mjs "$node_tools/"
. tests/text/real_tokenizers.sh
real_tokenizers "$work" "$node_tools"
for i in $(seq 1 12); do cat README.md docs/*.md; done > "$work/text.txt"
printf '| tokenizer | this project MB/s | tokenizers.js MB/s | ratio | tokens |\n| --- | --- | --- | --- | --- |\n'
for name in "${real_tokenizers[@]}"; do
  ours=$("$build/tests/attn-tokenize-json" "$work/$name.json" --bench "$work/text.txt" 1)
  theirs=$(node "$node_tools/tokenizer_bench.mjs" "$work/$name.json" "$work/text.txt")
  /usr/bin/python3 - "$name" "$ours" "$theirs" <<'PY'
import json, sys
name, ours, theirs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
assert ours["tokens"] == theirs["tokens"], (ours, theirs)
print(f"| {name} | {ours['mb_per_s']:.2f} | {theirs['mb_per_s']:.2f} | "
      f"{ours['mb_per_s'] / theirs['mb_per_s']:.1f}x | {ours['tokens']:,} |")
PY
done
