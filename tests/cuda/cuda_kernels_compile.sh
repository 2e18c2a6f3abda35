#!/usr/bin/env bash
# The CUDA kernels of model/cuda compile with nvcc for the GPUs the project
# is checked on (sm_90: H100 and H200), warnings as errors, into code for
# that architecture, on a machine without a GPU or a CUDA LibTorch. Skipped
# (exit 77) where no nvcc is installed: NVCC, then PATH, then
# /usr/local/cuda/bin/nvcc.
#   cuda_kernels_compile.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$nvcc" ]; then
  echo "SKIP: no nvcc (set NVCC)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
sources=("$repo"/model/cuda/*.cu)
[ -f "${sources[0]}" ] || fail "no .cu file under model/cuda"
for source in "${sources[@]}"; do
  name=$(basename "$source" .cu)
  flags=(-std=c++17 -arch=sm_90 -I"$repo" -Werror all-warnings -Xcompiler "-Wall,-Wextra,-Werror")
  "$nvcc" "${flags[@]}" -c "$source" -o "$work/$name.o" || fail "$source does not compile"
  # The device code alone, to check its architecture (the ELF flags' second
  # byte) and that no kernel spills registers to memory.
  "$nvcc" "${flags[@]}" -Xptxas -v -cubin "$source" -o "$work/$name.cubin" 2> "$work/$name.ptxas" ||
    fail "$source: no cubin"
  readelf -h "$work/$name.cubin" | grep 'Machine: *NVIDIA CUDA' > /dev/null || fail "$name.cubin is not CUDA code"
  arch=$(( $(readelf -h "$work/$name.cubin" | awk '/Flags:/ {print $2}') >> 8 & 0xff ))
  [ "$arch" -eq 90 ] || fail "$name.cubin is for sm_$arch, not sm_90"
  if grep -E 'bytes spill (stores|loads)' "$work/$name.ptxas" | grep -qv ' 0 bytes spill stores, 0 bytes spill loads'; then
    fail "$source spills registers: $(grep spill "$work/$name.ptxas")"
  fi
  echo "ok: $name for sm_90: $(grep -cE '^ptxas info *: Compiling entry' "$work/$name.ptxas") kernels," \
    "$(grep -oE 'Used [0-9]+ registers' "$work/$name.ptxas" | tr '\n' ' ')"
done
