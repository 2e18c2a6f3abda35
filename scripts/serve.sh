#!/usr/bin/env bash
# Sets everything up on a new Debian 12 machine and starts the server on the
# bundled models (default: rwkv7) at 0.0.0.0:50051, metrics on :9090.
# Extra arguments go to attn-server (attn-server --help lists them), e.g.
#   bash scripts/serve.sh --port=50052 --max_active=1024
# --export=DIR (repeatable) serves a downloaded model instead: a Hugging Face
# directory attn-export reads, exported once to $BUILD_DIR/exported/NAME.pt
# (scripts/lib/export_once.sh) with its tokenizer and chat template.
set -euo pipefail
cd "$(dirname "$0")/.."
exports=() args=()
for arg in "$@"; do
  case $arg in
    --export=*) exports+=("${arg#--export=}") ;;
    *) args+=("$arg") ;;
  esac
done
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
targets=(attn-server attnctl)
[ ${#exports[@]} -eq 0 ] || targets+=(attn-export)
cmake --build "$BUILD_DIR" --target "${targets[@]}"
if [ ${#exports[@]} -gt 0 ]; then
  . scripts/lib/export_once.sh
  packages=()
  for dir in "${exports[@]}"; do
    packages+=("$(export_once "$BUILD_DIR/export/attn-export" "$dir" "$BUILD_DIR/exported")")
  done
  exec "$BUILD_DIR/server/attn-server" --models="$(IFS=,; echo "${packages[*]}")" "${args[@]}"
fi
ls models/*.pt > /dev/null 2>&1 || {
  echo "no model packages in models/; train them with scripts/models/train_bundled_models.sh" >&2
  exit 1
}
exec "$BUILD_DIR/server/attn-server" --models=models --default_model=rwkv7 "${args[@]}"
