#!/usr/bin/env bash
# Reproduces the bundled models under models/ from scratch: fetches public-
# domain English text from Debian packages (the King James Bible from
# bible-kjv, the fortunes from fortunes-min and fortunes), trains one model of
# each family with attn-train, and prints each one's held-out perplexity.
# The text is fetched at training time and never committed.
#
#   STEPS        optimizer steps per model (default 1000, as bundled; on an
#                otherwise idle 2-core machine about 2,900 tokens/s for
#                aft-conv, 5,000 for linear-elu, 4,200 for mha: 24, 14 and
#                16 minutes)
#   MODELS       which to train (default: "aft-conv linear-elu mha")
#   BUILD_DIR    build directory holding attn-train (default: build)
#
# Sizes are chosen so the three packages together stay under 25 MB:
# d_model 160, 4 layers, 4096-piece vocabulary, about 1.9M parameters each.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-1000}
MODELS=${MODELS:-"aft-conv linear-elu mha"}
BUILD_DIR=${BUILD_DIR:-build}

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
echo "== preparing the corpus in $work"
bible gen1:1-rev22:21 > "$work/bible.txt"
# Fortune files are records separated by lines holding a single %.
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' \
  -exec cat {} + | grep -v '^%$' > "$work/fortunes.txt"
wc -c "$work"/*.txt

common=(--corpus="$work/bible.txt,$work/fortunes.txt" --d_model=160 --layers=4 --heads=4
        --ff_hidden=640 --vocab_size=4096 --seq_len=256 --batch=16 --steps="$STEPS"
        --lr=3e-3 --warmup=100 --eval_every=250 --seed=1)
for kind in $MODELS; do
  case "$kind" in
    aft-conv) extra=(--mixer=aft-conv --window=8 --positions=none) ;;
    linear-elu) extra=(--mixer=linear-elu --positions=sinusoidal) ;;
    mha) extra=(--mixer=mha --positions=sinusoidal --max_context=4096) ;;
    *) echo "unknown model $kind" >&2; exit 2 ;;
  esac
  echo "== training $kind"
  "$BUILD_DIR/train/cli/attn-train" "${common[@]}" "${extra[@]}" \
    --checkpoint_dir="$work/ckpt-$kind" --checkpoint_every=500 --output="models/$kind.pt"
  echo "== sample from $kind"
  "$BUILD_DIR/generate/attn-generate" --model="models/$kind.pt" \
    --prompt="And it came to pass" --max_tokens=60 --temperature=0.8 --seed=1
done
ls -l models/
