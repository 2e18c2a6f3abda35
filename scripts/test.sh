#!/usr/bin/env bash
# Sets everything up on a new Debian 12 machine and runs every test:
# installs the Debian packages, configures, builds (tests and benchmarks),
# runs the suite with CTest, then runs each libFuzzer target for 30 seconds
# on its corpus (scripts/fuzz.sh, a clang build in build-fuzz).
#
#   BUILD_DIR   build directory (default: build)
#   JOBS        parallel compile jobs (default: number of CPUs)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

echo "== configure ($BUILD_DIR)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== build ($JOBS jobs)"
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "== test"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
echo "== fuzz (30 s per target)"
bash scripts/fuzz.sh 30
