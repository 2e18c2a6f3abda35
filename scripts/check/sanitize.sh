#!/usr/bin/env bash
# Runs the test suite under the sanitizers (gcc's runtimes):
#
#   scripts/check/sanitize.sh [asan|tsan|all]     (default: all)
#
#  asan  AddressSanitizer + UndefinedBehaviorSanitizer over every test that
#        ctest runs: the model and server suites, the tokenizer and trainer
#        tests with the SentencePiece plugin, and the scripts that drive the
#        real attn-server, attnctl and attn-train binaries (all built with
#        the sanitizers), in build-asan.
#  tsan  ThreadSanitizer over the server tests (the engine, request stream,
#        delivery thread, service, state reuse, the secure server), in
#        build-tsan; scripts/check/tsan.supp says what TSan cannot see and why.
#
# The SentencePiece plugin loads under both (see LibcDlopen in
# model/text/sentencepiece_backend.cc). Leak detection is off: LibTorch and
# gRPC keep process-lifetime allocations that LeakSanitizer reports at exit;
# scripts/check/soak.sh is the leak check (RSS and descriptors flat over 30 min).
# From empty build directories with an empty ccache, asan takes about 80
# minutes on 2 cores and tsan about 15; docs/reliability.md records the last
# clean run.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-all}
case "$mode" in asan | tsan | all) ;; *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;; esac
bash scripts/install_deps.sh
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# configure DIR FLAGS: a sanitized RelWithDebInfo build of the project. The
# plugin (a MODULE) gets the flags too, so it links the same runtime.
configure() {
  local dir=$1 flags=$2
  # -Werror off: at -O2 the sanitizers make gcc warn inside LibTorch's headers.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_WERROR=OFF \
    -DATTN_BUILD_BENCHMARKS=OFF "${launcher[@]}" -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
    -DCMAKE_MODULE_LINKER_FLAGS="$flags" > /dev/null
}

if [ "$mode" != tsan ]; then
  echo "== ASan+UBSan: build (build-asan)"
  # vptr checks need RTTI of every class in a hierarchy; LibTorch's
  # libraries are built without the sanitizer, so they would misfire.
  configure build-asan "-fsanitize=address,undefined -fno-sanitize=vptr"
  cmake --build build-asan
  echo "== ASan+UBSan: every test"
  # Sanitizer reports fail a test: halt_on_error turns them into a non-zero exit.
  ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j 2 --timeout 1800
fi

if [ "$mode" != asan ]; then
  echo "== TSan: build (build-tsan)"
  configure build-tsan "-fsanitize=thread"
  cmake --build build-tsan --target server_tests
  echo "== TSan: the server tests"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$PWD/scripts/check/tsan.supp" \
    build-tsan/tests/server/server_tests
fi
echo "sanitize: clean"
