#!/usr/bin/env bash
# Runs on a GPU machine without network, in a copy of this checkout that
# carries the kit of scripts/gpu/make_kit.sh (scripts/gpu/README.md), in one
# call of about 8 minutes: unpacks the kit, configures against that
# machine's PyTorch (its LibTorch, with CUDA), builds with every core, runs
# the device tests on the GPU (with the CUDA kernels of model/cuda, then
# without them), times the backends there (then again without the decode
# step's CUDA graphs, and without the kernels),
# serves the bundled models from the GPU and from the CPU and compares
# their greedy tokens, runs the short device tests under compute-sanitizer,
# and writes summary.md and one log per step to OUT.
#
#   scripts/gpu/device_run.sh OUT
#
#   KIT_DIR (.gpu-kit)  BUILD_DIR (/tmp/attn-gpu)
#   DEVICE (cuda): cpu rehearses the whole run on a machine without a GPU,
#   against a LibTorch without CUDA, building without the CUDA kernels (a
#   GPU machine's first call then fails only on what needs the GPU)
#   CXX_STANDARD (auto: 20 where PyTorch's headers require it, else 17)
#   STEPS ("build test bench eagerbench serve sanitize serverbench shapes
#   optest opbench"): the steps to run, in that order; eagerbench times
#   again with ATTN_CUDA_GRAPHS=0; sanitize runs the short device tests
#   under compute-sanitizer's memcheck and racecheck; serverbench drives the
#   real server on the GPU with 256 streams; shapes times public models'
#   shapes with random weights; optest and opbench run the device tests and
#   the timings again with ATTN_CUDA_KERNELS=0
#   BENCH_MODELS ("models/rwkv7.pt models/aft-decay.pt")
#   SHAPES ("rwkv7-0.1b mamba2-130m rwkv7-1.5b rwkv7-7.2b mamba2-2.7b")
#   SERVER_MODEL (models/rwkv7.pt): the package serverbench serves
#   BUDGET_S (480): a step that would start after this many seconds is skipped
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

OUT=${1:?usage: scripts/gpu/device_run.sh OUT}
KIT_DIR=${KIT_DIR:-.gpu-kit}
DEVICE=${DEVICE:-cuda}
BUILD_DIR=${BUILD_DIR:-/tmp/attn-gpu}
CXX_STANDARD=${CXX_STANDARD:-auto}
STEPS=${STEPS:-build test bench eagerbench serve sanitize serverbench shapes optest opbench}
BENCH_MODELS=${BENCH_MODELS:-models/rwkv7.pt models/aft-decay.pt}
SHAPES=${SHAPES:-rwkv7-0.1b mamba2-130m rwkv7-1.5b rwkv7-7.2b mamba2-2.7b}
SERVER_MODEL=${SERVER_MODEL:-models/rwkv7.pt}
SERVER_DEVICE=${SERVER_DEVICE:-$DEVICE}
SERVER_SECONDS=${SERVER_SECONDS:-20}
BUDGET_S=${BUDGET_S:-480}
KIT_ROOT=/tmp/attn-kit
mkdir -p "$OUT"
summary="$OUT/summary.md"
: > "$summary"
started=$SECONDS

note() { echo "$*" | tee -a "$summary"; }
# step NAME COMMAND...: runs COMMAND with its output in OUT/NAME.log and
# notes the outcome, its time and the log's last lines on failure.
step() {
  local name=$1
  shift
  if [ $((SECONDS - started)) -gt "$BUDGET_S" ]; then
    note "| $name | skipped: past ${BUDGET_S} s |"
    return 1
  fi
  local t0=$SECONDS rc=0
  "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    note "| $name | ok in $((SECONDS - t0)) s |"
  else
    note "| $name | FAILED (exit $rc) in $((SECONDS - t0)) s: $(tail -n 3 "$OUT/$name.log" | tr '\n|' ' /') |"
  fi
  return "$rc"
}

