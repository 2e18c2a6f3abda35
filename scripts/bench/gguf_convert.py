#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py on a machine without the Python
packages it imports but does not need for the random-weight checkpoints of
scripts/bench/peer_models.sh.

    gguf_convert.py LLAMA_SRC [--pre NAME] -- CONVERTER_ARGS...

LLAMA_SRC is a llama.cpp checkout; CONVERTER_ARGS go to its converter
unchanged (the checkpoint directory, --outtype f32|q8_0|bf16, --outfile).
What is missing is stood in for, and only then:

- transformers: AutoConfig fails, so the converter reads config.json itself
  (its own fallback); AutoTokenizer reads tokenizer.json's vocabulary and
  added tokens, all the converter takes from it.
- tqdm: progress bars print nothing.
- torch without float8 types (Debian 12's 1.13): names that equal no dtype,
  which no checkpoint here holds.

A tokenizer.json the converter does not recognise (every synthetic one: the
converter identifies a pre-tokenizer by the hash of its output on a fixed
text) is given the pre-tokenizer --pre (default gpt-2, the byte-level split
the synthetic vocabularies use). The stand-in encodes nothing itself, so that
hash is never computed here.
"""

import argparse
import json
import os
import runpy
import sys
import types


def have(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


class _AddedToken:
    def __init__(self, entry):
        self.content = entry["content"]
        self.special = entry.get("special", False)
        self.normalized = entry.get("normalized", False)


class _TokenizerJson:
    """The part of a transformers tokenizer the converter reads."""

    def __init__(self, directory):
        with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
            data = json.load(f)
        self.vocab = dict(data["model"]["vocab"])
        added = data.get("added_tokens", [])
        for entry in added:
            self.vocab[entry["content"]] = entry["id"]
        self.added_tokens_decoder = {entry["id"]: _AddedToken(entry) for entry in added}
        self._added = {entry["content"]: entry["id"] for entry in added}

    def get_vocab(self):
        return dict(self.vocab)

    def get_added_vocab(self):
        return dict(self._added)

    def encode(self, text, **_):
        # An added token's text encodes to itself; nothing else is asked of
        # the stand-in (the pre-tokenizer is given, not detected).
        if text in self._added:
            return [self._added[text]]
        raise NotImplementedError("the stand-in tokenizer encodes only added tokens")

    def decode(self, ids, **_):
        reverse = {i: t for t, i in self.vocab.items()}
        return "".join(reverse[i] for i in ids)


def stand_in_transformers():
    module = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*_, **__):
            raise OSError("transformers is not installed; reading config.json")

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(directory, *_, **__):
            return _TokenizerJson(str(directory))

    module.AutoConfig = AutoConfig
    module.AutoTokenizer = AutoTokenizer
    sys.modules["transformers"] = module


def stand_in_tqdm():
    module = types.ModuleType("tqdm")

    class tqdm:
        """A progress bar that prints nothing."""

        def __init__(self, iterable=None, *_, **__):
            self._iterable = iterable

        def __iter__(self):
            return iter(self._iterable)

        def update(self, *_):
            pass

        def set_description(self, *_):
            pass

        def reset(self, *_, **__):
            pass

        def close(self):
            pass

    module.tqdm = tqdm
    sys.modules["tqdm"] = module


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("llama_src")
    parser.add_argument("--pre", default="gpt-2")
    args = parser.parse_args(argv[:split])
    converter_args = argv[split + 1:]

    import torch
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, object())
    if not have("transformers"):
        stand_in_transformers()
    if not have("tqdm"):
        stand_in_tqdm()

    sys.path.insert(0, os.path.join(args.llama_src, "gguf-py"))
    sys.path.insert(0, args.llama_src)
    from conversion import base

    detect = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        if isinstance(tokenizer, _TokenizerJson):
            return args.pre
        return detect(self, tokenizer)

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    sys.argv = ["convert_hf_to_gguf.py"] + converter_args
    runpy.run_path(os.path.join(args.llama_src, "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
