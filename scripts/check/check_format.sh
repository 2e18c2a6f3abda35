#!/usr/bin/env bash
# The C++ sources git tracks, formatted as the repository's .clang-format
# says (clang-format 14); names each file that is not, and how to fix it.
#   scripts/check/check_format.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
format=$(command -v clang-format-14 || command -v clang-format) ||
  { echo "clang-format is not installed (scripts/install_deps.sh installs it)" >&2; exit 1; }
bad=()
while IFS= read -r file; do
  "$format" --style=file --dry-run -Werror "$file" > /dev/null 2>&1 || bad+=("$file")
done < <(git ls-files '*.cc' '*.h' '*.cu')
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not formatted: %s\n' "${bad[@]}" >&2
  echo "fix with: $format --style=file -i ${bad[*]}" >&2
  exit 1
fi
echo "$(git ls-files '*.cc' '*.h' '*.cu' | wc -l) files formatted as .clang-format says"