machine() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())'
  nvcc --version | tail -n 2
  c++ --version | head -n 1
  cmake --version | head -n 1
  nproc
}

unpack() {
  rm -rf "$KIT_ROOT" && mkdir -p "$KIT_ROOT"
  tar -xJf "$KIT_DIR/deps.tar.xz" -C "$KIT_ROOT"
  head -n 2 "$KIT_DIR/MANIFEST"
}

torch_prefix() { python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'; }
torch_dir() { python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "'"$1"'"))'; }
# PyTorch's headers refuse C++17 from some release on (ATen.h's #error);
# the project builds as C++17 or C++20.
cxx_standard() {
  if [ "$CXX_STANDARD" != auto ]; then echo "$CXX_STANDARD"; return; fi
  if grep -qs 'C++20 or later' "$(torch_dir include)/ATen/ATen.h"; then echo 20; else echo 17; fi
}

# PyTorch's CMake files look for cuDNN; a wheel keeps it in the Python
# package nvidia-cudnn. If they still cannot, the second try asks for none.
cudnn_flags() {
  local dir lib
  dir=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null) || return 0
  lib=$(find "$dir/lib" -name 'libcudnn.so*' 2>/dev/null | sort | head -n 1)
  if [ -n "$lib" ]; then printf '%s\n' "-DCUDNN_INCLUDE_PATH=$dir/include" "-DCUDNN_LIBRARY_PATH=$lib"; fi
}

configure() {
  local std
  std=$(cxx_standard)
  echo "== C++$std"
  local flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH="$(torch_prefix);$KIT_ROOT/usr"
    -DCMAKE_CXX_STANDARD="$std" -DATTN_WERROR=OFF -DATTN_BUILD_BENCHMARKS=ON
    -DTORCH_CUDA_ARCH_LIST=9.0 -DCMAKE_CUDA_ARCHITECTURES=90
    -DPKG_CONFIG_EXECUTABLE="$KIT_ROOT/usr/bin/pkgconf"
    -DProtobuf_PROTOC_EXECUTABLE="$KIT_ROOT/usr/bin/protoc"
    -DGRPC_CPP_PLUGIN="$KIT_ROOT/usr/bin/grpc_cpp_plugin")
  if [ "$DEVICE" = cuda ] && command -v nvcc > /dev/null; then
    flags+=(-DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DATTN_CUDA_KERNELS=ON)
  fi
  mapfile -t -O "${#flags[@]}" flags < <(cudnn_flags)
  cmake -S . -B "$BUILD_DIR" "${flags[@]}" && return
  echo "== again without cuDNN"
  rm -rf "$BUILD_DIR"
  cmake -S . -B "$BUILD_DIR" "${flags[@]}" -DCAFFE2_USE_CUDNN=OFF -DUSE_CUDNN=OFF
}

# Every error, not only the first: -k 0.
build() {
  ninja -C "$BUILD_DIR" -k 0 device_tests attn-backend-bench attn-server attnctl
}

# run_tests [SUFFIX]: the device tests' results in OUT/device_tests[SUFFIX].xml.
run_tests() {
  ATTN_TEST_DEVICE=$DEVICE "$BUILD_DIR/tests/device_tests" --gtest_brief=1 \
    --gtest_output="xml:$OUT/device_tests${1:-}.xml"
}
# The op-by-op path alone: where the kernels' run fails and this passes,
# the kernels are wrong.
run_tests_by_ops() { ATTN_CUDA_KERNELS=0 run_tests _by_ops; }

bench() {
  local model
  for model in $BENCH_MODELS; do
    "$BUILD_DIR/bench/backend/attn-backend-bench" --device="$DEVICE" --model="$model" \
      --backends=native,bf16,torchscript --batch=1,64,256 --repeats=100 --prefill_tokens=512 ||
      return
  done
}

