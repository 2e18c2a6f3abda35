#!/usr/bin/env bash
# This server against llama.cpp on the same weights, side by side in one run
# (docs/benchmarks-log.md, "LFM2 and Granite 4.0-H against llama.cpp"):
#
#   scripts/bench/llama_peer.sh PACKAGE F32_GGUF Q8_0_GGUF
#
# PACKAGE is attn-export's output for a checkpoint directory; the GGUF files
# are llama.cpp's convert_hf_to_gguf.py output for the same directory
# (--outtype f32 and q8_0). LLAMA_BIN names the folder with llama.cpp's
# llama-bench and llama-server (built from its source, CPU, Release).
# Runs, in turn, with nothing else on the machine:
#   1. attn-backend-bench: batch 1, 16 and 64 and a 512-token prefill,
#      float32 and int8 weights; llama-bench -p 512 -n 128 on F32 and Q8_0.
#   2. Serving: this server at 64 closed-loop clients (float32, then int8)
#      and llama-server with 16 slots under 16 (F32, then Q8_0), every client
#      a prompt of its own and 128 new tokens (scripts/bench/openai_peer.py).
#   3. A 20-turn chat whose transcript is resent every turn: this server with
#      its default state cache, llama-server with one slot and its prompt cache.
#   THREADS (2)   SECONDS_EACH (60)   BUILD_DIR (build)   LLAMA_BIN (required)
#   ATTN_START_SECONDS (600): how long either server may take to load (a
#   granite-4.0-h-1b package takes about 3.5 minutes here).
#   APART (0): 1 runs attn-backend-bench's float32 and int8 models as two
#   processes, for a model whose two copies and their rows do not fit in
#   memory together (granite-4.0-h-1b in 24 GB); 0 interleaves them in one.
#   WEIGHTS (both): int8 runs only the int8 and Q8_0 sides of 1 and 2,
#   float32 only the float32 and F32 ones. CHAT (1): 0 leaves out 3.
#   ENGINE (1): 0 leaves out 1; ROUNDS (1) repeats 1, the two sides in
#   turn. SERVING (1): 0 leaves out 2. BF16_GGUF: llama.cpp's --outtype
#   bf16 file of the same directory, which adds bf16 weights to 1 and 2
#   (this server's --quantize=bf16 against it). LOGIT_BIAS: a JSON object of token ids to
#   biases that every request on both sides carries, e.g. -100 on the byte
#   tokens a random-weight RWKV model samples, whose text is not UTF-8 and
#   which llama-server then answers with HTTP 500; for a checkpoint
#   directory, scripts/bench/unprintable_bias.py DIR --pad prints it.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 3 ] || { sed -n 2,34p "$0"; exit 2; }
weights=${WEIGHTS:-both}
case $weights in both | int8 | float32) ;; *) echo "WEIGHTS: both, int8 or float32" >&2; exit 2 ;; esac
# wants KIND: whether this run measures float32 or int8 weights.
wants() { [ "$weights" = both ] || [ "$weights" = "$1" ]; }
package=$1 f32=$2 q8=$3 bf16=${BF16_GGUF:-}
build=${BUILD_DIR:-build}
llama_bin=${LLAMA_BIN:?the folder holding llama.cpp llama-bench and llama-server}
threads=${THREADS:-2} seconds=${SECONDS_EACH:-60}
export ATTN_START_SECONDS=${ATTN_START_SECONDS:-600}
py=/usr/bin/python3
peer="$py scripts/bench/openai_peer.py"
log=/tmp/llama_peer_$$
mkdir -p "$log"
# shellcheck source=scripts/lib/local_server.sh
. scripts/lib/local_server.sh
use_binaries "$build/server/attn-server" "$build/client/attnctl"
llama_pid=
trap 'kill_servers; [ -z "$llama_pid" ] || kill "$llama_pid" 2>/dev/null || true' EXIT

echo "== machine"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*\(avx512f\).*/Flags: ... avx512f .../'
date -u

