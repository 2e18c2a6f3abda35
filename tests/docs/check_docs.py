"""Facts that live in the code and are shown in the docs must agree.

    check_docs.py --server=attn-server --attnctl=attnctl --train=attn-train

Fails (exit 1, naming each disagreement) when
  - the README's server flag table and `attn-server --help` differ: a flag
    missing on either side, another default, or a wrong ATTN_ variable;
  - the README's attnctl table and `attnctl --help`'s commands differ;
  - the README's mixer kind table, the kinds `attn-train --help` lists (built
    from AllMixerKinds()) and the recipes of
    scripts/models/train_bundled_models.sh differ;
  - a package in models/ has no recipe, or its recipe's config
    (`attn-train --print_config`) differs from the package's own;
  - docs/README.md does not list exactly the files in docs/;
  - a doc names a repository path that does not exist;
  - the bundled default model differs between serve.sh, the Dockerfiles and
    the READMEs, or is not in models/;
  - the HTTP endpoint tables of the README and docs/openai.md and the routes
    in server/http/ differ;
  - docs/metrics.md and the metric families the server registers differ;
  - docs/design.md's layout table lacks a folder;
  - a source file or script names a repository path that does not exist;
  - scripts/README.md does not mention a script under scripts/;
  - docs/benchmarks.md names a section the log (docs/benchmarks-log.md)
    does not have;
  - the README is longer than 220 lines.
With --print-flag-table it prints the flag table from --help instead (a
starting point when flags change).
"""
import argparse
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = "/usr/bin/python3"
errors = []


def fail(message):
    errors.append(message)


