"""No function in server/ is longer than 80 lines (the architecture step's
bar: a long function is a lifecycle or a policy that wants a name).

    check_function_length.py [LIMIT]

Counts the lines from a function body's opening brace to its closing one,
for every brace block opened directly inside namespaces and types (a
function or a method defined in its class), in server/'s .cc and .h files.
Braces in comments and literals are ignored. Exit 1 naming each function
over the limit, with its file and first line.
"""
import glob
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def function_blocks(path):
    """(lines, first line) of each top-level function body in `path`."""
    stack, out = [], []
    for number, line in enumerate(open(path, encoding="utf-8").read().split("\n")):
        code = re.sub(r"//.*", "", line)
        code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
        code = re.sub(r"'(\\.|[^'\\])*'", "''", code)
        for ch in code:
            if ch == "{":
                if re.match(r"\s*namespace\b", line):
                    kind = "namespace"
                elif re.match(r"\s*(class|struct|enum|union)\b", line) and ")" not in line:
                    kind = "type"
                else:
                    kind = "block"
                stack.append((kind, number))
            elif ch == "}" and stack:
                kind, start = stack.pop()
                if kind == "block" and all(k in ("namespace", "type") for k, _ in stack):
                    out.append((number - start + 1, start + 1))
    return out


def main():
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    files = sorted(glob.glob(os.path.join(REPO, "server/**/*.cc"), recursive=True) +
                   glob.glob(os.path.join(REPO, "server/**/*.h"), recursive=True))
    over = [(n, os.path.relpath(f, REPO), start) for f in files
            for n, start in function_blocks(f) if n > limit]
    for n, path, start in over:
        print(f"FAIL: {path}:{start}: a function of {n} lines, over {limit}; split it",
              file=sys.stderr)
    if over:
        return 1
    print(f"PASS: no function in server/'s {len(files)} files is over {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
