#!/usr/bin/env bash
# The TorchScript backend against the native backend (float32 and int8
# weights) and the Python eager loop (docs/benchmarks.md, "TorchScript
# backend" and "Int8 weights"): a decode step of the bundled aft-conv at
# batch 1 and 64, each round all of them one after the other, medians per
# round. Prints a Markdown table.
#   ROUNDS=3  MODEL=models/aft-conv.pt  THREADS=2
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
MODEL=${MODEL:-models/aft-conv.pt}
THREADS=${THREADS:-2}
BUILD_DIR=${BUILD_DIR:-build}
py=/usr/bin/python3
cmake --build "$BUILD_DIR" --target attn-backend-bench > /dev/null
echo "| round | batch | native ms | native int8 ms | TorchScript backend ms | Python eager ms | TorchScript / native | eager / TorchScript | eager / native int8 |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS..." >&2
  steps=$("$BUILD_DIR/bench/backend/attn-backend-bench" --model="$MODEL" --threads="$THREADS" \
          --batch=1,64 --repeats=200 2>/dev/null | tail -1)
  for batch in 1 64; do
    eager=$($py tests/tools/python_eager_baseline.py "$MODEL" --tokens 200 --threads "$THREADS" \
            --batch "$batch")
    $py - "$round" "$batch" "$steps" "$eager" <<'PY'
import json, sys
round_, batch, steps, eager = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
s = steps["steps"][batch]
e = eager["median_ms_per_step"]
print(f"| {round_} | {batch} | {s['native_ms']:.3f} | {s['native_int8_ms']:.3f} | "
      f"{s['torchscript_ms']:.3f} | {e:.3f} | {s['torchscript_ms'] / s['native_ms']:.2f}x | "
      f"{e / s['torchscript_ms']:.2f}x | {e / s['native_int8_ms']:.2f}x |")
PY
  done
done
