#!/usr/bin/env bash
# The llama.cpp peer built from its public source and the same random weights
# on both sides, then scripts/bench/llama_peer.sh on them: one command from a
# fresh machine to every "against llama.cpp" row of docs/benchmarks.md.
#
#   scripts/bench/peer_models.sh SHAPE [SHAPE...]
#
# SHAPE: rwkv7-0.1b rwkv7-0.4b mamba2-130m lfm2-350m lfm2-1.2b
#        granite-4.0-h-350m granite-4.0-h-1b
#
# 1. llama.cpp: LLAMA_SRC holds its source; when it is absent, LLAMA_REPO is
#    cloned there at LLAMA_COMMIT (pinned: the build the recorded peer rows
#    used, which has the lfm2, granitehybrid, mamba2 and rwkv7
#    architectures). llama-bench and llama-server are built in
#    LLAMA_SRC/build (CPU, Release, GGML_NATIVE, no web UI), once.
# 2. Each SHAPE, once: random weights in the public layout
#    (tests/tools/hf_checkpoints.py, tests/tools/rwkv7_checkpoints.py),
#    attn-export's package, and llama.cpp's own converter's F32 and Q8_0 GGUF
#    of the same directory (scripts/bench/gguf_convert.py stands in for the
#    Python packages the converter imports and Debian lacks). The
#    vocabularies: a synthetic tokenizer.json for LFM2 and Granite, the real
#    GPT-NeoX one for Mamba-2 (llama.cpp's converter takes its built-in copy
#    of the same), a synthetic RWKV World file for RWKV-7.
# 3. Unless SETUP_ONLY=1: llama_peer.sh on each shape's three files. Its
#    variables pass through (ROUNDS, ENGINE, SERVING, CHAT, WEIGHTS,
#    SECONDS_EACH, LOGIT_BIAS, ...); scripts/bench/peer_table.py LOG turns
#    what it printed into one table of medians and ratios. Mamba-2's
#    LOGIT_BIAS, unless given, is scripts/bench/unprintable_bias.py's.
#
#   WORK_DIR (/tmp/attn-peer)   BUILD_DIR (build)   JOBS (nproc)
#   LLAMA_SRC (WORK_DIR/llama.cpp)   LLAMA_REPO, LLAMA_COMMIT (below)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n 2,31p "$0"; exit 2; }
work=${WORK_DIR:-/tmp/attn-peer}
build=${BUILD_DIR:-build}
llama_src=${LLAMA_SRC:-$work/llama.cpp}
llama_repo=${LLAMA_REPO:-https://github.com/unslothai/llama.cpp}
llama_commit=${LLAMA_COMMIT:-d32676d77426540327835040d5d3279728f0b4c8}
py=/usr/bin/python3
mkdir -p "$work"

for shape in "$@"; do
  case $shape in
    rwkv7-0.1b | rwkv7-0.4b | mamba2-130m | lfm2-350m | lfm2-1.2b | granite-4.0-h-350m | granite-4.0-h-1b) ;;
    *) echo "unknown shape '$shape'; one of: rwkv7-0.1b rwkv7-0.4b mamba2-130m lfm2-350m" \
         "lfm2-1.2b granite-4.0-h-350m granite-4.0-h-1b" >&2; exit 2 ;;
  esac
done
for tool in "$build/export/attn-export" "$build/bench/backend/attn-backend-bench" "$build/server/attn-server"; do
  [ -x "$tool" ] || { echo "$tool is missing: build the project first (bash scripts/test.sh or cmake --build $build)" >&2; exit 2; }
done

if [ ! -f "$llama_src/CMakeLists.txt" ]; then
  echo "== cloning $llama_repo at $llama_commit into $llama_src"
  git clone -q "$llama_repo" "$llama_src"
  git -C "$llama_src" checkout -q "$llama_commit"
