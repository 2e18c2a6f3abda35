#!/usr/bin/env bash
# The bundled default model, served by the real attn-server, generates the
# same greedy tokens as an independent Python eager implementation of the
# AFT-conv recurrence on the same weights (tests/tools/python_eager_baseline.py).
#   bundled_model_matches_python.sh ATTN_SERVER ATTNCTL
set -euo pipefail
server_bin=$1 ctl_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$server_bin" --models="$repo/models/aft-conv.pt" --default_model=aft-conv --host=127.0.0.1 --port="$port" \
  --metrics_port=-1 --threads=1 > "$log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do "$ctl_bin" --server=127.0.0.1:$port health > /dev/null 2>&1 && break; sleep 0.2; done
served=$("$ctl_bin" --server=127.0.0.1:$port generate --ids=5,17,300 --max_tokens=24 \
         --temperature=0 --json)
python=$($py "$repo/tests/tools/python_eager_baseline.py" "$repo/models/aft-conv.pt" --tokens 24 \
         --prompt 5,17,300 --threads 1)
$py - "$served" "$python" <<'PY'
import json, sys
served = [int(i) for i in json.loads(sys.argv[1])["token_ids"]]
python = json.loads(sys.argv[2])["greedy_ids"]
assert served == python[:len(served)], f"server {served}\npython {python}"
print(f"PASS: {len(served)} greedy tokens equal")
PY
