#!/usr/bin/env bash
# The byte-level BPE of a tokenizer.json in GPT-NeoX's layout (trained here
# on a small corpus by tests/tools/hf_checkpoints.py) encodes and decodes as
# Hugging Face's tokenizers.js does, on English, code, whitespace runs, CJK,
# emoji, text that NFC changes, added tokens, and invalid UTF-8 (each
# ill-formed sequence becomes U+FFFD in both). A tokenizer.json using a
# component not implemented is refused by name.
#   tokenizer_json_agrees.sh ATTN_TOKENIZE_JSON NODE_TOOLS
set -euo pipefail
cli=$1 node_tools=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ ! -d "$node_tools/node_modules/@huggingface/tokenizers" ]; then
  npm install --silent --no-audit --no-fund --prefix "$node_tools" @huggingface/tokenizers@0.2 \
    > /dev/null || fail "npm install @huggingface/tokenizers"
fi
/usr/bin/python3 "$repo/tests/tools/hf_checkpoints.py" tokenizer --out "$work/tokenizer.json"

/usr/bin/python3 - "$work/cases.hex" <<'PY'
import sys
texts = [
    "The quick brown fox jumps over the lazy dog.",
    "It's the river's bank; they're here, we've seen it, I'm sure you'll agree and he'd say so.",
    "def encode(self, text):\n    return [self.vocab[t] for t in text.split()]\n",
    "    for i in range(10):\n\tprint(i,\ti * 2)  # tabs\t\tand  spaces   \n\n\n",
    "a  b   c    d                                  e",  # runs longer than any added token
    " leading and trailing  ", "   ", "\n", "",
    "日本語のテキストと中文文本，한국어 텍스트。",
    "emoji 🙂🙃👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵",
    "Ünïcödé café naïve résumé",
    "cafe\u0301 e\u0301te\u0301 A\u030a",  # NFC composes these
    "numbers 12345 67890 3.14159 ٣٤٥ ⅷ",
    "<|endoftext|>after the end<|endoftext|><|padding|>",
    "punctuation!!! ??? ... --- *** ((nested)) [x] {y}",
    "'s'S 'll 'LL don't DON'T",
    "\u00a0non-breaking\u2003em space\u3000ideographic",
    "mixed русский текст and ελληνικά",
]
cases = [t.encode() for t in texts]
cases += [b"bad \xff byte", b"cut \xe4\xb8", b"\xc3\x28 pair", b"\xed\xa0\x80 surrogate",
          b"\xf0\x9f\x99 trunc emoji", b"ok \x80\x80\x80 conts", b"\xf8\x88\x80\x80\x80 five"]
with open(sys.argv[1], "w") as f:
    for c in cases:
        f.write(c.hex() + "\n")
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
  const decoded = ids.length ? tokenizer.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
  console.log(JSON.stringify({ ids, text: decoded }));
}
JS
for variant in tokenizer split; do
"$cli" "$work/$variant.json" "$work/cases.hex" > "$work/ours.jsonl" || fail "attn-tokenize-json"
node "$node_tools/tokenizer_json_agrees.mjs" "$work/$variant.json" "$work/cases.hex" \
  > "$work/theirs.jsonl" || fail "tokenizers.js"

/usr/bin/python3 - "$work/cases.hex" "$work/ours.jsonl" "$work/theirs.jsonl" "$variant" <<'PY' || fail "$variant: encodings differ"
import json, sys
cases = open(sys.argv[1]).read().split("\n")[:-1]
ours = [json.loads(l) for l in open(sys.argv[2])]
theirs = [json.loads(l) for l in open(sys.argv[3])]
assert len(ours) == len(theirs) >= 25, (len(ours), len(theirs))
bad = 0
for hex_text, a, b in zip(cases, ours, theirs):
    if a["ids"] != b["ids"] or a["text"] != b["text"]:
        bad += 1
        print("differ on", bytes.fromhex(hex_text), "\n  ours  ", a, "\n  theirs", b)
assert bad == 0, f"{bad} cases differ"
tokens = sum(len(a["ids"]) for a in ours)
print(f"   {sys.argv[4]}: {len(ours)} texts, {tokens} tokens: the same ids and decoded text as tokenizers.js")
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
refused 't["normalizer"] = {"type": "Lowercase"}' 'normalizer: "Lowercase" is not supported'
refused 't["pre_tokenizer"] = {"type": "Whitespace"}' 'pre_tokenizer: "Whitespace" is not supported'
refused 't["decoder"] = {"type": "WordPiece"}' 'decoder: "WordPiece" is not supported'
refused 't["post_processor"] = {"type": "TemplateProcessing"}' 'post_processor: "TemplateProcessing"'
refused 't["model"]["byte_fallback"] = True' 'model.byte_fallback'
refused 't["added_tokens"][0]["lstrip"] = True' 'added_tokens[0].lstrip'
refused 'del t["model"]["vocab"]["\u0120"]' 'byte 0x20 has no token'
refused 't["model"]["merges"][3] = "a b c"' 'model.merges[3]'
echo "PASS"
