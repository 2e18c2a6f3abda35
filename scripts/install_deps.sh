#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages. Idempotent:
# a second run only checks that everything is present. clang-14 runs the
# thread-safety analysis (scripts/check/check_thread_safety.sh) and
# clang-format-14 the format check (scripts/check/check_format.sh). python3-grpcio,
# python3-grpc-tools and prometheus (promtool) serve the end-to-end tests;
# openssl makes the TLS tests' certificates; chromium runs the chat page's
# test. libboost-dev brings Boost.Beast, the HTTP API's server; libhiredis-dev
# the shared state tier's Redis client, and redis-server (with redis-tools)
# the Redis its tests start; libicu-dev the regexes, Unicode classes and
# normalization forms of tokenizer.json; python3-jinja2 renders the real chat
# templates the template interpreter is checked against.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsentencepiece-dev nlohmann-json3-dev libssl-dev openssl zlib1g-dev libboost-dev
  libhiredis-dev redis-server redis-tools libicu-dev
  clang-14 clang-format-14
  python3-torch python3-grpcio python3-grpc-tools python3-jinja2
  prometheus curl chromium
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install_deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install_deps: done"