for round in $(seq "${ROUNDS:-1}"); do
  [ "${ENGINE:-1}" = 1 ] || break
  echo "== round $round: this server's engine, attn-backend-bench (load $(cut -d' ' -f1 /proc/loadavg))"
  backend_bench() {
    "$build/bench/backend/attn-backend-bench" --model="$package" --backends="$1" \
      --batch=1,16,64 --repeats=30 --prefill_repeats=3 --prefill_tokens=512
  }
  if [ "$weights" != both ]; then
    backend_bench "$([ "$weights" = int8 ] && echo int8 || echo native)"
  elif [ "${APART:-0}" = 1 ]; then
    backend_bench native
    backend_bench int8
  else
    backend_bench "native,int8${bf16:+,bf16}"
  fi
  echo "== round $round: llama.cpp, llama-bench (load $(cut -d' ' -f1 /proc/loadavg))"
  ggufs=()
  wants float32 && ggufs+=(-m "$f32")
  wants int8 && ggufs+=(-m "$q8")
  [ -z "$bf16" ] || ggufs+=(-m "$bf16")
  "$llama_bin/llama-bench" -t "$threads" "${ggufs[@]}" -p 512 -n 128 -r 3 -o md
done
echo "== load after the engine rounds: $(cut -d' ' -f1-3 /proc/loadavg)"

# extra FIELDS: the JSON object every request of a side carries.
extra() { echo "{$1${LOGIT_BIAS:+, \"logit_bias\": $LOGIT_BIAS}}"; }

# ours NAME WORKLOAD [SERVER FLAGS...]: starts this server, runs it, stops.
ours() {
  local name=$1 workload=$2; shift 2
  start_server "$log/$name.log" --models="$package" --threads="$threads" "$@" ||
    { echo "-- this server, $name: did not start"; return 0; }
  echo "-- this server, $name: $workload"
  # One run failing (a model too big for the machine) leaves the others to run.
  # shellcheck disable=SC2086
  $peer --url="http://127.0.0.1:$http_port" --extra="$(extra '"attn_ignore_eos": true')" $workload ||
    { echo "-- failed; the server's log ends:"; tail -5 "$log/$name.log"; }
  stop_server "$server_pid" || true
}

# llama NAME GGUF SLOTS workload: starts llama-server, waits for health, runs it, stops.
llama() {
  local name=$1 gguf=$2 slots=$3 workload=$4 port
  port=$(free_port)
  "$llama_bin/llama-server" -m "$gguf" -t "$threads" -np "$slots" -c $((slots > 4 ? 2048 * slots : 8192)) \
    --host 127.0.0.1 --port "$port" > "$log/llama-$name.log" 2>&1 &
  llama_pid=$!
  local deadline=$((SECONDS + ATTN_START_SECONDS))
  while [ "$SECONDS" -lt "$deadline" ]; do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    kill -0 "$llama_pid" 2> /dev/null || { tail -20 "$log/llama-$name.log"; return 1; }
    sleep 0.5
  done
  echo "-- llama-server, $name: $workload"
  # shellcheck disable=SC2086
  $peer --url="http://127.0.0.1:$port" --extra="$(extra '"ignore_eos": true')" $workload ||
    { echo "-- failed; llama-server's log ends:"; tail -5 "$log/llama-$name.log"; }
  kill "$llama_pid"; wait "$llama_pid" 2> /dev/null || true; llama_pid=
}

# SERVING=0 leaves out only this part: CHAT may still run below.
if [ "${SERVING:-1}" = 1 ]; then
  echo "== serving: 64 clients here, 16 slots there, $seconds s each"
  ! wants float32 || ours float32 "load --concurrency=64 --seconds=$seconds"
  ! wants int8 || ours int8 "load --concurrency=64 --seconds=$seconds" --quantize=int8
  [ -z "$bf16" ] || ours bf16 "load --concurrency=64 --seconds=$seconds" --quantize=bf16
  ! wants float32 || llama F32 "$f32" 16 "load --concurrency=16 --seconds=$seconds"
  ! wants int8 || llama Q8_0 "$q8" 16 "load --concurrency=16 --seconds=$seconds"
  [ -z "$bf16" ] || llama BF16 "$bf16" 16 "load --concurrency=16 --seconds=$seconds"
fi

[ "${CHAT:-1}" = 1 ] || exit 0
echo "== a 20-turn chat, the transcript resent every turn"
ours chat "chat --turns=20"
llama chat "$f32" 1 "chat --turns=20"
