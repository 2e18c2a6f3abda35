#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang-14, AddressSanitizer
# and UndefinedBehaviorSanitizer in build-fuzz, and runs each on its corpus.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# SECONDS_PER_TARGET defaults to 30 (what CI runs); docs/reliability.md
# records the long runs. New inputs the fuzzer finds go to a scratch corpus,
# not the repository's seeds. A crash leaves its input in build-fuzz/findings
# and fails the script, naming the target and the file to replay.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_state_blob fuzz_metrics_request fuzz_api_keys
                                     fuzz_tokenizer fuzz_generate_request fuzz_config)
build=${FUZZ_BUILD_DIR:-build-fuzz}

echo "== configure ($build, clang-14)"
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DATTN_FUZZ=ON -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_BENCHMARKS=OFF -DATTN_WERROR=OFF > /dev/null
echo "== build ${targets[*]}"
cmake --build "$build" --target "${targets[@]}"

mkdir -p "$build/findings"
failed=0
for target in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/${target#fuzz_}
  scratch=$build/corpus/${target#fuzz_}
  mkdir -p "$scratch"
  echo "== $target: ${seconds}s on $seeds"
  if ! "$build/tests/fuzz/$target" "$scratch" "$seeds" -max_total_time="$seconds" \
      -artifact_prefix="$build/findings/$target-" -print_final_stats=1 \
      > "$build/$target.log" 2>&1; then
    echo "FAIL: $target found a crash; see $build/$target.log and $build/findings/"
    tail -40 "$build/$target.log"
    failed=1
    continue
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|cov: " "$build/$target.log" | tail -3
done
exit $failed
