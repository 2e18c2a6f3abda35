#!/usr/bin/env bash
# The bundled models served from DEVICE (cuda) and from the CPU, side by
# side: every model's greedy completion of every prompt must be the same
# text, and a text's scores must agree within 1e-3 per token (float32 on two
# devices sums in different orders), and on a GPU no CUDA graph capture may
# fail. scripts/gpu/device_run.sh runs it on a GPU machine; here DEVICE=cpu
# checks the script itself.
#
#   ATTN_SERVER=build/server/attn-server ATTNCTL=build/client/attnctl \
#     bash scripts/gpu/served_greedy.sh
#
#   DEVICE (cuda)   MODELS (models)   TOKENS (48)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/local_server.sh
. scripts/lib/local_server.sh

DEVICE=${DEVICE:-cuda}
MODELS=${MODELS:-models}
TOKENS=${TOKENS:-48}
use_binaries "${ATTN_SERVER:?}" "${ATTNCTL:?}"
work=$(mktemp -d)
trap 'kill_servers; rm -rf "$work"' EXIT

declare -A port
start_server "$work/device.log" --models="$MODELS" --device="$DEVICE" --metrics_port=-1
port[device]=$server_port
start_server "$work/cpu.log" --models="$MODELS" --device=cpu --metrics_port=-1
port[cpu]=$server_port

prompts=("And it came to pass" "In the beginning" "The LORD is my shepherd" "Love is")
failures=0
checked=0
for package in "$MODELS"/*.pt; do
  model=$(basename "$package" .pt)
  before=$failures
  for prompt in "${prompts[@]}"; do
    for side in device cpu; do
      "$ATTNCTL" --server="127.0.0.1:${port[$side]}" generate --model="$model" --prompt="$prompt" \
        --max_tokens="$TOKENS" --temperature=0 > "$work/$side.txt" 2> "$work/$side.err"
    done
    checked=$((checked + 1))
    if ! cmp -s "$work/device.txt" "$work/cpu.txt"; then
      failures=$((failures + 1))
      echo "DIFFERENT: $model, \"$prompt\": $DEVICE \"$(cat "$work/device.txt")\" against cpu \"$(cat "$work/cpu.txt")\""
    fi
  done
  text="$(cat "$work/cpu.txt")"
  for side in device cpu; do
    "$ATTNCTL" --server="127.0.0.1:${port[$side]}" score --model="$model" --text="$text" |
      grep -oE -- '-?[0-9]+\.[0-9]+' > "$work/$side.scores"
  done
  if ! paste "$work/device.scores" "$work/cpu.scores" |
    awk '{d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3) bad++} END {exit bad > 0 || NR == 0}'; then
    failures=$((failures + 1))
    echo "DIFFERENT scores: $model: $(paste -d/ "$work/device.scores" "$work/cpu.scores" | head -n 8 | tr '\n' ' ')"
  fi
  [ "$failures" -gt "$before" ] || echo "$model: $DEVICE and cpu served the same greedy tokens and scores"
done
# On a GPU, how each model's decode steps ran: CUDA graphs, or why not; a
# capture that failed while serving counts as a difference.
if [[ $DEVICE == cuda* ]]; then
  grep -h "decode steps" "$work/device.log" || true
  if grep -h "CUDA graphs off" "$work/device.log"; then failures=$((failures + 1)); fi
fi
echo "served_greedy: $checked completions and $(find "$MODELS" -name '*.pt' | wc -l) scores compared, $failures different"
[ "$failures" -eq 0 ]
