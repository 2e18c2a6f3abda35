#!/usr/bin/env bash
# Reproduces the bundled models under models/ from scratch: fetches public-
# domain English text from Debian packages (the King James Bible from
# bible-kjv, the fortunes from fortunes-min and fortunes), trains each model
# with attn-train from its recipe below, and prints a sample of each. The text
# is fetched at training time and never committed.
#
# Every package in models/ has a recipe here (tests/docs/check_docs.py checks
# that each recipe describes exactly its package's config), and so does
# every mixer kind attn-train knows: a kind without a bundled package gets
# the long-context recipe at the bundled size, so that any kind can be
# trained and compared on the same text.
#
#   MODELS          which to train (default: the bundled five, BUNDLED below)
#   STEPS           optimizer steps per model (default 1000, as bundled; on an
#                   otherwise idle 2-core machine about 2,900 tokens/s for
#                   aft-conv, 5,000 for linear-decay: 24 and 14 minutes)
#   BUILD_DIR       build directory holding attn-train (default: build)
#   PRINT_RECIPES=1 print "NAME: ATTN-TRAIN FLAGS" for each of MODELS and
#                   exit; nothing is installed or trained (needs attn-train
#                   built, which checks each name is a mixer kind)
#
# Recipes. Every model: d_model 160, 4 layers, 4 heads, feed-forward 640,
# RMSNorm, no position embedding, 4096-piece SentencePiece vocabulary, batch
# 16 x 256 tokens (4,096 tokens per step), AdamW at lr 3e-3 with 100 warm-up
# steps, seed 1: about 1.9M parameters (2.05M for rwkv7, whose block has
# more vectors and low-rank projections), so the five packages stay under 40 MB.
#   long-context (aft-decay, linear-decay, mha-alibi, rwkv7 with its
#     LayerNorms, any unbundled kind):
#     a length curriculum (256-token sequences to 60% of the steps, 1024 to
#     80%, 2048 to the end, same tokens per step) on the fortunes followed by
#     the Bible, so that the held-out 5% is the end of the Bible: 109K tokens
#     of continuous text none of them trained on, which
#     scripts/bench/context_curve.sh scores up to 8,192 tokens.
#   earlier (aft-conv, kept to compare): 256-token sequences only, the Bible
#     first, so that the held-out 5% is the end of the fortunes.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUNDLED="rwkv7 aft-decay linear-decay mha-alibi aft-conv"
STEPS=${STEPS:-1000}
MODELS=${MODELS:-$BUNDLED}
BUILD_DIR=${BUILD_DIR:-build}
CORPUS_DIR=${CORPUS_DIR:-/tmp/attn-corpus}  # where the text is prepared

common=(--d_model=160 --layers=4 --heads=4 --ff_hidden=640 --norm=rmsnorm --positions=none
        --vocab_size=4096 --seq_len=256 --batch=16 --steps="$STEPS" --lr=3e-3 --warmup=100
        --eval_every=250 --seed=1)
# Stage ends at 60% and 80% of the steps: 600 and 800 of 1000.
long_context=(--corpus="$CORPUS_DIR/fortunes.txt,$CORPUS_DIR/bible.txt"
              --curriculum="256:$((STEPS * 6 / 10)),1024:$((STEPS * 8 / 10)),2048:$STEPS")
earlier=(--corpus="$CORPUS_DIR/bible.txt,$CORPUS_DIR/fortunes.txt")

# recipe NAME: sets `flags` to the attn-train flags that make package NAME.
recipe() {
  case "$1" in
    aft-decay) flags=("${common[@]}" "${long_context[@]}" --mixer=aft-decay --window=16) ;;
    linear-decay) flags=("${common[@]}" "${long_context[@]}" --mixer=linear-decay) ;;
    mha-alibi) flags=("${common[@]}" "${long_context[@]}" --mixer=mha-alibi --max_context=8192) ;;
    aft-conv) flags=("${common[@]}" "${earlier[@]}" --mixer=aft-conv --window=8) ;;
    rwkv7) flags=("${common[@]}" "${long_context[@]}" --mixer=rwkv7 --norm=layernorm) ;;
    rwkv4) flags=("${common[@]}" "${long_context[@]}" --mixer=rwkv4 --norm=layernorm) ;;
    *) flags=("${common[@]}" "${long_context[@]}" --mixer="$1") ;;
  esac
}

train_bin="$BUILD_DIR/train/cli/attn-train"
if [ "${PRINT_RECIPES:-0}" = 1 ]; then
  for name in $MODELS; do
    recipe "$name"
    "$train_bin" "${flags[@]}" --print_config > /dev/null \
      || { echo "$name: attn-train refuses its recipe (is it a mixer kind?)" >&2; exit 2; }
    echo "$name: ${flags[*]}"
  done
  exit 0
fi

bash scripts/install_deps.sh
if ! command -v bible >/dev/null || [ ! -d /usr/share/games/fortunes ]; then
  echo "== installing the corpus packages (bible-kjv, fortunes-min, fortunes)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    bible-kjv fortunes-min fortunes >/dev/null
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" --target attn-train attn-generate

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== preparing the corpus in $CORPUS_DIR"
mkdir -p "$CORPUS_DIR"
bible gen1:1-rev22:21 > "$CORPUS_DIR/bible.txt"
# Fortune files are records separated by lines holding a single %.
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' \
  -exec cat {} + | grep -v '^%$' > "$CORPUS_DIR/fortunes.txt"
wc -c "$CORPUS_DIR"/*.txt

for name in $MODELS; do
  recipe "$name"
  echo "== training $name"
  "$train_bin" "${flags[@]}" --checkpoint_dir="$work/ckpt-$name" --checkpoint_every=500 \
    --output="models/$name.pt"
  echo "== sample from $name"
  "$BUILD_DIR/generate/attn-generate" --model="models/$name.pt" \
    --prompt="And it came to pass" --max_tokens=60 --temperature=0.8 --seed=1
done
ls -l models/
