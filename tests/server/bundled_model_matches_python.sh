#!/usr/bin/env bash
# The bundled default model, served by the real attn-server, generates the
# same greedy tokens as an independent Python eager implementation of the
# AFT-conv recurrence on the same weights (tests/tools/python_eager_baseline.py).
#   bundled_model_matches_python.sh ATTN_SERVER ATTNCTL
set -euo pipefail
server_bin=$1 ctl_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
. "$repo/scripts/lib/local_server.sh"
use_binaries "$server_bin" "$ctl_bin"
log=$(mktemp)
trap 'kill_servers; rm -f "$log"' EXIT
start_server "$log" --models="$repo/models/aft-conv.pt" --metrics_port=-1 --threads=1
served=$("$ctl_bin" --server=127.0.0.1:$server_port generate --ids=5,17,300 --max_tokens=24 \
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
