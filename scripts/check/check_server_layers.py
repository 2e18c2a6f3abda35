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


def component(path):
    """The component of a repository path under server/."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else "server"


def main():
    errors, files = [], 0
    for folder, _, names in os.walk(os.path.join(REPO, "server")):
        for name in names:
            if not name.endswith((".h", ".cc", ".in")):
                continue
            path = os.path.relpath(os.path.join(folder, name), REPO)
            files += 1
            mine = component(path)
            if mine not in RANK:
                errors.append(f"{path}: server/{mine}/ is not in this script's LAYERS")
                continue
            with open(os.path.join(REPO, path), encoding="utf-8") as f:
                includes = re.findall(r'^#include "(server/[^"]+)"', f.read(), re.M)
            for target in includes:
                theirs = component(target)
                if theirs == mine:
                    continue
                if RANK.get(theirs, len(LAYERS)) >= RANK[mine]:
                    errors.append(f"{path} ({mine}) includes {target} ({theirs}), "
                                  "which is not below it")
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"PASS: {files} files of server/ include only their own component and those below: "
          + " < ".join("/".join(names) for names in LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
