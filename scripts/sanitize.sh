#!/usr/bin/env bash
# Builds the model tests with AddressSanitizer and UndefinedBehaviorSanitizer
# and runs them. The tests that load the SentencePiece plugin (the tokenizer,
# generation and trainer tests, and the bundled packages, whose tokenizers
# are SentencePiece models) are left out: sanitizer runtimes refuse dlopen's
# RTLD_DEEPBIND, which the plugin needs (see model/text/sentencepiece_backend.h).
# For the same reason the server tests, whose tiny model has a SentencePiece
# tokenizer, cannot run here. Takes about 20 minutes on 2 cores from a clean
# build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build-asan}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize=vptr"
# -Werror off: at -O2 the sanitizers make gcc warn inside LibTorch's headers.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_WERROR=OFF \
  -DATTN_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$BUILD_DIR" --target model_tests
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$BUILD_DIR/tests/model_tests" --gtest_filter='-*Tokenizer*:*Generation*:*Trainer*:*BundledModel*'
