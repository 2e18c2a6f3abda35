#!/usr/bin/env bash
# End to end: trains two tiny models with attn-train, starts the real
# attn-server on 127.0.0.1, and drives it with attnctl (and the generic
# reflection client): greedy stream == unary, stream logprobs == Score, bad
# inputs get their codes, the exposition passes promtool, and SIGTERM drains
# a running stream before the server exits 0, and --engine_cpus keeps the
# engine threads and the serving threads on their own CPUs; --help lists each
# command's flags, the startup log names each model, and score prints each
# token's text (or the loss per position segment).
#   end_to_end.sh ATTN_SERVER ATTNCTL ATTN_TRAIN
set -euo pipefail
server_bin=$1 ctl_bin=$2 train_bin=$3
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
work=$(mktemp -d)
. "$repo/scripts/lib/local_server.sh"
. "$repo/tests/server/tiny_models.sh"
use_binaries "$server_bin" "$ctl_bin"
solo_pid=""
cleanup() {
  kill_servers
  [ -n "$solo_pid" ] && kill -9 "$solo_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/server.log" ] && tail -20 "$work/server.log" >&2; exit 1; }

echo "== training two tiny models"
train_tiny_models "$work" "$train_bin" e2e || fail "tiny models"

echo "== --help lists each command's own flags"
"$server_bin" --help > "$work/help.txt" 2>&1 || true
for flag in --max_active --max_state_bytes --models; do
  grep -q -- "$flag" "$work/help.txt" || fail "attn-server --help lacks $flag: $(head -5 "$work/help.txt")"
done
"$ctl_bin" --help > "$work/help.txt" 2>&1 || true
grep -q -- "--server" "$work/help.txt" || fail "attnctl --help lacks --server"
"$train_bin" --help > "$work/help.txt" 2>&1 || true
grep -q -- "--corpus" "$work/help.txt" || fail "attn-train --help lacks --corpus"

echo "== startup errors name what to fix"
if "$server_bin" --models="$work/models" --device=cuda --metrics_port=-1 > "$work/cuda.log" 2>&1; then
  fail "--device=cuda started on a build without CUDA"
fi
grep -q -- "--device: cuda" "$work/cuda.log" || fail "cuda error: $(cat "$work/cuda.log")"
if "$server_bin" --models="$work/missing.pt" --metrics_port=-1 > "$work/missing.log" 2>&1; then
  fail "a missing model file started"
fi
grep -q "missing.pt" "$work/missing.log" || fail "missing model: $(cat "$work/missing.log")"
for cpus in 1000 1-x; do
  if "$server_bin" --models="$work/models" --engine_cpus=$cpus --metrics_port=-1 > "$work/cpus.log" 2>&1; then
    fail "--engine_cpus=$cpus started"
  fi
  grep -q -- "--engine_cpus=$cpus: " "$work/cpus.log" || fail "engine_cpus error: $(cat "$work/cpus.log")"
done

echo "== one outside model and no other flag: it is the default"
# The ports come from the environment (ATTN_<FLAG>), so that the command line
# is only --models, as a user's first command is.
solo_port=$(free_port)
ATTN_PORT=$solo_port ATTN_HTTP_PORT=$(free_port) ATTN_METRICS_PORT=-1 ATTN_HOST=127.0.0.1 \
  "$server_bin" --models="$work/models/e2e-linear.pt" > "$work/solo.log" 2>&1 &
solo_pid=$!
wait_healthy "$ctl_bin" "$solo_port" "$solo_pid" "$work/solo.log" || fail "one outside model did not start"
"$ctl_bin" --server="127.0.0.1:$solo_port" generate --prompt="the river" --max_tokens=3 \
  --temperature=0 > /dev/null || fail "a request without a model name, one outside model hosted"
grep -q "e2e-linear.*(default)" "$work/solo.log" || fail "e2e-linear not the default: $(cat "$work/solo.log")"
kill -TERM "$solo_pid"
wait "$solo_pid" || fail "the one-model server did not exit 0 on SIGTERM"
solo_pid=""

