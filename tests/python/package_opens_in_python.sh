#!/usr/bin/env bash
# End to end: attn-train writes a package from a tiny corpus; Python's
# torch.jit.load opens it. usage: package_opens_in_python.sh ATTN_TRAIN
set -euo pipefail
attn_train=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
/usr/bin/python3 - "$dir/corpus.txt" <<'PY'
import random, sys
random.seed(2)
words = "the river keeps a small quiet state while light falls over stones and water".split()
with open(sys.argv[1], "w") as f:
    for _ in range(3000):
        f.write(" ".join(random.choice(words) for _ in range(10)) + ".\n")
PY
"$attn_train" --corpus="$dir/corpus.txt" --output="$dir/model.pt" --mixer=linear-elu \
  --d_model=32 --layers=2 --heads=4 --ff_hidden=48 --vocab_size=300 --seq_len=32 --batch=4 \
  --steps=3 --eval_every=0 --threads=1 2>/dev/null
/usr/bin/python3 "$(dirname "$0")/check_package.py" "$dir/model.pt"