def read(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def help_text(binary):
    # Abseil's --help exits 1 after printing.
    run = subprocess.run([binary, "--help"], capture_output=True, text=True)
    return run.stdout + run.stderr


def markdown_table(text, heading):
    """The rows (lists of cells) of the first table after `heading`."""
    start = text.find(heading)
    if start < 0:
        fail(f"README.md has no section {heading!r}")
        return []
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set(cells[0]) <= set("- "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header row


def code(cell):
    """The text of a cell's first `code span`, or the cell."""
    match = re.search(r"`([^`]*)`", cell)
    return match.group(1) if match else cell


def absl_flags(binary):
    """{name: default} from an Abseil --help listing."""
    flags = {}
    entries = re.split(r"\n    --", help_text(binary))[1:]
    for entry in entries:
        name = entry.split(" ", 1)[0]
        default = re.search(r"\);\s+default: (.*?);", entry, re.S)
        value = " ".join(default.group(1).split()) if default else ""
        flags[name] = value[1:-1] if value.startswith('"') else value
    return flags


def check_server_flags(server, readme, print_table):
    flags = absl_flags(server)
    if print_table:
        print("| flag | environment | default | meaning |\n| --- | --- | --- | --- |")
        for name, default in flags.items():
            shown = f"`{default}`" if default else "(empty)"
            print(f"| `--{name}` | `ATTN_{name.upper()}` | {shown} | |")
        return
    rows = markdown_table(readme, "## Server flags")
    documented = {}
    for row in rows:
        name = code(row[0]).lstrip("-")
        documented[name] = row
        if code(row[1]) != f"ATTN_{name.upper()}":
            fail(f"README flag table: --{name}'s variable is {row[1]}, not ATTN_{name.upper()}")
    for name in flags.keys() - documented.keys():
        fail(f"README flag table lacks --{name} (attn-server --help has it)")
    for name in documented.keys() - flags.keys():
        fail(f"README flag table has --{name}, which attn-server --help does not")
    for name in flags.keys() & documented.keys():
        shown = documented[name][2]
        default = "" if shown == "(empty)" else code(shown)
        if default != flags[name]:
            fail(f"README flag table: --{name} defaults to {shown}, attn-server says "
                 f"{flags[name]!r}")


def check_attnctl(attnctl, readme):
    block = help_text(attnctl).split("commands:\n", 1)[-1].split("\n\n", 1)[0]
    listed = re.findall(r"^  (\w+) +(.+)$", block, re.M)
    commands = {name: summary.strip() for name, summary in listed}
    rows = {code(row[0]): row[1] for row in markdown_table(readme, "## attnctl")}
    if not commands:
        fail("attnctl --help lists no commands")
    for name in commands.keys() ^ rows.keys():
        side = "README lacks" if name in commands else "attnctl --help lacks"
        fail(f"attnctl command table: {side} {name}")
    for name in commands.keys() & rows.keys():
        if commands[name] != rows[name]:
            fail(f"attnctl {name}: README says {rows[name]!r}, --help {commands[name]!r}")


def mixer_kinds(train):
    match = re.search(r"--mixer \(the sequence mixer: (.*?)\);", help_text(train), re.S)
    if not match:
        fail("attn-train --help does not list the mixer kinds")
        return []
    return [k.strip() for k in " ".join(match.group(1).split()).split(",")]


def recipes(names, build_dir):
    env = dict(os.environ, PRINT_RECIPES="1", MODELS=" ".join(names), BUILD_DIR=build_dir)
    run = subprocess.run(["bash", os.path.join(REPO, "scripts/models/train_bundled_models.sh")],
                         capture_output=True, text=True, env=env)
    if run.returncode != 0:
        fail(f"train_bundled_models.sh has no recipe for some of {names}: {run.stderr.strip()}")
        return {}
    return dict(line.split(": ", 1) for line in run.stdout.splitlines())


def package_config(path):
    script = ("import json, sys, torch\n"
              "m = torch.jit.load(sys.argv[1])\n"
              "c = json.loads(m.config)\n"
              "print(json.dumps(c.get('lm', c)))\n")
    run = subprocess.run([PYTHON, "-c", script, path], capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"{path}: could not read its config: {run.stderr.strip()[-300:]}")
        return None
    return json.loads(run.stdout)


def check_kinds_and_recipes(train, readme):
    kinds = mixer_kinds(train)
    table = [code(row[0]) for row in markdown_table(readme, "## Mixer kinds")]
    for kind in set(kinds) ^ set(table):
        side = "README's mixer table lacks" if kind in kinds else "attn-train --help lacks"
        fail(f"mixer kinds: {side} {kind}")
    build_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(train))))
    recipes(kinds, build_dir)  # fails when a kind has none
    packages = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "models")) if f.endswith(".pt"))
    for name, flags in recipes(packages, build_dir).items():
        run = subprocess.run([train, *flags.split(), "--print_config"], capture_output=True,
                             text=True)
        if run.returncode != 0:
            fail(f"recipe of {name}: attn-train refuses it: {run.stderr.strip()}")
            continue
        recipe = json.loads(run.stdout)
        bundled = package_config(os.path.join(REPO, "models", f"{name}.pt"))
        if bundled is not None and recipe != bundled:
            diff = {k: (recipe.get(k), bundled.get(k)) for k in recipe.keys() | bundled.keys()
                    if recipe.get(k) != bundled.get(k)}
            fail(f"recipe of models/{name}.pt gives another config (recipe, package): {diff}")


def check_default_model():
    """The bundled default is named in five places; they must agree."""
    places = {
        "scripts/serve.sh": r"--default_model=([\w.-]+)",
        "Dockerfile": r"ATTN_DEFAULT_MODEL=([\w.-]+)",
        "Dockerfile.cuda": r"ATTN_DEFAULT_MODEL=([\w.-]+)",
        "models/README.md": r"`([\w.-]+)` is the\s+default of `scripts/serve.sh`",
        "README.md": r"`([\w.-]+)` \(the default of `scripts/serve.sh`",
    }
    named = {}
    for path, pattern in places.items():
        found = re.search(pattern, read(path))
        if not found:
            fail(f"{path} does not name the default model")
            continue
        named[path] = found.group(1)
    if len(set(named.values())) > 1:
        fail(f"the default model differs between files: {named}")
    for name in set(named.values()):
        if not os.path.exists(os.path.join(REPO, "models", f"{name}.pt")):
            fail(f"the default model {name} is not in models/")


