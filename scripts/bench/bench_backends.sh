#!/usr/bin/env bash
# The TorchScript backend against the native backend (float32 and int8
# weights) and the Python eager loop (docs/benchmarks-log.md, "TorchScript
# backend" and "Int8 weights"): a decode step of the bundled aft-conv at
# batch 1 and 64. Each round runs, one after the other:
#   - attn-backend-bench with every backend in one process (native float32
#     and int8, the TorchScript backend, the module), interleaved step by
#     step: the columns that compare the backends with each other;
#   - attn-backend-bench with native int8 alone in its process, as the eager
#     loop runs alone in its own: the "eager / int8 alone" column, which
#     compares like with like (in the shared process the other backends'
#     four float copies of the weights evict int8's from the caches);
#   - the Python eager loop.
# Medians per round. Prints a Markdown table.
#   ROUNDS=3  MODEL=models/aft-conv.pt  THREADS=2
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
MODEL=${MODEL:-models/aft-conv.pt}
THREADS=${THREADS:-2}
BUILD_DIR=${BUILD_DIR:-build}
py=/usr/bin/python3
bench="$BUILD_DIR/bench/backend/attn-backend-bench"
cmake --build "$BUILD_DIR" --target attn-backend-bench > /dev/null
echo "| round | batch | native ms | native int8 ms | TorchScript backend ms | int8 alone ms | Python eager ms | TorchScript / native | eager / TorchScript | eager / int8 alone |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS..." >&2
  steps=$("$bench" --model="$MODEL" --threads="$THREADS" --batch=1,64 --repeats=200 2>/dev/null |
          tail -1)
  alone=$("$bench" --model="$MODEL" --threads="$THREADS" --batch=1,64 --repeats=1000 \
          --backends=int8 --prefill_tokens=0 2>/dev/null | tail -1)
  for batch in 1 64; do
    eager=$($py tests/tools/python_eager_baseline.py "$MODEL" --tokens 200 --threads "$THREADS" \
            --batch "$batch")
    $py - "$round" "$batch" "$steps" "$alone" "$eager" <<'PY'
import json, sys
round_, batch = sys.argv[1], sys.argv[2]
steps, alone, eager = (json.loads(arg) for arg in sys.argv[3:6])
s = steps["steps"][batch]
a = alone["steps"][batch]["native_int8_ms"]
e = eager["median_ms_per_step"]
print(f"| {round_} | {batch} | {s['native_ms']:.3f} | {s['native_int8_ms']:.3f} | "
      f"{s['torchscript_ms']:.3f} | {a:.3f} | {e:.3f} | {s['torchscript_ms'] / s['native_ms']:.2f}x | "
      f"{e / s['torchscript_ms']:.2f}x | {e / a:.2f}x |")
PY
  done
done
