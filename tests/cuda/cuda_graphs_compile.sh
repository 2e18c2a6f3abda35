#!/usr/bin/env bash
# The sources only a GPU build compiles with LibTorch's CUDA half (the
# decode step's CUDA graphs, model/backend/step_graphs_cuda.cc, and the
# stream the kernels queue on, model/mixers/cuda_stream.cc) compile against
# this machine's LibTorch headers and the CUDA toolkit's, without a GPU or a
# CUDA LibTorch: a syntax and type check (nothing links). Debian's LibTorch
# ships the ATen/c10 CUDA headers but not the one its build generates,
# c10/cuda/impl/cuda_cmake_macros.h, which defines nothing these files need;
# an empty one stands in. Skipped
# (exit 77) without the CUDA headers or LibTorch's.
#   cuda_graphs_compile.sh
#   TORCH_INCLUDE (/usr/include), CXX_STD (c++17), CUDA_INCLUDE
#   (/usr/local/cuda/include): another LibTorch's headers, such as those
#   scripts/gpu/check_headers.py unpacks (C++20 from 2.x on)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
torch_include=${TORCH_INCLUDE:-/usr/include}
if [ ! -f "$cuda_include/cuda_runtime_api.h" ] || [ ! -f "$torch_include/ATen/cuda/CUDAGraph.h" ]; then
  echo "SKIP: no CUDA headers under $cuda_include or no ATen/cuda under $torch_include"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/c10/cuda/impl"
echo '#pragma once' > "$work/c10/cuda/impl/cuda_cmake_macros.h"
# Another LibTorch's headers (TORCH_INCLUDE, C++ standard CXX_STD) come
# before the system's.
torch_flags=(-isystem "$torch_include/torch/csrc/api/include")
[ "$torch_include" = /usr/include ] || torch_flags+=(-isystem "$torch_include")
for source in "$repo/model/backend/step_graphs_cuda.cc" "$repo/model/mixers/cuda_stream.cc"; do
  ${CXX:-g++} -std="${CXX_STD:-c++17}" -fsyntax-only -Wall -Wextra -Werror -I"$repo" -isystem "$work" \
    -isystem "$cuda_include" "${torch_flags[@]}" "$source" ||
    { echo "FAIL: $source does not compile against the CUDA headers" >&2; exit 1; }
  echo "ok: $(basename "$source") compiles against the CUDA LibTorch headers"
done
