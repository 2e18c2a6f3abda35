#!/usr/bin/env python3
"""Lays out the root filesystem of the slim runtime image (Dockerfile).

    runtime_rootfs.py DEST BINARY... --plugin PLUGIN [--models DIR]

DEST receives the binaries (/opt/attn/bin), the SentencePiece plugin
(/opt/attn/lib), the models (/opt/attn/models), the dynamic loader, the
shared libraries they load and nothing else: no shell, no package manager, no
setuid file. /etc/passwd names one unprivileged user, attn (10001), whose
shell does not exist.

Which libraries: the dependency graph the dynamic loader walks (DT_NEEDED,
resolved as ldd resolves it), from the binaries and the plugin. Debian's
libtorch_cpu lists libraries it takes no symbol from (OpenCV and FFmpeg, with
Qt, GDAL and codecs behind them: 300 MB). A library that defines no symbol any
kept object imports is replaced by an empty library of the same soname,
carrying only the symbol versions the kept objects require of it. The loader
resolves every symbol at load (libtorch is linked with BIND_NOW), so a
replaced library that something did call would fail at startup, not later;
and the script refuses to replace a library that a kept object imports from.

Prints what it kept and replaced, with sizes. Needs readelf and nm
(binutils), ldd and ldconfig (libc-bin), and gcc for the empty libraries.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIB_DIR = "usr/lib/x86_64-linux-gnu"
LOADER = "/lib64/ld-linux-x86-64.so.2"


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


class Elf:
    """The dynamic section of one shared object or executable."""

    def __init__(self, path):
        self.path = path
        self.imports, self.exports = set(), set()
        for line in run("nm", "-D", path).splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] in ("U", "w"):
                self.imports.add(fields[1].split("@")[0])
            elif len(fields) == 3 and fields[1] not in ("U", "w", "A"):
                self.exports.add(fields[2].split("@")[0])
        dynamic = run("readelf", "-d", path)
        self.needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", dynamic)
        # Symbol versions this object requires, by the library that must define them.
        self.version_needs = {}
        library = None
        for line in run("readelf", "-V", "-W", path).splitlines():
            m = re.search(r"File: (\S+)\s+Cnt:", line)
            if m:
                library = m.group(1)
                continue
            m = re.search(r"Name: (\S+)\s+Flags:", line)
            if m and library:
                self.version_needs.setdefault(library, set()).add(m.group(1))
            elif not line.startswith("  0x"):
                library = None


def resolve_all(roots):
    """soname -> path, as the loader resolves them for these roots."""
    paths = {}
    for root in roots:
        for line in run("ldd", root).splitlines():
            m = re.match(r"\s*(\S+) => (/\S+)", line)
            if m:
                paths[m.group(1)] = m.group(2)
    return paths


def choose(roots):
    """(kept: soname -> path, replaced: set of sonames)."""
    paths = resolve_all(roots)
    elves = {}

    def elf(path):
        if path not in elves:
            elves[path] = Elf(path)
        return elves[path]

    kept = {}
    while True:
        objects = [elf(r) for r in roots] + [elf(p) for p in kept.values()]
        imports = set().union(*(o.imports for o in objects))
        replaced, grew = set(), False
        for obj in objects:
            for soname in obj.needed:
                if soname in kept or soname.startswith("ld-linux"):
                    continue
                if soname not in paths:
                    sys.exit(f"runtime_rootfs: ldd cannot resolve {soname} (needed by {obj.path})")
                if elf(paths[soname]).exports & imports:
                    kept[soname] = paths[soname]
                    grew = True
                else:
                    replaced.add(soname)
        if not grew:
            break
    objects = [elf(r) for r in roots] + [elf(p) for p in kept.values()]
    for soname in replaced:
        used = elf(paths[soname]).exports & set().union(*(o.imports for o in objects))
        if used:  # cannot happen after the fixed point; kept as the contract
            sys.exit(f"runtime_rootfs: {soname} is imported from ({sorted(used)[:3]}); not replacing")
    versions = {}
    for obj in objects:
        for soname, needs in obj.version_needs.items():
            if soname in replaced:
                versions.setdefault(soname, set()).update(needs)
    return kept, replaced, versions, paths


def empty_library(dest, soname, versions):
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "empty.c")
        with open(source, "w") as f:
            f.write("/* Stands in for a library nothing here calls. */\n")
        args = ["gcc", "-shared", "-nostdlib", "-o", dest, source, f"-Wl,-soname,{soname}"]
        if versions:
            script = os.path.join(work, "versions.map")
            with open(script, "w") as f:
                f.writelines(f"{v} {{ }};\n" for v in sorted(versions))
            args.append(f"-Wl,--version-script={script}")
        subprocess.run(args, check=True)


def write_identity(dest):
    etc = os.path.join(dest, "etc")
    os.makedirs(etc, exist_ok=True)
    with open(os.path.join(etc, "passwd"), "w") as f:
        f.write("root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n")
        f.write("attn:x:10001:10001:attn-server:/opt/attn:/usr/sbin/nologin\n")
    with open(os.path.join(etc, "group"), "w") as f:
        f.write("root:x:0:\nattn:x:10001:\n")
    tmp = os.path.join(dest, "tmp")
    os.makedirs(tmp, exist_ok=True)
    os.chmod(tmp, 0o1777)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dest")
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--models", default="")
    args = parser.parse_args()

    roots = [os.path.abspath(b) for b in args.binaries] + [os.path.abspath(args.plugin)]
    kept, replaced, versions, paths = choose(roots)
    lib_dir = os.path.join(args.dest, LIB_DIR)
    os.makedirs(lib_dir, exist_ok=True)
    kept_bytes = 0
    for soname, path in sorted(kept.items()):
        shutil.copy2(os.path.realpath(path), os.path.join(lib_dir, soname))
        kept_bytes += os.path.getsize(os.path.realpath(path))
    replaced_bytes = 0
    for soname in sorted(replaced):
        empty_library(os.path.join(lib_dir, soname), soname, versions.get(soname, set()))
        replaced_bytes += os.path.getsize(os.path.realpath(paths[soname]))
    loader = os.path.join(args.dest, LOADER.lstrip("/"))
    os.makedirs(os.path.dirname(loader), exist_ok=True)
    shutil.copy2(os.path.realpath(LOADER), loader)

    for binary in args.binaries:
        target = os.path.join(args.dest, "opt/attn/bin", os.path.basename(binary))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(binary, target)
        os.chmod(target, 0o755)
    plugin = os.path.join(args.dest, "opt/attn/lib", os.path.basename(args.plugin))
    os.makedirs(os.path.dirname(plugin), exist_ok=True)
    shutil.copy2(args.plugin, plugin)
    os.chmod(plugin, 0o644)
    if args.models:
        models = os.path.join(args.dest, "opt/attn/models")
        os.makedirs(models, exist_ok=True)
        for name in sorted(os.listdir(args.models)):
            if name.endswith(".pt"):
                shutil.copy2(os.path.join(args.models, name), models)
    write_identity(args.dest)
    with open(os.path.join(args.dest, "etc/ld.so.conf"), "w") as f:
        f.write(f"/{LIB_DIR}\n")
    subprocess.run(["ldconfig", "-r", args.dest], check=True)

    print(f"runtime_rootfs: {len(kept)} libraries kept ({kept_bytes / 1e6:.0f} MB); "
          f"{len(replaced)} replaced by empty ones ({replaced_bytes / 1e6:.0f} MB not shipped, "
          f"plus what only they load): {' '.join(sorted(replaced))}")


if __name__ == "__main__":
    main()
