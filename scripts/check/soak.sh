#!/usr/bin/env bash
# Soak and chaos against the real attn-server on 127.0.0.1 (scripts/check/soak.py
# says what runs and what is checked); bounded in time, loopback only.
#   scripts/check/soak.sh [MINUTES] [WORKERS]      (defaults: 30, 8; needs a build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$repo/build}
minutes=${1:-30}
workers=${2:-8}
py=/usr/bin/python3
. "$repo/scripts/lib/local_server.sh"
log=$(mktemp)
use_binaries "$build/server/attn-server" "$build/client/attnctl"
trap 'kill_servers; rm -f "$log"' EXIT
start_server "$log" --models="$repo/models/aft-decay.pt"
port=$server_port pid=$server_pid
$py "$repo/scripts/check/soak.py" --server=127.0.0.1:$port --metrics_port="$metrics_port" --pid=$pid \
  --attnctl="$build/client/attnctl" --minutes="$minutes" --workers="$workers"
