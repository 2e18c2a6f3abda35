#!/usr/bin/env bash
# The Jinja interpreter renders real chat templates as Jinja2 does (Debian's
# python3-jinja2, set up as Hugging Face's apply_chat_template sets it up):
# byte-identical text for every template of tests/data/chat_templates/SOURCES.tsv
# (checked by sha256) on conversations with system turns, several turns,
# tools, assistant tool calls, tool results and text that stresses escaping,
# with add_generation_prompt true and false; where Jinja2 fails (the
# template's own raise_exception, a type error) the interpreter fails too,
# with the template's message. Then small templates, one feature each.
#   chat_templates_agree.sh ATTN_RENDER_TEMPLATE
set -euo pipefail
cli=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
data=$repo/tests/data/chat_templates
helper=$repo/tests/text/chat_templates.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Each ours/reference pair: identical, or both errors (the reference's
# message in ours when the template itself holds it).
compare() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, template, ours, reference = sys.argv[1:5]
source = open(template, encoding="utf-8").read() if template != "-" else ""
got = [json.loads(l) for l in open(ours, encoding="utf-8")]
want = [json.loads(l) for l in open(reference, encoding="utf-8")]
assert len(got) == len(want), f"{name}: {len(got)} renders, expected {len(want)}"
errors = 0
for i, (g, w) in enumerate(zip(got, want)):
    if "error" in w:
        errors += 1
        assert "error" in g, f"{name} case {i}: Jinja2 failed ({w['error']}), ours rendered {g['text'][:200]!r}"
        if w["error"] in source:
            assert w["error"] in g["error"], f"{name} case {i}: {g['error']!r} lacks {w['error']!r}"
        continue
    assert "text" in g, f"{name} case {i}: ours failed: {g['error']}"
    if g["text"] != w["text"]:
        n = next((k for k in range(min(len(g["text"]), len(w["text"])))
                  if g["text"][k] != w["text"][k]), min(len(g["text"]), len(w["text"])))
        raise AssertionError(f"{name} case {i}: differs at character {n}:\n"
                             f"  ours:   {g['text'][max(0, n - 60):n + 60]!r}\n"
                             f"  Jinja2: {w['text'][max(0, n - 60):n + 60]!r}")
print(f"  {name}: {len(want) - errors} renders identical, {errors} failing in both")
PY
}

count=0
while IFS=$'\t' read -r name _ _ _ sha bos eos; do
  case $name in '#'*|'') continue ;; esac
  template=$data/$name.jinja
  echo "$sha  $template" | sha256sum --check --quiet || fail "$template is not the file SOURCES.tsv records"
  /usr/bin/python3 "$helper" cases "$bos" "$eos" "$work/$name.cases"
  "$cli" "$template" "$work/$name.cases" > "$work/$name.ours" || fail "$name: the interpreter refused it"
  /usr/bin/python3 "$helper" render "$template" "$work/$name.cases" > "$work/$name.jinja2"
  compare "$name" "$template" "$work/$name.ours" "$work/$name.jinja2" || fail "$name"
  count=$((count + 1))
done < "$data/SOURCES.tsv"
[ "$count" -ge 10 ] || fail "only $count real templates listed"

/usr/bin/python3 "$helper" snippets "$work/snippets"
"$cli" --snippets "$work/snippets" > "$work/snippets.ours"
/usr/bin/python3 "$helper" render-snippets "$work/snippets" > "$work/snippets.jinja2"
compare snippets - "$work/snippets.ours" "$work/snippets.jinja2" || fail "snippets"
echo "PASS: $count real chat templates and every feature render as Jinja2 renders them"
