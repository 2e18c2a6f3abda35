#!/usr/bin/python3
"""Prints the LOGIT_BIAS that keeps a random-weight model's output printable.

    scripts/bench/unprintable_bias.py CHECKPOINT_DIR [--pad]

A random-weight model samples every id now and then. llama-server answers a
completion whose text ends in bytes that are not UTF-8 with HTTP 500, so
scripts/bench/llama_peer.sh needs both sides to leave those ids out:

    LOGIT_BIAS=$(scripts/bench/unprintable_bias.py DIR --pad) scripts/bench/llama_peer.sh ...

The ids biased (-100) are the tokens whose bytes alone are not valid UTF-8 (a
lone continuation byte, an unfinished sequence): byte-level BPE tokens and
byte-fallback tokens <0xHH> of DIR/tokenizer.json, or the bytes entries of an
RWKV World vocabulary (DIR/rwkv_vocab_v20230424.txt, where there is no
tokenizer.json); and with --pad the ids the model's config.json vocab_size
has beyond the vocabulary's (llama.cpp's converter names them [PADn]).
Counts go to standard error.
"""
import argparse
import ast
import importlib.util
import json
import pathlib
import sys


def byte_level_table():
    """GPT-2's byte-level table, character to byte: inverted from the one
    tests/tools/hf_checkpoints.py writes vocabularies with."""
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "tools" / "hf_checkpoints.py"
    spec = importlib.util.spec_from_file_location("hf_checkpoints", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return {ch: b for b, ch in tool.byte_characters().items()}


def byte_level(tokenizer):
    """Whether the vocabulary's strings are GPT-2's byte-level characters."""
    decoder = tokenizer.get("decoder") or {}
    decoders = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    return any(d.get("type") == "ByteLevel" for d in decoders)


def token_bytes(text, model, table):
    """The bytes a token stands for: a byte-fallback token's one byte, a
    byte-level token's bytes (with `table`), else its text in UTF-8."""
    if model.get("byte_fallback") and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        return bytes([int(text[3:5], 16)])
    if table is not None and all(ch in table for ch in text):
        return bytes(table[ch] for ch in text)
    return text.encode("utf-8")


def tokenizer_json_ids(path):
    """Ids of tokenizer.json whose bytes are not UTF-8; every id it has."""
    tokenizer = json.loads(path.read_text())
    model = tokenizer["model"]
    if model.get("type") != "BPE":
        sys.exit(f"{path}: model.type {model.get('type')!r}; only BPE is read")
    table = byte_level_table() if byte_level(tokenizer) else None
    special = {entry["id"] for entry in tokenizer.get("added_tokens", [])}
    banned = []
    for text, token_id in model["vocab"].items():
        if token_id in special:
            continue
        try:
            token_bytes(text, model, table).decode("utf-8")
        except UnicodeDecodeError:
            banned.append(token_id)
    return banned, set(model["vocab"].values()) | special


def rwkv_vocab_ids(path):
    """The same for an RWKV World vocabulary: lines of id, literal, length."""
    banned, known = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        token_id, rest = line.split(" ", 1)
        literal = ast.literal_eval(rest[: rest.rindex(" ")])
        known.add(int(token_id))
        if isinstance(literal, bytes):
            try:
                literal.decode("utf-8")
            except UnicodeDecodeError:
                banned.append(int(token_id))
    return banned, known


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=pathlib.Path)
    parser.add_argument("--pad", action="store_true", help="also bias the ids past the vocabulary's")
    args = parser.parse_args()
    if (args.checkpoint / "tokenizer.json").exists():
        banned, known = tokenizer_json_ids(args.checkpoint / "tokenizer.json")
    elif (args.checkpoint / "rwkv_vocab_v20230424.txt").exists():
        banned, known = rwkv_vocab_ids(args.checkpoint / "rwkv_vocab_v20230424.txt")
    else:
        sys.exit(f"{args.checkpoint}: neither tokenizer.json nor rwkv_vocab_v20230424.txt")
    unprintable = len(banned)
    padding = 0
    if args.pad:
        config_path = args.checkpoint / "config.json"
        if not config_path.exists():
            sys.exit(f"{config_path}: missing; --pad reads the model's vocab_size there")
        config = json.loads(config_path.read_text())
        padding_ids = list(range(max(known) + 1, int(config["vocab_size"])))
        banned += padding_ids
        padding = len(padding_ids)
    print(f"{unprintable} ids not UTF-8 alone, {padding} padding ids", file=sys.stderr)
    print(json.dumps({str(i): -100 for i in sorted(banned)}, separators=(",", ":")))


if __name__ == "__main__":
    main()
