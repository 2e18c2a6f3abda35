#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety) over every source file of
# the project that a lock annotation reaches, with the flags CMake compiles
# it with (compile_commands.json). A read or write of an ABSL_GUARDED_BY member
# without its lock, or a call to an ABSL_EXCLUSIVE_LOCKS_REQUIRED function
# without it, fails the check. gcc builds the project; clang only analyses.
#
#   bash scripts/check/check_thread_safety.sh [BUILD_DIR]     (default: build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
. "$repo/scripts/lib/parallel.sh"
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

# The files the analysis can find something in: every source file that
# declares a mutex or a lock annotation, or includes (directly or through
# other headers, as the compiler's dependency records of the last build say)
# a project header that does. A file that reaches neither has no capability
# to check. The selection is printed, so a file that drops out is visible.
# tests/fuzz (clang's fuzzing build) and tests/tsan (ThreadSanitizer builds)
# are not in this build.
dirs=(server model util client bench tests train export generate)
mapfile -t annotated < <(cd "$repo" && grep -rlE \
  'absl::Mutex|ABSL_GUARDED_BY|ABSL_PT_GUARDED_BY|ABSL_[A-Z_]*LOCKS_REQUIRED|ABSL_ACQUIRED' \
  --include='*.h' --include='*.cc' "${dirs[@]}" | grep -vE '^tests/(fuzz|tsan)/' | sort)
[ "${#annotated[@]}" -gt 0 ] || { echo "check_thread_safety: no file holds a mutex?" >&2; exit 1; }
(cd "$build" && ninja -t deps) > "$work/deps"
mapfile -t files < <(/usr/bin/python3 - "$repo" "$build" "$work/deps" "${annotated[@]}" <<'PY'
import os, re, sys
repo, build, deps_file, annotated = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
headers = {os.path.join(repo, f) for f in annotated if f.endswith(".h")}
chosen = {os.path.join(repo, f) for f in annotated if f.endswith(".cc")}
def sources_of(path):
    # A unity batch stands for the files it includes.
    if "/Unity/unity_" in path:
        return [l.split('"')[1] for l in open(path) if l.startswith("#include")]
    return [path]
deps, obj = [], None
def flush():
    if obj and any(d in headers for d in deps):
        for d in deps:
            if d.endswith((".cc", ".cxx")):
                chosen.update(s for s in sources_of(d)
                              if s.startswith(repo + "/") and not s.startswith(build + "/"))
for line in open(deps_file):
    if not line.startswith(" ") and ": #deps" in line:
        flush()
        obj, deps = line.split(":")[0], []
    elif line.strip():
        d = line.strip()
        deps.append(os.path.normpath(d if d.startswith("/") else os.path.join(build, d)))
flush()
for f in sorted(chosen):
    if os.path.isfile(f) and "/tests/fuzz/" not in f:
        print(f)
PY
)
[ "${#files[@]}" -gt 0 ] || { echo "check_thread_safety: no dependency records in $build" >&2; exit 1; }

