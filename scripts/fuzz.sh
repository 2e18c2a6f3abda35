#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang-14, AddressSanitizer
# and UndefinedBehaviorSanitizer in build-fuzz, and runs each on its corpus.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# SECONDS_PER_TARGET defaults to 30 (what CI runs); docs/reliability.md
# records the long runs. New inputs the fuzzer finds go to a scratch corpus,
# not the repository's seeds. A crash leaves its input in build-fuzz/findings
# and fails the script, naming the target and the file to replay. FUZZ_JOBS
# targets run at a time (default: the CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/parallel.sh
seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_state_blob fuzz_openai_request fuzz_api_keys
                                     fuzz_tokenizer fuzz_generate_request fuzz_config
                                     fuzz_model_package fuzz_package_contents
                                     fuzz_safetensors fuzz_torch_checkpoint fuzz_rwkv_vocabulary
                                     fuzz_stored_state fuzz_tokenizer_json fuzz_hf_config
                                     fuzz_chat_template fuzz_tool_calls fuzz_tokenizer_config
                                     fuzz_responses_request fuzz_gbnf fuzz_json_schema fuzz_regex
                                     fuzz_sse)
build=${FUZZ_BUILD_DIR:-build-fuzz}

echo "== configure ($build, clang-14)"
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DATTN_FUZZ=ON -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_BENCHMARKS=OFF -DATTN_WERROR=OFF > /dev/null
echo "== build ${targets[*]}"
cmake --build "$build" --target "${targets[@]}"

# LibTorch's own leak on a corrupt archive (tests/fuzz/lsan.supp says why).
export LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}

# Options a target needs beyond the defaults.
#   fuzz_model_package: LibTorch's unpickler reserves whatever length a
#   corrupt record claims (up to 4 GB and more, without touching it). The
#   server survives that: the allocation succeeds and the short read fails,
#   or it throws std::bad_alloc; both become a refusal. Here ASan returns
#   null past 1 GB, so the target's operator new throws as in the server
#   instead of ASan aborting; libFuzzer's malloc limit sits above that cap,
#   and its RSS limit still catches memory actually used.
target_options() {
  case $1 in
    fuzz_model_package) echo "-malloc_limit_mb=2048 -rss_limit_mb=3072" ;;
  esac
}
# Seeds kept elsewhere in the repository, beyond the target's own corpus folder.
target_seeds() {
  case $1 in
    fuzz_chat_template) echo "tests/data/chat_templates" ;;
    fuzz_tokenizer_config) echo "tests/data/tokenizers/qwen3 tests/data/tokenizers/deepseek-v3" ;;
  esac
}
target_asan_options() {
  case $1 in
    fuzz_model_package) echo "allocator_may_return_null=1:max_allocation_size_mb=1024" ;;
  esac
}
mkdir -p "$build/findings" "$build/results"
# fuzz_one INDEX TARGET: runs it; its verdict goes to $build/results/INDEX.result.
fuzz_one() {
  local result=$build/results/$1.result target=$2 seeds scratch
  seeds=tests/fuzz/corpus/${target#fuzz_}
  scratch=$build/corpus/${target#fuzz_}
  mkdir -p "$scratch"
  # shellcheck disable=SC2046  # the options are words
  if ASAN_OPTIONS=$(target_asan_options "$target")${ASAN_OPTIONS:+:$ASAN_OPTIONS} \
      "$build/tests/fuzz/$target" "$scratch" "$seeds" $(target_seeds "$target") \
      -max_total_time="$seconds" \
      -artifact_prefix="$build/findings/$target-" -print_final_stats=1 \
      $(target_options "$target") > "$build/$target.log" 2>&1; then
    { echo "== $target: ${seconds}s on $seeds"
      grep -E "^stat::(number_of_executed_units|peak_rss_mb)|cov: " "$build/$target.log" | tail -3
    } > "$result"
  else
    { echo "FAIL: $target found a crash; see $build/$target.log and $build/findings/"
      tail -40 "$build/$target.log"
    } > "$result"
  fi
}
# FUZZ_JOBS targets at a time (default: the CPUs; each fuzzer uses one).
jobs=${FUZZ_JOBS:-$(nproc)}
echo "== ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
run_parallel "$jobs" fuzz_one "$build/results" "${targets[@]}"
