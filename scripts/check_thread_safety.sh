#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety) over every source file of
# the project that holds an absl::Mutex, with the flags CMake compiles it
# with (compile_commands.json). A read or write of an ABSL_GUARDED_BY member
# without its lock, or a call to an ABSL_EXCLUSIVE_LOCKS_REQUIRED function
# without it, fails the check. gcc builds the project; clang only analyses.
#
#   bash scripts/check_thread_safety.sh [BUILD_DIR]     (default: build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
clang=${CLANGXX:-clang++-14}
command -v "$clang" > /dev/null || {
  echo "check_thread_safety: $clang not found; install clang-14 (scripts/install_deps.sh)" >&2
  exit 1
}
[ -f "$build/compile_commands.json" ] || {
  echo "check_thread_safety: no $build/compile_commands.json; configure with CMake first" >&2
  exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
analyse=(-fsyntax-only -Wthread-safety -Werror=thread-safety -Wno-unknown-warning-option)

# The check must be able to fail: a deliberate violation has to be reported,
# or the annotations have become no-ops for clang (say, a header change).
cat > "$work/violation.cc" <<'CC'
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
struct Counter {
  absl::Mutex mu;
  int value ABSL_GUARDED_BY(mu) = 0;
  void Bump() { ++value; }  // no lock
};
CC
if "$clang" -std=c++17 "${analyse[@]}" "$work/violation.cc" 2> "$work/violation.log"; then
  echo "check_thread_safety: clang did not flag an unguarded write; the analysis is not active" >&2
  exit 1
fi

# The files that hold a mutex, and the .cc files whose header does.
mapfile -t files < <(cd "$repo" && {
  grep -rl --include='*.cc' 'absl::Mutex' server model util
  grep -rl --include='*.h' 'absl::Mutex' server model util | sed 's/\.h$/.cc/'
} | sort -u | while read -r f; do [ -f "$f" ] && echo "$repo/$f"; done)
[ "${#files[@]}" -gt 0 ] || { echo "check_thread_safety: no file holds a mutex?" >&2; exit 1; }

# The compile command of each file, rewritten for clang: the gcc-only flags
# (the precompiled header, -fpch-preprocess, -fopenmp whose omp.h clang
# lacks here) go, and warnings other than the analysis are left to gcc.
/usr/bin/python3 - "$build/compile_commands.json" "$work" "${files[@]}" <<'PY'
import json, shlex, sys
commands, work, files = sys.argv[1], sys.argv[2], sys.argv[3:]
by_file = {}
for entry in json.load(open(commands)):
    by_file[entry["file"]] = entry
    # A unity batch (CMake's UNITY_BUILD) compiles its member files with its
    # own command: each member is analysed alone with that command.
    if "/Unity/unity_" in entry["file"]:
        for line in open(entry["file"]):
            if line.startswith("#include"):
                by_file.setdefault(line.split('"')[1], entry)
for i, f in enumerate(files):
    entry = by_file.get(f)
    if entry is None:
        sys.exit(f"check_thread_safety: {f} is in no target's compile commands")
    args = shlex.split(entry["command"])
    # After the compiler: CMake may put a launcher (ccache, cmake -E env) first.
    first = next(n for n, a in enumerate(args) if a.endswith(("c++", "g++")))
    keep, skip = [], False
    for a in args[first + 1:]:
        if skip:
            skip = False
            continue
        if a in ("-include", "-o", "-MF", "-MT", "-c"):
            skip = True
            continue
        if a.startswith(("-W", "-fpch", "-fopenmp", "-MD", "-O", "-g")) or a == entry["file"]:
            continue
        keep.append(a)
    with open(f"{work}/cmd{i}", "w") as out:
        out.write(entry["directory"] + "\n" + " ".join(shlex.quote(a) for a in keep if a != f) + "\n" + f + "\n")
PY
status=0
for cmd in "$work"/cmd*; do
  { read -r dir; read -r flags; read -r file; } < "$cmd"
  # shellcheck disable=SC2086
  if ! (cd "$dir" && eval "$clang" $flags "${analyse[*]}" "$file") 2> "$cmd.log"; then
    echo "FAIL ${file#$repo/}"
    grep -E 'warning|error' "$cmd.log" | head -20
    status=1
  else
    echo "ok   ${file#$repo/}"
  fi
done
echo "check_thread_safety: ${#files[@]} files analysed"
exit $status
