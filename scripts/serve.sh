#!/usr/bin/env bash
# Sets everything up on a new Debian 12 machine and starts the server on the
# bundled models (default: rwkv7) at 0.0.0.0:50051, metrics on :9090.
# Extra arguments go to attn-server (attn-server --help lists them), e.g.
#   bash scripts/serve.sh --port=50052 --max_active=1024
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$BUILD_DIR" --target attn-server attnctl
ls models/*.pt > /dev/null 2>&1 || {
  echo "no model packages in models/; train them with scripts/models/train_bundled_models.sh" >&2
  exit 1
}
exec "$BUILD_DIR/server/attn-server" --models=models --default_model=rwkv7 "$@"