# Public models' shapes with random weights (model/checkpoints/
# public_shapes.h): decode at 1 to 1,024 streams and prefills of 512 and
# 4,096 tokens, float32 against bf16 weights; the largest in bf16 alone,
# RWKV-7 7.2B at up to 960 streams (34.6 MB of state each) and Mamba-2 2.7B
# at up to 256 (172 MB each). Batch 1 also as a fraction of the bound the
# copy rate of step ceilings sets. A shape that fails (one that does not
# fit, say) fails the step but leaves the others timed.
shapes() {
  local shape flags copy_gbs rc=0
  copy_gbs=$(awk '/^ceiling copy/ {print $3}' "$OUT/ceilings.log" 2>/dev/null)
  for shape in $SHAPES; do
    case "$shape" in
      *-7.2b) flags=(--backends=bf16 --batch=1,64,256,960) ;;  # Albatross's batch
      *-2.7b) flags=(--backends=bf16 --batch=1,64,256) ;;
      *) flags=(--backends=native,bf16 --batch=1,64,256,1024) ;;
    esac
    "$BUILD_DIR/bench/backend/attn-backend-bench" --device="$DEVICE" --shape="$shape" "${flags[@]}" \
      --repeats=50 --prefill_tokens=512,4096 --prefill_repeats=5 --bandwidth_gbs="${copy_gbs:-0}" ||
      rc=1
  done
  return "$rc"
}

# The real server on the GPU over gRPC, then over the OpenAI HTTP API
# (streamed completions): attnctl bench keeps 256 streams of 128-token
# prompts and 128 generated tokens open for 20 s against SERVER_MODEL, with
# float32 weights and then with --quantize=bf16.
server_bench() (
  . scripts/lib/local_server.sh
  use_binaries "$BUILD_DIR/server/attn-server" "$BUILD_DIR/client/attnctl"
  trap kill_servers EXIT
  for quantize in none bf16; do
    start_server "$OUT/serverbench-$quantize.log" --models="$SERVER_MODEL" \
      --device="$SERVER_DEVICE" --quantize="$quantize" --max_active=256 --metrics_port=-1 || exit
    for protocol in grpc http; do
      echo "server: $SERVER_MODEL on $SERVER_DEVICE, --quantize=$quantize, 256 streams over $protocol"
      local via=()
      [ "$protocol" = http ] && via=(--http="127.0.0.1:$http_port")
      "$BUILD_DIR/client/attnctl" --server="127.0.0.1:$server_port" bench "${via[@]}" \
        --concurrency=256 --duration_s="$SERVER_SECONDS" --prompt_tokens=128 --max_tokens=128 \
        --ignore_eos --progress=false || exit
    done
    stop_server "$server_pid"
  done
)

# The same timings with every step launched eagerly: what the decode step's
# CUDA graphs gain.
bench_eager() { ATTN_CUDA_GRAPHS=0 bench; }
# The same timings on the op-by-op path alone: what the kernels gain.
bench_by_ops() { ATTN_CUDA_KERNELS=0 bench; }

# compute-sanitizer's memcheck (out-of-bounds and misaligned accesses) and
# racecheck (shared memory hazards) over the device tests that run the
# kernels at short context: every kind's chunked prefill and steps, pool
# rows at different positions stepped together, graphed steps, and the
# experts' kernel. (The 8,300-token
# test would take minutes under the tools.) Where the machine has no
# compute-sanitizer, the step says so and fails.
sanitize() {
  local sanitizer tool
  sanitizer=$(command -v compute-sanitizer || echo "$(dirname "$(command -v nvcc)")/compute-sanitizer")
  [ -x "$sanitizer" ] || { echo "no compute-sanitizer beside nvcc or on PATH"; return 1; }
  for tool in memcheck racecheck; do
    echo "== $tool"
    ATTN_TEST_DEVICE=cuda timeout 150 "$sanitizer" --tool "$tool" --error-exitcode 3 \
      "$BUILD_DIR/tests/device_tests" --gtest_brief=1 \
      --gtest_filter='*ChunkedPrefillThenSteps*:*PoolRowsAtDifferentPositions*:*GraphedSteps*:DeviceExperts*' ||
      return
  done
}