fi
if [ ! -x "$llama_src/build/bin/llama-server" ] || [ ! -x "$llama_src/build/bin/llama-bench" ]; then
  echo "== building llama.cpp's llama-bench and llama-server (about 15 minutes on 2 cores)"
  cmake -S "$llama_src" -B "$llama_src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF > "$work/llama-cmake.log"
  cmake --build "$llama_src/build" -j "${JOBS:-$(nproc)}" --target llama-bench llama-server > "$work/llama-build.log" ||
    { tail -20 "$work/llama-build.log"; exit 1; }
fi

# convert DIR OUT_PREFIX: F32 and Q8_0 GGUF of the checkpoint DIR.
convert() {
  local type
  for type in f32 q8_0; do
    [ -f "$2-$type.gguf" ] && continue
    $py scripts/bench/gguf_convert.py "$llama_src" -- "$1" --outtype "$type" --outfile "$2-$type.gguf" \
      > "$work/convert.log" 2>&1 || { tail -20 "$work/convert.log"; exit 1; }
  done
}

# prepare SHAPE: the checkpoint, the package and the two GGUF files.
prepare() {
  local shape=$1 dir=$work/$1 vocab=()
  [ -f "$dir.pt" ] && [ -f "$dir-f32.gguf" ] && [ -f "$dir-q8_0.gguf" ] && return 0
  echo "== $shape: random weights, attn-export, llama.cpp's converter"
  rm -rf "$dir"
  case $shape in
    rwkv7-0.1b | rwkv7-0.4b)
      local size=(--d 768 --layers 12 --ffn 3072 --ranks "64,64,32,128")
      [ "$shape" = rwkv7-0.1b ] || size=(--d 1024 --layers 24 --ffn 4096 --ranks "64,64,32,160")
      $py tests/tools/rwkv7_checkpoints.py write --layout hf --also-bin --head 64 --vocab 65536 "${size[@]}" \
        --out "$dir"
      $py tests/tools/rwkv7_checkpoints.py vocab --out "$dir/rwkv_vocab_v20230424.txt" --size 65535
      vocab=(--tokenizer="$dir/rwkv_vocab_v20230424.txt")
      convert "$dir" "$dir" ;;
    mamba2-130m)
      $py tests/tools/hf_checkpoints.py write --family mamba2 --shape "$shape" --out "$dir" \
        --tokenizer tests/data/tokenizers/gpt-neox-20b/tokenizer.json
      # The converter is given the directory without its tokenizer.json and
      # writes its own GPT-NeoX vocabulary (it has no hash for this file).
      mkdir -p "$dir-weights"
      ln -sf "$dir/config.json" "$dir/model.safetensors" "$dir-weights/"
      convert "$dir-weights" "$dir" ;;
    *)
      [ -f "$work/tokenizer.json" ] || $py tests/tools/hf_checkpoints.py tokenizer --out "$work/tokenizer.json"
      $py tests/tools/hf_checkpoints.py write --family "${shape%%-*}" --shape "$shape" --out "$dir" \
        --tokenizer "$work/tokenizer.json"
      convert "$dir" "$dir" ;;
  esac
  "$build/export/attn-export" --input="$dir" "${vocab[@]}" --output="$dir.pt"
}

for shape in "$@"; do prepare "$shape"; done
[ "${SETUP_ONLY:-0}" = 1 ] && exit 0
for shape in "$@"; do
  echo "=== $shape"
  # Random weights over the real GPT-NeoX vocabulary sample its 484 byte
  # tokens that are not UTF-8 alone and its 11 padding ids, which
  # llama-server answers with HTTP 500; both sides leave them out.
  bias=${LOGIT_BIAS:-}
  [ "$shape" != mamba2-130m ] || [ -n "$bias" ] ||
    bias=$($py scripts/bench/unprintable_bias.py "$work/$shape" --pad)
  LLAMA_BIN="$llama_src/build/bin" BUILD_DIR="$build" LOGIT_BIAS="$bias" \
    scripts/bench/llama_peer.sh "$work/$shape.pt" "$work/$shape-f32.gguf" "$work/$shape-q8_0.gguf"
done
