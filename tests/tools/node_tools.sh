#!/usr/bin/env bash
# Installs the npm packages of every test into NODE_TOOLS before any of those
# tests runs: the CTest fixture node_tools (tests/CMakeLists.txt).
#
# Why: an install rewrites NODE_TOOLS/package.json, and node reads that file
# whenever a test's script kept there imports a package. One test installing
# while another ran node made the reader fail on a half-written file
# ("Invalid package config ... Unexpected end of JSON input"). The install
# lock (scripts/lib/node_tools.sh) keeps installs apart, not readers.
#
# The packages are not listed here: each test's own `npm_packages
# "$node_tools" ...` call (which stays, so that a test also runs alone) is
# run in turn, so the tests remain the one place that names them.
#   node_tools.sh NODE_TOOLS
set -euo pipefail
[ $# -eq 1 ] || { sed -n 2,14p "$0"; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
node_tools=$(mkdir -p "$1" && cd "$1" && pwd)
# shellcheck source=scripts/lib/node_tools.sh
. "$repo/scripts/lib/node_tools.sh"

# Each call with its continuation lines joined, up to its `||`.
# shellcheck disable=SC2016  # the literal text of the tests' calls
found=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$repo"/tests/server/*.sh "$repo"/tests/text/*.sh |
  grep -F 'npm_packages "$node_tools"' | sed 's/ *||.*//') ||
  { echo "no npm_packages call found under tests/" >&2; exit 1; }
calls=0
while IFS= read -r call; do
  read -r -a words <<< "${call#*npm_packages \"\$node_tools\"}"
  echo "== npm_packages ${words[*]}"
  npm_packages "$node_tools" "${words[@]}"
  calls=$((calls + 1))
done <<< "$found"
echo "installed the packages of $calls calls into $node_tools"
