#!/usr/bin/env bash
# Builds and runs the mixer benchmarks and writes docs/benchmarks-log.md.
# Takes about 15 minutes on 2 cores; Google Benchmark prints each result as
# it completes. Run it on an otherwise idle machine.
#
#   BUILD_DIR       build directory (default: build-release)
#   ATTN_THREADS    intra-op threads (default: all CPUs)
#   BENCH_FILTER    regex of benchmarks to run (default: all)
#   REPETITIONS     repetitions per benchmark; the table quotes medians (default: 5)
set -euo pipefail
cd "$(dirname "$0")/../.."

bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build-release}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" --target mixer_bench

out_dir=$(mktemp -d)
json="$out_dir/mixer_bench.json"
echo "== running mixer_bench (results also in $json)"
"$BUILD_DIR/bench/mixer_bench" \
  --benchmark_filter="${BENCH_FILTER:-.}" \
  --benchmark_repetitions="${REPETITIONS:-5}" \
  --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.3 \
  --benchmark_out="$json" --benchmark_out_format=json

command_line="ATTN_THREADS=${ATTN_THREADS:-$(nproc)} bash scripts/bench/run_benchmarks.sh"
# Everything from the serving section (scripts/bench/bench_server.sh) on is
# kept as it is.
serving=$(sed -n '/^## Serving/,$p' docs/benchmarks-log.md 2>/dev/null || true)
python3 scripts/bench/bench_report.py "$json" "$command_line" > docs/benchmarks-log.md
[ -n "$serving" ] && printf '\n%s\n' "$serving" >> docs/benchmarks-log.md
echo "== wrote docs/benchmarks-log.md"