# The compile command of each file, rewritten for clang: the gcc-only flags
# (the precompiled header, -fpch-preprocess, -fopenmp whose omp.h clang
# lacks here) go, and warnings other than the analysis are left to gcc.
# A file that starts from gcc's precompiled header (CMake's cmake_pch.hxx,
# <torch/torch.h>) starts from a clang one of the same header instead,
# built once with the templates it instantiates (-fpch-instantiate-templates)
# and the Abseil headers most files include: parsing and instantiating
# LibTorch's headers is 80% of a file's analysis, and without the shared
# header the check takes 27 CPU-minutes.
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
shared = {}  # gcc's precompiled header -> the clang one built in its place
for i, f in enumerate(files):
    entry = by_file.get(f)
    if entry is None:
        sys.exit(f"check_thread_safety: {f} is in no target's compile commands")
    args = shlex.split(entry["command"])
    # After the compiler: CMake may put a launcher (ccache, cmake -E env) first.
    first = next(n for n, a in enumerate(args) if a.endswith(("c++", "g++")))
    keep, skip, pch = [], False, ""
    for n, a in enumerate(args[first + 1:], first + 1):
        if skip:
            skip = False
            continue
        if a in ("-include", "-o", "-MF", "-MT", "-c"):
            if a == "-include" and args[n + 1].endswith("cmake_pch.hxx"):
                pch = args[n + 1]
            skip = True
            continue
        if a.startswith(("-W", "-fpch", "-fopenmp", "-MD", "-O", "-g")) or a == entry["file"]:
            continue
        keep.append(a)
    flags = " ".join(shlex.quote(a) for a in keep if a != f)
    # gcc shares its header among targets whose flags differ in defines or
    # -pthread; clang refuses a header built with other language options or
    # defines, so there is one per set of flags apart from include paths.
    key = (pch, tuple(a for n, a in enumerate(keep) if not a.startswith("-I")
                      and a != "-isystem" and keep[n - 1] != "-isystem"))
    if pch and key not in shared:
        j = len(shared)
        shared[key] = f"{work}/shared{j}.pch"
        with open(f"{work}/shared{j}.h", "w") as out:
            out.write(f'#include "{pch}"\n' + "".join(f"#include <absl/{h}.h>\n" for h in (
                "status/status", "status/statusor", "strings/cord", "synchronization/mutex",
                "container/flat_hash_map", "time/time", "time/clock")))
        with open(f"{work}/shared{j}.cmd", "w") as out:
            out.write(entry["directory"] + "\n" + flags + "\n" + f"{work}/shared{j}.h\n")
    with open(f"{work}/cmd{i}", "w") as out:
        out.write(entry["directory"] + "\n" + flags + "\n" + f + "\n" + shared.get(key, "") + "\n")
PY
# The shared headers, built one at a time (each takes 25 s and 1 GB).
for cmd in "$work"/shared*.cmd; do
  [ -e "$cmd" ] || continue
  { read -r dir; read -r flags; read -r header; } < "$cmd"
  # shellcheck disable=SC2086
  (cd "$dir" && eval "$clang" $flags -fpch-instantiate-templates -Wno-pragma-system-header-outside-header \
     -x c++-header "$header" -o "${header%.h}.pch") || {
    echo "check_thread_safety: clang could not precompile $header (flags from $cmd)" >&2
    exit 1
  }
  # The deliberate violation again, through the shared header.
  # shellcheck disable=SC2086
  if (cd "$dir" && eval "$clang" $flags -include-pch "${header%.h}.pch" "${analyse[*]}" \
        "$work/violation.cc") 2> "$work/violation.log"; then
    echo "check_thread_safety: through ${header%.h}.pch clang did not flag an unguarded write" >&2
    exit 1
  fi
done
# analyse_one INDEX CMD: one file; its verdict goes to $work/INDEX.result,
# clang's words to CMD.log.
# shellcheck disable=SC2317  # called through run_parallel
analyse_one() {
  local result=$work/$1.result cmd=$2 dir flags file pch
  { read -r dir; read -r flags; read -r file; read -r pch; } < "$cmd"
  [ -z "$pch" ] || flags+=" -include-pch $pch"
  # shellcheck disable=SC2086
  if (cd "$dir" && eval "$clang" $flags "${analyse[*]}" "$file") 2> "$cmd.log"; then
    echo "ok   ${file#"$repo"/}" > "$result"
  else
    { echo "FAIL ${file#"$repo"/}"; grep -E 'warning|error' "$cmd.log" | head -20; } > "$result"
  fi
}
# THREAD_SAFETY_JOBS files at a time (default: the CPUs).
commands=()
for ((i = 0; i < ${#files[@]}; ++i)); do commands+=("$work/cmd$i"); done
status=0
run_parallel "${THREAD_SAFETY_JOBS:-$(nproc)}" analyse_one "$work" "${commands[@]}" || status=1
echo "check_thread_safety: ${#files[@]} files analysed"
exit $status
