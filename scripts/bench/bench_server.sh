#!/usr/bin/env bash
# The serving benchmarks recorded in docs/benchmarks-log.md. For each bundled
# model: the engine in process (attn-engine-bench), then the real server
# driven over gRPC by attnctl bench at concurrency 1, 8, 64, 256 and at
# contexts 128..4096, with the server's memory; the Python eager baseline;
# and 10,000 concurrent slow-reading streams on the default model. Prints a
# Markdown report; raw JSON lines go to $OUT (default /tmp/attn-bench).
#   MODELS="aft-conv aft-decay linear-decay mha-alibi"   QUICK=1 (shorter runs, for a smoke test)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODELS=${MODELS:-"aft-conv aft-decay linear-decay mha-alibi"}
OUT=${OUT:-/tmp/attn-bench}
BUILD_DIR=${BUILD_DIR:-build}
QUICK=${QUICK:-0}
py=/usr/bin/python3
mkdir -p "$OUT"
rm -f "$OUT"/*.jsonl
cmake --build "$BUILD_DIR" --target attn-server attnctl attn-engine-bench > /dev/null
server_bin=$BUILD_DIR/server/attn-server
ctl_bin=$BUILD_DIR/client/attnctl
. scripts/lib/local_server.sh
use_binaries "$server_bin" "$ctl_bin"
trap kill_servers EXIT

# The one-core pairing below: the engine on the last CPU this script may
# use, the serving threads and the client on the others (all of them on a
# one-CPU machine, where nothing can be kept apart).
read -r engine_cpu serving_cpus < <($py -c '
import os
cpus = sorted(os.sched_getaffinity(0))
print(cpus[-1], ",".join(map(str, cpus[:-1] or cpus)))')

rss_mb() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
serve_model() {  # serve_model MODEL extra-flags...: port, metrics_port, server_pid
  local model=$1; shift
  start_server "$OUT/server-$model.log" --models="models/$model.pt" "$@" || exit 1
  port=$server_port
}
stop_model() { stop_server "$server_pid" || true; }
record() { echo "$1" >> "$OUT/$2.jsonl"; }
# The server engine's step totals from its attn_step_duration_seconds:
# "decode_sum decode_count prefill_sum prefill_count" (seconds, steps).
step_totals() {
  $py - "$metrics_port" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
totals = []
for phase in ("decode", "prefill"):
    for kind in ("sum", "count"):
        pattern = r'^attn_step_duration_seconds_%s\{[^}]*phase="%s"[^}]*\} (\S+)$' % (kind, phase)
        totals.append(sum(float(v) for v in re.findall(pattern, text, re.M)))
print(" ".join(map(str, totals)))
PY
}
# CPU seconds the server has used: "total serving". Serving is the threads
# not named attn-engine (gRPC's, the delivery thread, the main thread), which
# live as long as the server; the engine's share is total - serving, since
# its OpenMP workers come and go and a process's total keeps the time of
# threads that ended.
server_cpu() {
  $py - "$server_pid" <<'PY'
import os, sys
pid = sys.argv[1]
def parse(path):
    text = open(path).read()
    fields = text[text.rindex(")") + 2:].split()
    return text[text.index("(") + 1:text.rindex(")")], int(fields[11]) + int(fields[12])
total = parse(f"/proc/{pid}/stat")[1]
serving = 0
for tid in os.listdir(f"/proc/{pid}/task"):
    try:
        name, ticks = parse(f"/proc/{pid}/task/{tid}/stat")
    except OSError:  # the thread ended meanwhile
        continue
    serving += ticks if name != "attn-engine" else 0
hz = os.sysconf("SC_CLK_TCK")
print(total / hz, serving / hz)
PY
}
# One closed-loop gRPC run at 64 streams, its arguments prefixing the
# client's command (taskset). Prints the client's JSON line with what the
# run cost in CPU: seconds of wall time, of the server's engine and serving
# threads, and of the client (user + system, from /usr/bin/time).
grpc_round() {
  local before after start end line
  before=$(server_cpu); start=$(date +%s.%N)
  line=$("$@" /usr/bin/time -f "%U %S" -o "$OUT/client.time" "$ctl_bin" --server=127.0.0.1:$port \
         bench --concurrency=64 --prompt_tokens=128 --max_tokens=128 --streams=$((64 * per_slot)) \
         --json --progress=false)
  end=$(date +%s.%N); after=$(server_cpu)
  echo "$before $after $start $end $(cat "$OUT/client.time")" | awk -v line="$line" -v cpus="$(nproc)" '{
    serving = $4 - $2; engine = ($3 - $1) - serving
    printf "{\"run\": %s, \"cpu\": {\"cpus\": %d, \"wall_s\": %.3f, \"engine_s\": %.3f, \"serving_s\": %.3f, \"client_s\": %.3f}}",
           line, cpus, $6 - $5, engine, serving, $7 + $8 }'
}
# Mean decode step and prefill chunk (ms) between two step_totals.
step_means() {
  echo "$1 $2" | awk '{
    d = $6 - $2; p = $8 - $4
    printf "{\"decode_ms\": %.4f, \"prefill_ms\": %.4f}", (d > 0 ? ($5 - $1) / d * 1000 : 0),
           (p > 0 ? ($7 - $3) / p * 1000 : 0) }'
}

# Inter-token latency at concurrency 1 by context, recorded as "context"
# lines labelled $1 ("shared" or "pinned"); the rest of the arguments prefix
# the client's command (taskset). Rounds alternate the contexts, so drift in
# this machine's speed falls on all of them alike; the report takes the
# median per context. A token interval is a fraction of a millisecond, and
# with the engine sharing the cores a round's p50 jumps between two levels
# with the placement of the server's threads (five rounds of two streams
# read ratios of 0.91-1.22 for a step that is flat in process); with the
# engine pinned to a core of its own the placement is fixed.
context_rounds() {
  local placement=$1; shift
  local contexts="128 1024 4032"
  [ "$model" = mha-alibi ] && contexts="128 1024 3968"  # as the earlier 4096-token mha
  for round in $(seq $context_rounds); do
    for ctx in $contexts; do
      line=$("$@" "$ctl_bin" --server=127.0.0.1:$port bench --concurrency=1 --prompt_tokens=$ctx \
             --max_tokens=64 --streams=4 --json --progress=false)
      record "{\"name\": \"$model\", \"placement\": \"$placement\", \"context\": $((ctx + 64)), \"round\": $round, \"rss_mb\": $(rss_mb $server_pid), \"run\": $line}" context
    done
  done
}

repeats=30; per_slot=3; concurrencies="1 8 64 256"; ratio_rounds=5; context_rounds=9
[ "$QUICK" = 1 ] && repeats=5 && per_slot=1 && concurrencies="1 64" && ratio_rounds=2 && context_rounds=2

for model in $MODELS; do
  echo "== $model: engine in process" >&2
  "$BUILD_DIR/bench/engine/attn-engine-bench" --model="models/$model.pt" \
    --concurrency="${concurrencies// /,}" --repeats=$repeats --requests_per_slot=$per_slot \
    | tail -1 | sed "s/^{/{\"name\": \"$model\", /" >> "$OUT/engine.jsonl"
  if [ "$model" = aft-conv ]; then
    # Pairs that alternate the Python loop with the engine at batch 1, so
    # that drift in this machine's speed falls on both sides of each ratio.
    echo "== Python eager baseline against the engine (aft-conv, batch 1), alternating" >&2
    for round in $(seq $ratio_rounds); do
      python=$($py tests/tools/python_eager_baseline.py models/aft-conv.pt --tokens 200 --threads 2)
      engine=$("$BUILD_DIR/bench/engine/attn-engine-bench" --model=models/aft-conv.pt \
               --concurrency=1 --requests_per_slot=3 --throughput_only | tail -1)
      record "{\"round\": $round, \"python\": $python, \"engine\": $engine}" python
    done
  fi

  echo "== $model: gRPC, concurrency $concurrencies" >&2
  serve_model "$model" --max_active=256 --max_waiting=4096
  record "{\"name\": \"$model\", \"idle_rss_mb\": $(rss_mb $server_pid)}" memory
  for c in $concurrencies; do
    line=$("$ctl_bin" --server=127.0.0.1:$port bench --concurrency=$c --prompt_tokens=128 \
           --max_tokens=128 --streams=$((c * per_slot)) --json --progress=false)
    record "{\"name\": \"$model\", \"rss_mb\": $(rss_mb $server_pid), \"run\": $line}" grpc
  done
  # The target ratio at 64 streams, from rounds that alternate the engine in
  # process with the server (idle meanwhile), so both see the same machine.
  echo "== $model: engine vs gRPC at 64 streams, alternating" >&2
  for round in $(seq $ratio_rounds); do
    engine=$("$BUILD_DIR/bench/engine/attn-engine-bench" --model="models/$model.pt" \
             --concurrency=64 --requests_per_slot=$per_slot --throughput_only | tail -1)
    before=$(step_totals)
    grpc=$(grpc_round)
    steps=$(step_means "$before" "$(step_totals)")
    record "{\"name\": \"$model\", \"threads\": 2, \"round\": $round, \"engine\": $engine, \"grpc\": $grpc, \"server_steps\": $steps}" ratio
  done
  echo "== $model: inter-token latency by context" >&2
  context_rounds shared
  stop_model
  # The same pairing with the engine on one core of its own: the server's
  # engine thread pinned there (--engine_cpus), its gRPC threads and the
  # client on the other CPUs, as a client on its own machine would be; the
  # engine in process runs on that same core. The ratio then isolates what
  # the serving layer costs from the client competing for the engine's cores.
  echo "== $model: engine vs gRPC at 64 streams, engine on CPU $engine_cpu" >&2
  serve_model "$model" --threads=1 --engine_cpus="$engine_cpu" --max_active=64 --max_waiting=4096
  for round in $(seq $ratio_rounds); do
    engine=$(taskset -c "$engine_cpu" "$BUILD_DIR/bench/engine/attn-engine-bench" \
             --model="models/$model.pt" --threads=1 \
             --concurrency=64 --requests_per_slot=$per_slot --throughput_only | tail -1)
    before=$(step_totals)
    grpc=$(grpc_round taskset -c "$serving_cpus")
    steps=$(step_means "$before" "$(step_totals)")
    record "{\"name\": \"$model\", \"threads\": 1, \"round\": $round, \"engine\": $engine, \"grpc\": $grpc, \"server_steps\": $steps}" ratio
  done
  echo "== $model: inter-token latency by context, engine on CPU $engine_cpu" >&2
  context_rounds pinned taskset -c "$serving_cpus"
  stop_model
done

echo "== 10,000 concurrent slow-reading streams (aft-conv)" >&2
serve_model aft-conv --max_active=10240 --max_waiting=1024 --stream_buffer=4 --max_prompt_tokens=512
idle=$(rss_mb $server_pid)
streams=10000; delay=1000; tokens=120
[ "$QUICK" = 1 ] && streams=2000
"$ctl_bin" --server=127.0.0.1:$port bench --concurrency=$streams --streams=$streams \
  --prompt_tokens=16 --max_tokens=$tokens --read_delay_ms=$delay --json --progress=false \
  > "$OUT/slow.json" &
bench_pid=$!
# Admitting 10,000 prompts takes a while on 2 cores; measure once they are
# all generating (each reads one message a second, so they stay open).
sleep 75
held=$(rss_mb $server_pid)
health_ms=$($py -c "
import subprocess, time
t = time.perf_counter()
subprocess.run(['$ctl_bin', '--server=127.0.0.1:$port', 'health'], check=True, capture_output=True)
print(round((time.perf_counter() - t) * 1e3, 1))")
gen_ms=$($py -c "
import subprocess, time
t = time.perf_counter()
subprocess.run(['$ctl_bin', '--server=127.0.0.1:$port', 'generate', '--prompt=And it came to pass',
                '--max_tokens=16', '--temperature=0'], check=True, capture_output=True)
print(round((time.perf_counter() - t) * 1e3, 1))")
wait $bench_pid
peak=$(awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$server_pid/status")
record "{\"streams\": $streams, \"idle_rss_mb\": $idle, \"held_rss_mb\": $held, \"peak_rss_mb\": $peak, \"health_ms\": $health_ms, \"generate_ms\": $gen_ms, \"run\": $(cat "$OUT/slow.json")}" slow
stop_model

# Replaces the "## Serving" section of docs/benchmarks-log.md (the mixer
# section above it comes from scripts/bench/run_benchmarks.sh); the current
# results in docs/benchmarks.md are updated by hand.
{
  echo "## Serving"
  echo
  echo "Recorded by \`bash scripts/bench/bench_server.sh\` on $(date -u +%Y-%m-%dT%H:%M:%SZ)."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs,"
  echo "LibTorch 1.13 (Debian) with OpenBLAS; the server uses 2 intra-op threads and runs on"
  echo "the same 2 CPUs as the client. Ratios come from one run; medians throughout."
  echo
  $py scripts/bench/bench_server_report.py "$OUT"
} > "$OUT/serving.md"
[ "$QUICK" = 1 ] && { cat "$OUT/serving.md"; exit 0; }
# Only the "## Serving" section is replaced: the sections after it stay.
awk -v new="$OUT/serving.md" '
  /^## / { if (in_serving) in_serving = 0 }
  /^## Serving$/ { in_serving = 1; while ((getline line < new) > 0) print line; print ""; next }
  !in_serving { print }
' docs/benchmarks-log.md > "$OUT/log.md" && cp "$OUT/log.md" docs/benchmarks-log.md
cat "$OUT/serving.md"