# The bundled models served from the GPU and from the CPU: the same greedy
# tokens for the same prompts (scripts/gpu/served_greedy.sh); then a long
# stream's logprobs against Score's on the GPU.
serve() {
  DEVICE=$DEVICE ATTN_SERVER="$BUILD_DIR/server/attn-server" ATTNCTL="$BUILD_DIR/client/attnctl" \
    bash scripts/gpu/served_greedy.sh || return
  # A stream of 4,096 tokens after a 4,096-token prompt on the GPU: its
  # logprobs equal Score's of the whole sequence there.
  DEVICE=$DEVICE timeout 240 bash tests/server/long_stream_matches_score.sh \
    "$BUILD_DIR/server/attn-server" "$BUILD_DIR/client/attnctl" models/rwkv7.pt
}

export PATH="$KIT_ROOT/usr/bin:$PATH"
export PKG_CONFIG_LIBDIR="$KIT_ROOT/usr/lib/x86_64-linux-gnu/pkgconfig:$KIT_ROOT/usr/share/pkgconfig"
note "# scripts/gpu/device_run.sh on $(hostname), $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null)"
note ""
note "| step | outcome |"
note "| --- | --- |"
step machine machine
[ "$DEVICE" = cuda ] && step ceilings python3 scripts/gpu/ceilings.py
step unpack unpack || exit 1
torch_libs=$(torch_dir lib)
export LD_LIBRARY_PATH="$KIT_ROOT/usr/lib/x86_64-linux-gnu:$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
case " $STEPS " in *" build "*)
  step configure configure && step build build ;;
esac
case " $STEPS " in *" test "*) step device_tests run_tests ;; esac
case " $STEPS " in *" bench "*) step bench bench ;; esac
case " $STEPS " in *" eagerbench "*) step bench_eager bench_eager ;; esac
case " $STEPS " in *" serve "*) step serve serve ;; esac
case " $STEPS " in *" sanitize "*) step sanitize sanitize ;; esac
case " $STEPS " in *" serverbench "*) step serverbench server_bench ;; esac
case " $STEPS " in *" shapes "*) step shapes shapes ;; esac
case " $STEPS " in *" optest "*) step device_tests_by_ops run_tests_by_ops ;; esac
case " $STEPS " in *" opbench "*) step bench_by_ops bench_by_ops ;; esac
# The build's errors, deduplicated, for the next change.
grep -h "error:" "$OUT/build.log" "$OUT/configure.log" 2>/dev/null | sort | uniq -c |
  sort -rn | head -n 40 > "$OUT/errors.txt" || true
# summarize LOG PATTERN [TITLE]: LOG's lines matching PATTERN in the
# summary, under TITLE; nothing where the step wrote no LOG.
summarize() {
  [ -s "$OUT/$1" ] || return 0
  if [ $# -gt 2 ]; then
    note ""
    note "$3"
  fi
  grep -hE "$2" "$OUT/$1" | tee -a "$summary" || true
}
# The timings' lines, not the progress lines ("batch 1: 100 steps each...").
timings='^(batch +[0-9]+( against|: [a-z])|prefill [0-9]+ tokens|model )'
summarize ceilings.log '^ceiling'
summarize bench.log "$timings"
summarize bench_eager.log "$timings" "without CUDA graphs (ATTN_CUDA_GRAPHS=0):"
summarize serverbench.log '^(server|streams|time to first|inter-token)' \
  "the server on $SERVER_DEVICE, 256 streams over gRPC and HTTP (attnctl bench):"
summarize shapes.log "$timings" "public shapes, random weights (--shape):"
summarize bench_by_ops.log "$timings" "without the CUDA kernels (ATTN_CUDA_KERNELS=0):"
note ""
note "total $((SECONDS - started)) s"
