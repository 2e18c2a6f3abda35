# shellcheck shell=bash
# Two tiny models for the shell tests, trained in seconds by attn-train on a
# synthetic corpus of fourteen words. Sourced:
#   . tests/server/tiny_models.sh
#   train_tiny_models DIR ATTN_TRAIN PREFIX
# writes DIR/corpus.txt and DIR/models/PREFIX-aft.pt (aft-conv, window 4) and
# DIR/models/PREFIX-linear.pt (linear-elu); attn-train's output goes to
# DIR/train.log. Fails naming the model that did not train.
train_tiny_models() {
  local dir=$1 train_bin=$2 prefix=$3
  /usr/bin/python3 - "$dir/corpus.txt" <<'PY'
import sys
words = "the river keeps its small state and light falls over stone water night".split()
with open(sys.argv[1], "w") as f:
    for i in range(4000):
        f.write(" ".join(words[(i * 7 + w * 5 + i // 13) % len(words)] for w in range(9)) + ".\n")
PY
  mkdir -p "$dir/models"
  local common=(--corpus="$dir/corpus.txt" --d_model=32 --layers=2 --heads=2 --ff_hidden=64
                --vocab_size=300 --seq_len=64 --batch=8 --steps=40 --eval_every=0 --threads=1)
  "$train_bin" "${common[@]}" --mixer=aft-conv --window=4 --output="$dir/models/$prefix-aft.pt" \
    > "$dir/train.log" 2>&1 || { echo "attn-train aft-conv failed: $(tail -5 "$dir/train.log")" >&2; return 1; }
  "$train_bin" "${common[@]}" --mixer=linear-elu --output="$dir/models/$prefix-linear.pt" \
    >> "$dir/train.log" 2>&1 || { echo "attn-train linear-elu failed: $(tail -5 "$dir/train.log")" >&2; return 1; }
}
