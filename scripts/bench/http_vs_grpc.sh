#!/usr/bin/env bash
# 64 concurrent streaming chats over HTTP against the same over gRPC, one
# server, rounds alternating the two (scripts/bench/http_vs_grpc.mjs); the
# table it ends with goes to docs/benchmarks-log.md.
#   bash scripts/bench/http_vs_grpc.sh [BUILD_DIR]       (default: build)
#   MODEL (aft-decay), STREAMS (64), MAX_TOKENS (256), ROUNDS (5),
#   NODE_TOOLS (BUILD_DIR/node-tools): where the npm packages go
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
node_tools=${NODE_TOOLS:-$build/node-tools}
cmake --build "$build" --target attn-server attnctl > /dev/null
. scripts/lib/local_server.sh
use_binaries "$build/server/attn-server" "$build/client/attnctl"
trap kill_servers EXIT

if [ ! -d "$node_tools/node_modules/@grpc/grpc-js" ] || [ ! -d "$node_tools/node_modules/openai" ]; then
  echo "== installing openai and @grpc/grpc-js into $node_tools"
  npm install --silent --no-audit --no-fund --prefix "$node_tools" openai@4 @grpc/grpc-js@1 \
    @grpc/proto-loader@0.7 > /dev/null
fi
cp scripts/bench/http_vs_grpc.mjs "$node_tools/"

model=${MODEL:-aft-decay}
echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(date -u +%F)"
start_server /tmp/http_vs_grpc_server.log --models="models/$model.pt" --max_active=256
HTTP_URL="http://127.0.0.1:$http_port/v1" GRPC="127.0.0.1:$server_port" \
  PROTO="$PWD/proto/attn/v1/text_generation.proto" PROTO_ROOT="$PWD/proto" MODEL="$model" \
  node "$node_tools/http_vs_grpc.mjs"
stop_server "$server_pid"