def check_docs_index():
    index = read("docs/README.md")
    files = {f for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md")}
    listed = set(re.findall(r"^\| ([\w.-]+\.md) \|", index, re.M))
    for name in files - listed - {"README.md"}:
        fail(f"docs/README.md does not list docs/{name}")
    for name in listed - files:
        fail(f"docs/README.md lists docs/{name}, which does not exist")


PATH_PATTERN = re.compile(
    r"(?<![\w./-])((?:scripts|docs|model|server|client|tests|deploy|proto|train|generate|"
    r"export|examples|util|bench|models|cmake)/[\w./-]*[\w/])")


def check_paths():
    docs = ["README.md", "models/README.md", "scripts/README.md"]
    docs += [f"docs/{f}" for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md")]
    for doc in docs:
        folder = os.path.dirname(doc)
        for path in set(PATH_PATTERN.findall(read(doc))):
            if "*" in path or re.search(r"/[A-Z]\.|/N$", path):  # placeholders: models/M.pt
                continue
            if not any(os.path.exists(os.path.join(REPO, base, path)) for base in ("", folder)):
                fail(f"{doc} names {path}, which does not exist")


def http_routes():
    """{(method, path)} the HTTP server routes, from the code; a path ending
    in / takes a name after it (/v1/models/{model})."""
    routes = set()
    for name in os.listdir(os.path.join(REPO, "server/http")):
        if not name.endswith(".cc"):
            continue
        text = read(f"server/http/{name}")
        routes |= set(re.findall(r'Route\("(\w+)",\s*"([^"]*)"', text))
        for paths, method in re.findall(
                r'for \(const char\* path : \{([^}]*)\}\) \{\s*server\.Route\("(\w+)", path', text):
            routes |= {(method, path) for path in re.findall(r'"([^"]*)"', paths)}
    return routes


def documented_routes(text, doc, heading):
    """{(method, path)} of the endpoint table after `heading` in a doc."""
    start = text.find(heading)
    if start < 0:
        fail(f"{doc} has no endpoint table headed {heading!r}")
        return set()
    routes, method = set(), None
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        for item in re.findall(r"`([^`]*)`", line.strip("|").split("|")[0]):
            parts = item.split()
            if len(parts) == 2:
                method = parts[0]
            routes.add((method, re.sub(r"\{\w+\}$", "", parts[-1])))
    return routes


def check_http_endpoints(readme):
    code_routes = http_routes()
    if len(code_routes) < 5:
        fail(f"found only {sorted(code_routes)} in server/http: the route pattern is stale")
    for doc, text, heading in (("README.md", readme, "| HTTP (`--http_port`) |"),
                               ("docs/openai.md", read("docs/openai.md"), "| method and path |")):
        documented = documented_routes(text, doc, heading)
        for method, path in sorted(code_routes - documented):
            fail(f"{doc}'s endpoint table lacks {method} {path}, which the server routes")
        for method, path in sorted(documented - code_routes):
            fail(f"{doc}'s endpoint table lists {method} {path}, which the server does not route")


def check_metrics():
    """docs/metrics.md's table names every metric family the server registers."""
    registered = set()
    for folder, _, files in os.walk(os.path.join(REPO, "server")):
        for name in files:
            if name.endswith(".cc"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    registered |= set(re.findall(r'\.Name\("(attn_\w+)"\)', f.read()))
    table = [l for l in read("docs/metrics.md").splitlines() if l.startswith("| `attn_")]
    documented = {m for l in table for m in re.findall(r"`(attn_\w+)", l.split("|")[1])}
    if len(registered) < 10:
        fail(f"found only {sorted(registered)} in server/: the metric pattern is stale")
    for name in sorted(registered - documented):
        fail(f"docs/metrics.md does not list {name}, which the server exports")
    for name in sorted(documented - registered):
        fail(f"docs/metrics.md lists {name}, which the server does not export")


def git_files():
    run = subprocess.run(["git", "-C", REPO, "ls-files"], capture_output=True, text=True)
    return [f for f in run.stdout.splitlines() if os.path.exists(os.path.join(REPO, f))]


def check_layout_table(files):
    """docs/design.md's layout table has a row for every top-level folder
    (model/ through its own folders) and every folder of model/ and server/."""
    rows = re.findall(r"^\| `([\w./-]+)/` \|", read("docs/design.md"), re.M)
    folders = {f.split("/")[0] for f in files if "/" in f and not f.startswith(".")}
    folders.discard("model")
    folders |= {"/".join(f.split("/")[:2]) for f in files
                if f.count("/") >= 2 and f.split("/")[0] in ("model", "server")}
    for folder in sorted(folders):
        if not any(row == folder or row.startswith(folder + "/") for row in rows):
            fail(f"docs/design.md's layout table has no row for {folder}/")


def check_code_paths(files):
    """Paths that comments and scripts name exist."""
    kinds = (".h", ".cc", ".py", ".sh", ".mjs", ".js", ".cmake", "CMakeLists.txt")
    for source in files:
        if not source.endswith(kinds) or source.startswith("tests/fuzz/corpus/"):
            continue
        with open(os.path.join(REPO, source), encoding="utf-8", errors="replace") as f:
            text = f.read()
        # Paths after the variables that name the repository's root.
        text = re.sub(r"\$\{(ATTN_SOURCES|PROJECT_SOURCE_DIR)\}/|\$repo/", " ", text)
        for path in set(PATH_PATTERN.findall(text)):
            if "*" in path or "$" in path or re.search(r"/[A-Z]\.|/N$|/$", path):
                continue
            folder = os.path.dirname(source)
            if not any(os.path.exists(os.path.join(REPO, base, path)) for base in ("", folder)):
                fail(f"{source} names {path}, which does not exist")


def check_scripts_readme(files):
    """scripts/README.md names every script under scripts/."""
    text = read("scripts/README.md")
    for f in files:
        if f.startswith("scripts/") and f != "scripts/README.md":
            if os.path.basename(f) not in text:
                fail(f"scripts/README.md does not mention {f}")


def check_benchmark_sections():
    """Each current result points at a heading of the log that exists."""
    headings = [line.lstrip("#").strip() for line in read("docs/benchmarks-log.md").splitlines()
                if line.startswith("#")]
    for line in read("docs/benchmarks.md").splitlines():
        if not line.startswith("|"):
            continue
        for name in re.findall(r'"([^"]+)"', line.rsplit("|", 2)[-2]):
            if name != "same" and not any(h.startswith(name) for h in headings):
                fail(f"docs/benchmarks.md names the log section {name!r}, which "
                     "docs/benchmarks-log.md does not have")


def check_readme_length(readme, limit=220):
    lines = readme.count("\n")
    if lines > limit:
        fail(f"README.md has {lines} lines, more than {limit}: move detail to docs/")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--attnctl", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--print-flag-table", action="store_true")
    args = parser.parse_args()
    readme = read("README.md")
    check_server_flags(args.server, readme, args.print_flag_table)
    if args.print_flag_table:
        return 0
    check_attnctl(args.attnctl, readme)
    check_kinds_and_recipes(args.train, readme)
    check_default_model()
    check_docs_index()
    check_paths()
    check_http_endpoints(readme)
    check_metrics()
    files = git_files()
    check_layout_table(files)
    check_code_paths(files)
    check_scripts_readme(files)
    check_benchmark_sections()
    check_readme_length(readme)
    for message in errors:
        print(f"FAIL: {message}", file=sys.stderr)
    if errors:
        return 1
    print("PASS: the README's tables, the endpoint tables, the metrics, the layout table, "
          "the recipes, the docs index, scripts/README.md, the benchmark sections and every "
          "named path agree with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
