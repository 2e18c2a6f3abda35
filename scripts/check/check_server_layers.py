"""The server's components include only those below them.

    check_server_layers.py

server/ is one folder per CMake target (server/CMakeLists.txt). Each file
belongs to its folder's component, files directly in server/ to the top
one. A file may include its own component and the ones below it, never one
above or beside it, so that no two components include each other. Fails
(exit 1) naming each include that breaks the order.
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Lowest first; components on one line are siblings that may not include
# each other.
LAYERS = [["state"], ["engine"], ["metrics"], ["core"], ["grpc", "http"], ["server"]]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
# Headers that must not reach LibTorch: those of the components above the
# engine, and the engine's interface.
TORCH_FREE_COMPONENTS = {"metrics", "core", "grpc", "http", "server"}
TORCH_FREE_HEADERS = {"server/engine/engine.h"}
TORCH_INCLUDE = re.compile(r'^#include <((?:torch|ATen|c10|caffe2)/[^>]+)>', re.M)
PROJECT_INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def torch_chain(path, seen):
    """The includes from `path` (repository-relative) to a LibTorch header,
    through the project's own headers; None when there is none."""
    if path in seen or not os.path.isfile(os.path.join(REPO, path)):
        return None
    seen.add(path)
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read()
    found = TORCH_INCLUDE.search(text)
    if found:
        return [path, f"<{found.group(1)}>"]
    for header in PROJECT_INCLUDE.findall(text):
        chain = torch_chain(header, seen)
        if chain:
            return [path] + chain
    return None


def component(path):
    """The component of a repository path under server/."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else "server"


def layer_errors(path, text):
    """The includes of `path` (with contents `text`) that break the order."""
    mine = component(path)
    if mine not in RANK:
        return [f"{path}: server/{mine}/ is not in this script's LAYERS"]
    errors = []
    for target in re.findall(r'^#include "(server/[^"]+)"', text, re.M):
        theirs = component(target)
        if theirs != mine and RANK.get(theirs, len(LAYERS)) >= RANK[mine]:
            errors.append(f"{path} ({mine}) includes {target} ({theirs}), which is not below it")
    return errors


def must_not_reach_torch(path):
    """Whether `path` is a header of a layer above the engine, or the
    engine's interface."""
    return path.endswith(".h") and (component(path) in TORCH_FREE_COMPONENTS
                                    or path in TORCH_FREE_HEADERS)


def main():
    errors, files = [], 0
    for folder, _, names in os.walk(os.path.join(REPO, "server")):
        for name in names:
            if not name.endswith((".h", ".cc", ".in")):
                continue
            path = os.path.relpath(os.path.join(folder, name), REPO)
            files += 1
            with open(os.path.join(REPO, path), encoding="utf-8") as f:
                errors += layer_errors(path, f.read())
            chain = torch_chain(path, set()) if must_not_reach_torch(path) else None
            if chain:
                errors.append(f"{path} reaches LibTorch: {' -> '.join(chain)}; the layers above "
                              "the engine name the model's types by declaration only")
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"PASS: {files} files of server/ include only their own component and those below: "
          + " < ".join("/".join(names) for names in LAYERS)
          + "; the headers above the engine reach no LibTorch header")
    return 0


if __name__ == "__main__":
    sys.exit(main())