# The engine gets the last CPU this process may use, gRPC the others.
read -r engine_cpu serving_cpus < <($py -c '
import os
cpus = sorted(os.sched_getaffinity(0))
rest = cpus[:-1] or cpus
print(cpus[-1], ",".join(map(str, rest)))')

echo "== starting attn-server on 127.0.0.1"
# The drain below waits only until its stream ends; the grace is far above
# that stream's time so that a sanitized build (ten times slower) drains it too.
start_server "$work/server.log" --models="$work/models" --default_model=e2e-aft \
  --engine_cpus="$engine_cpu" --shutdown_grace_seconds=300 --max_tokens=60000 \
  || fail "the server did not start"
port=$server_port
ctl=("$ctl_bin" --server="127.0.0.1:$port")
[ "$("${ctl[@]}" health)" = SERVING ] || fail "overall health"
# The log says what loading did, model by model, before serving.
for line in "loading $work/models/e2e-aft.pt" "  e2e-aft: aft-conv (native backend), state of 256 slots up to" \
            "warming up e2e-linear"; do
  grep -qF -- "$line" "$work/server.log" || fail "startup log lacks \"$line\""
done
[ "$("${ctl[@]}" health --service=e2e-linear)" = SERVING ] || fail "model health"

echo "== --engine_cpus: engine threads on CPU $engine_cpu, gRPC threads on $serving_cpus"
$py - "$server_pid" "$engine_cpu" "$serving_cpus" <<'PY' || fail "thread placement"
import os, sys
pid, engine, serving = sys.argv[1], {int(sys.argv[2])}, {int(c) for c in sys.argv[3].split(",")}
masks = {}
for tid in os.listdir(f"/proc/{pid}/task"):
    name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
    masks.setdefault(name, []).append(os.sched_getaffinity(int(tid)))
assert masks.get("attn-engine") and len(masks["attn-engine"]) == 2, masks  # one per model
assert all(m == engine for m in masks["attn-engine"]), masks
assert all(m == serving for m in masks["attn-delivery"]), masks
grpc = [m for name, ms in masks.items() if name not in ("attn-engine", "attn-delivery") for m in ms]
assert grpc and all(m == serving for m in grpc), masks
print(f"   {sum(map(len, masks.values()))} threads placed")
PY

echo "== models"
"${ctl[@]}" models --json > "$work/models.json"
$py - "$work/models.json" <<'PY' || fail "ListModels"
import json, sys
models = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
assert set(models) == {"e2e-aft", "e2e-linear"}, models
assert models["e2e-aft"].get("is_default") and not models["e2e-linear"].get("is_default")
assert models["e2e-aft"]["mixer"] == "aft-conv" and int(models["e2e-aft"]["state_bytes_per_sequence"]) > 0
PY

echo "== greedy: stream == unary, stream logprobs == Score"
for model in e2e-aft e2e-linear; do
  args=(--model=$model --prompt="the river keeps" --max_tokens=30 --temperature=0 --logprobs --json)
  "${ctl[@]}" generate "${args[@]}" > "$work/unary.json" || fail "generate $model"
  "${ctl[@]}" stream "${args[@]}" > "$work/stream.jsonl" || fail "stream $model"
  "${ctl[@]}" tokenize --model=$model --text="the river keeps" > "$work/prompt.json"
  ids=$($py - "$work/prompt.json" "$work/stream.jsonl" <<'PY'
import json, sys
prompt = json.load(open(sys.argv[1]))["token_ids"]
stream = [json.loads(l) for l in open(sys.argv[2])]
print(",".join(str(i) for i in prompt + [t for m in stream for t in m.get("token_ids", [])]))
PY
)
  "${ctl[@]}" score --model=$model --ids="$ids" --json > "$work/score.json" || fail "score $model"
  # Without --json: one row per token, its id, logprob and quoted text.
  "${ctl[@]}" score --model=$model --text="the river keeps" > "$work/score.txt" || fail "score text"
  grep -qE '^ +[0-9]+ +-?[0-9]+\.[0-9]{4}  ".*river.*"$' "$work/score.txt" \
    || fail "score rows lack token text: $(cat "$work/score.txt")"
  # --segments: the mean loss of each position segment, from the same logprobs;
  # --text_file with --score_tokens scores the file's first tokens.
  "${ctl[@]}" score --model=$model --ids="$ids" --segments=4,16 > "$work/segments.txt" \
    || fail "score --segments"
  printf 'the river keeps its small state and light falls' > "$work/text.txt"
  "${ctl[@]}" score --model=$model --text_file="$work/text.txt" --score_tokens=5 --json \
    > "$work/first.json" || fail "score --text_file"
  $py - "$work/score.json" "$work/segments.txt" "$work/first.json" <<'PY' || fail "segments ($model)"
import json, sys
logprobs = json.load(open(sys.argv[1]))["logprobs"]
rows = {l.split()[0]: l.split() for l in open(sys.argv[2]) if l[:1].isdigit()}
for (begin, end) in ((0, 4), (4, 16), (16, len(logprobs))):
    row = rows[f"{begin}-{end}"]
    scored = [-x for x in logprobs[max(begin, 1):end]]
    assert int(row[1]) == len(scored), (row, len(scored))
    assert abs(float(row[2]) - sum(scored) / len(scored)) < 1e-3, (row, sum(scored) / len(scored))
assert len(json.load(open(sys.argv[3]))["token_ids"]) == 5
PY
  $py - "$work/unary.json" "$work/stream.jsonl" "$work/score.json" "$work/prompt.json" <<'PY' || fail "greedy equivalence ($model)"
import json, sys
unary = json.load(open(sys.argv[1]))
stream = [json.loads(l) for l in open(sys.argv[2])]
score = json.load(open(sys.argv[3]))
n_prompt = len(json.load(open(sys.argv[4]))["token_ids"])
text = "".join(m.get("text", "") for m in stream)
assert text == unary.get("text", ""), (text, unary.get("text"))
logprobs = [x for m in stream for x in m.get("logprobs", [])]
assert len(logprobs) == 30 and 1 <= len(stream) <= 30, (len(logprobs), len(stream))
assert stream[-1]["finish_reason"] in ("FINISH_REASON_LENGTH", "FINISH_REASON_EOS")
scored = score["logprobs"][n_prompt:]
worst = max(abs(a - b) for a, b in zip(logprobs, scored))
assert worst < 1e-4, worst
print(f"   {len(logprobs)} tokens, max |stream - score| = {worst:.2e}")
PY
done

echo "== bad inputs"
expect_error() {  # expect_error CODE FIELD attnctl-args...
  local code=$1 field=$2; shift 2
  if "${ctl[@]}" "$@" > /dev/null 2> "$work/err.txt"; then fail "$* succeeded"; fi
  grep -q "error: $code: $field" "$work/err.txt" || fail "$*: $(cat "$work/err.txt")"
}
expect_error NOT_FOUND "model:" generate --model=nope --prompt=hi
expect_error INVALID_ARGUMENT "prompt:" generate --prompt=
expect_error INVALID_ARGUMENT "top_p" stream --prompt=hi --top_p=1.5
expect_error INVALID_ARGUMENT "temperature" generate --prompt=hi --temperature=-1
expect_error INVALID_ARGUMENT "max_tokens:" stream --prompt=hi --max_tokens=0
expect_error INVALID_ARGUMENT "prompt_token_ids\[1\]:" generate --ids=5,99999
# --ignore_eos: a sampled end-of-text would finish the request in time.
expect_error DEADLINE_EXCEEDED "" generate --prompt=hi --max_tokens=4000 --ignore_eos --timeout_s=0.05

echo "== reflection (no .proto files on the client side)"
$py "$repo/tests/tools/reflection_client.py" "127.0.0.1:$port" > "$work/reflection.txt" || fail "reflection"
grep -q "attn.v1.TextGeneration" "$work/reflection.txt" || fail "reflection lists no TextGeneration"
$py "$repo/tests/tools/reflection_client.py" "127.0.0.1:$port" attn.v1.TextGeneration/ListModels '{}' \
  | grep -q '"e2e-linear"' || fail "a reflection-built call"
# A misspelt method is an error that says what to do, not a traceback.
if $py "$repo/tests/tools/reflection_client.py" "127.0.0.1:$port" attn.v1.TextGeneration/Generat '{}' \
  2> "$work/reflection.err"; then fail "an unknown method succeeded"; fi
grep -q "no method 'attn.v1.TextGeneration/Generat'" "$work/reflection.err" \
  || fail "unknown method: $(cat "$work/reflection.err")"

echo "== load and metrics"
"${ctl[@]}" bench --concurrency=8 --streams=24 --prompt_tokens=16 --max_tokens=8 --json \
  --progress=false > "$work/bench.json" || fail "bench"
$py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["errors"]==0 and r["streams"]==24 and r["tokens"]==24*8, r' \
  "$work/bench.json" || fail "bench report: $(cat "$work/bench.json")"
# The same load over the OpenAI HTTP API: streamed completions (Server-Sent
# Events), each chunk's tokens counted.
"${ctl[@]}" bench --http="127.0.0.1:$http_port" --concurrency=8 --streams=24 --prompt_tokens=16 \
  --max_tokens=8 --json --progress=false > "$work/http_bench.json" || fail "bench --http"
$py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["errors"]==0 and r["streams"]==24 and r["tokens"]==24*8 and r["itl_ms"]["max"]>0, r' \
  "$work/http_bench.json" || fail "bench --http report: $(cat "$work/http_bench.json")"
# No HTTP server at the address: each stream's error is counted, and the
# bench exits 1 (no stream completed).
if "${ctl[@]}" bench --http="127.0.0.1:$(free_port)" --concurrency=2 --streams=2 \
  --prompt_tokens=4 --max_tokens=2 --json --progress=false > "$work/http_bad.json"; then
  fail "bench --http to a closed port succeeded"
fi
$py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["errors"]==2 and r["streams"]==0, r' \
  "$work/http_bad.json" || fail "bench --http to a closed port: $(cat "$work/http_bad.json")"
# Slow readers: each waits between reads, so their streams fill and pause.
"${ctl[@]}" bench --concurrency=16 --streams=16 --prompt_tokens=8 --max_tokens=40 \
  --read_delay_ms=15 --json --progress=false > "$work/slow.json" || fail "slow bench"
$py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["errors"]==0 and r["tokens"]==16*40, r' \
  "$work/slow.json" || fail "slow readers: $(cat "$work/slow.json")"
curl -sf "http://127.0.0.1:$metrics_port/metrics" > "$work/metrics.txt" || fail "GET /metrics"
promtool check metrics < "$work/metrics.txt" > "$work/promtool.txt" 2>&1 \
  || fail "promtool: $(cat "$work/promtool.txt")"
[ ! -s "$work/promtool.txt" ] || fail "promtool lint: $(cat "$work/promtool.txt")"
grep -q '^attn_requests_total{code="OK",method="GenerateStream",model="e2e-aft",protocol="grpc"} [1-9][0-9]' "$work/metrics.txt" \
  || fail "stream counter: $(grep attn_requests_total "$work/metrics.txt")"
# An unknown model's name is not a label (callers could add series without
# end): the call is counted under model="".
grep -q '^attn_requests_total{code="NOT_FOUND",method="Generate",model="",protocol="grpc"} 1' "$work/metrics.txt" \
  || fail "NOT_FOUND counter: $(grep NOT_FOUND "$work/metrics.txt")"
grep -q '^attn_generation_tokens_total{model="e2e-aft"}' "$work/metrics.txt" || fail "token counter"

echo "== SIGTERM drains a running stream, then the server exits 0"
# 60,000 tokens keep this model busy for more than a second even on an
# AVX-512 machine (12,000 no longer did), so the stream is still running
# when the late request arrives: that request meets the drain, not a server
# that has already finished draining and is closing its port.
"${ctl[@]}" stream --prompt="the river" --max_tokens=60000 --ignore_eos --temperature=0 --json \
  > "$work/drain.jsonl" 2> "$work/drain.err" &
stream_pid=$!
for _ in $(seq 100); do [ -s "$work/drain.jsonl" ] && break; sleep 0.05; done
kill -TERM "$server_pid"
sleep 0.2
if "${ctl[@]}" generate --prompt=hi --max_tokens=2 > /dev/null 2> "$work/late.err"; then
  fail "a request after SIGTERM was accepted"
fi
kill -0 "$stream_pid" 2>/dev/null || fail "the stream ended before the late request was refused"
grep -q "UNAVAILABLE: the server is shutting down" "$work/late.err" \
  || fail "late request: $(cat "$work/late.err")"
wait "$stream_pid" || fail "the running stream did not finish: $(cat "$work/drain.err")"
grep -q '"completion_tokens":"60000"' "$work/drain.jsonl" \
  || fail "the drained stream has no final message with all its tokens"
status=0
wait "$server_pid" || status=$?
[ "$status" -eq 0 ] || fail "server exit status $status"
grep -q "received SIGTERM" "$work/server.log" || fail "no drain message"
echo "PASS"
