#!/usr/bin/python3
"""Checks, without a GPU machine, that the project compiles against a newer
LibTorch than Debian 12's: downloads Debian's libtorch-dev of a newer suite
(sid by default, whose LibTorch follows PyTorch's releases) into a private
folder, without installing it, and runs the compiler with -fsyntax-only on
every translation unit of a finished build's compile_commands.json, with
that LibTorch's headers in place of /usr/include's. The C++ standard is the
one those headers ask for (ATen.h refuses C++17 from some release on), as
scripts/gpu/device_run.sh chooses it there.

    /usr/bin/python3 scripts/gpu/check_headers.py [--suite=sid] [--build=build]

Prints one line per failing translation unit with its first errors and the
totals; exits 1 when any fails. Needs Debian's package servers (apt-get) and
about 40 MB under --work.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import shlex
import subprocess
import sys

TORCH_API = "/usr/include/torch/csrc/api/include"


def apt_options(work):
    return ["-o", f"Dir::Etc::SourceList={work}/sources.list",
            "-o", f"Dir::Etc::SourceParts={work}/sources.list.d",
            "-o", f"Dir::State::Lists={work}/lists",
            "-o", f"Dir::Cache={work}/cache"]


def fetch_headers(work, suite, version):
    """Downloads and unpacks libtorch-dev of `suite`; returns its version."""
    for folder in ("sources.list.d", "lists/partial", "cache/archives/partial", "debs"):
        os.makedirs(os.path.join(work, folder), exist_ok=True)
    with open(os.path.join(work, "sources.list"), "w") as out:
        out.write("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                  f"http://deb.debian.org/debian {suite} main\n")
    options = apt_options(work)
    subprocess.run(["apt-get", *options, "-qq", "update"], check=True)
    package = "libtorch-dev" + (f"={version}" if version else "")
    for old in glob.glob(os.path.join(work, "debs", "*.deb")):
        os.remove(old)
    subprocess.run(["apt-get", *options, "-qq", "download", package],
                   cwd=os.path.join(work, "debs"), check=True)
    deb = glob.glob(os.path.join(work, "debs", "*.deb"))[0]
    subprocess.run(["rm", "-rf", os.path.join(work, "root")], check=True)
    subprocess.run(["dpkg-deb", "-x", deb, os.path.join(work, "root")], check=True)
    return os.path.basename(deb).split("_")[1]


def standard(root):
    with open(os.path.join(root, "usr/include/ATen/ATen.h")) as header:
        return "c++20" if "C++20 or later" in header.read() else "c++17"


def syntax_command(command, root, std):
    """The build's command for one file, reading `root`'s LibTorch, parsing only."""
    args, out, i = shlex.split(command), [], 0
    while i < len(args):
        arg = args[i]
        if arg in ("-include", "-o", "-x"):  # the precompiled header, the output
            i += 2
            continue
        if arg not in ("-c", "-Winvalid-pch", "-fpch-preprocess", "-Werror"):
            if arg == "-isystem" and args[i + 1] == TORCH_API:
                out += ["-isystem", root + TORCH_API, "-isystem", root + "/usr/include"]
                i += 1
            else:
                out.append("-std=" + std if arg.startswith("-std=") else arg)
        i += 1
    return out[:-1] + ["-fsyntax-only", out[-1]]


def check(entry, root, std):
    source = entry["file"]
    if "cmake_pch" in source or TORCH_API not in entry["command"]:
        return source, 0, ""  # the shared header itself, or a file without LibTorch
    done = subprocess.run(syntax_command(entry["command"], root, std), cwd=entry["directory"],
                          capture_output=True, text=True)
    return source, done.returncode, done.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="sid")
    parser.add_argument("--version", default="", help="libtorch-dev's version (default: newest)")
    parser.add_argument("--build", default="build")
    parser.add_argument("--work", default="/tmp/attn-torch-headers")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    flags = parser.parse_args()
    version = fetch_headers(flags.work, flags.suite, flags.version)
    root, entries = os.path.join(flags.work, "root"), json.load(
        open(os.path.join(flags.build, "compile_commands.json")))
    std = standard(root)
    print(f"check_headers: LibTorch {version} from Debian {flags.suite}, {std}, "
          f"{len(entries)} translation units", flush=True)
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(flags.jobs) as pool:
        for source, code, errors in pool.map(lambda e: check(e, root, std), entries):
            if code != 0:
                failed += 1
                first = [line for line in errors.splitlines() if "error" in line][:3]
                print(f"FAILED {source}\n  " + "\n  ".join(first), flush=True)
    print(f"check_headers: {len(entries) - failed} of {len(entries)} parse against "
          f"LibTorch {version}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
