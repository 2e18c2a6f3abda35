#!/usr/bin/env bash
# Soak and chaos against the real attn-server on 127.0.0.1 (scripts/soak.py
# says what runs and what is checked); bounded in time, loopback only.
#   scripts/soak.sh [MINUTES] [WORKERS]      (defaults: 30, 8; needs a build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
minutes=${1:-30}
workers=${2:-8}
py=/usr/bin/python3
. "$repo/scripts/local_server.sh"
port=$(free_port) metrics_port=$(free_port)
log=$(mktemp)
"$build/server/attn-server" --models="$repo/models/aft-decay.pt" --default_model=aft-decay \
  --host=127.0.0.1 --port="$port" --metrics_port="$metrics_port" > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
wait_healthy "$build/client/attnctl" "$port" "$pid" "$log"
$py "$repo/scripts/soak.py" --server=127.0.0.1:$port --metrics_port="$metrics_port" --pid=$pid \
  --attnctl="$build/client/attnctl" --minutes="$minutes" --workers="$workers"
