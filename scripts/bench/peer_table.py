#!/usr/bin/env python3
"""One table from what scripts/bench/llama_peer.sh printed (or
peer_models.sh, which runs it once per shape):

    peer_table.py LOG

For each model in the log, each row is a workload: batch-1 decode and the
512-token prefill in float32, int8 and bf16 (tokens/s), the two servers'
aggregate tokens/s, and the 20-turn chat's time-to-first-token growth.
The two sides' columns are medians over the rounds; the ratio is the median
of the rounds' ratios (this server over llama.cpp, each round's two sides
measured one after the other), which is what the rounds are for: the
machine's speed drifts between them. A workload one side lacks is left out.
"""

import json
import re
import statistics
import sys

# llama-bench names the weights' type in its model column.
_GGUF_TYPES = {"F32": "float32", "Q8_0": "int8", "BF16": "bf16"}
_OURS = {"native_ms": "float32", "native_int8_ms": "int8", "native_bf16_ms": "bf16"}
_SERVER_SIDES = {"float32": "float32", "int8": "int8", "bf16": "bf16",
                 "F32": "float32", "Q8_0": "int8", "BF16": "bf16"}


class Model:
    def __init__(self, name):
        self.name = name
        # (workload, weights) -> list over rounds of [ours, theirs]
        self.rounds = {}
        self.round = 0
        self.chat = {}  # side -> ratio of turns 18-20 over turns 1-3

    def add(self, workload, weights, side, value):
        rows = self.rounds.setdefault((workload, weights), [])
        while len(rows) < self.round:
            rows.append([None, None])
        rows[self.round - 1][side] = value


def parse(lines):
    models, model, server_side = [], None, None
    for line in lines:
        line = line.rstrip("\n")
        if line.startswith("=== "):  # peer_models.sh: the next shape
            model = Model(line[4:].strip())
            models.append(model)
            continue
        if model is None:
            model = Model("model")
            models.append(model)
        match = re.match(r"== round (\d+): this server", line)
        if match:
            model.round = int(match.group(1))
            continue
        if line.startswith("{") and '"steps"' in line:
            bench = json.loads(line)
            step = bench["steps"].get("1", {})
            for key, weights in _OURS.items():
                if step.get(key):
                    model.add("batch-1 decode", weights, 0, 1000.0 / step[key])
                if bench.get("prefill", {}).get(key):
                    model.add("512-token prefill", weights, 0,
                              bench["prefill"]["tokens"] * 1000.0 / bench["prefill"][key])
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 7 and re.match(r"(pp|tg)\d+$", cells[-2]):
            weights = next((w for t, w in _GGUF_TYPES.items() if re.search(rf"\b{t}\b", cells[0])), None)
            if weights:
                workload = "batch-1 decode" if cells[-2].startswith("tg") else "512-token prefill"
                model.add(workload, weights, 1, float(cells[-1].split()[0]))
            continue
        match = re.match(r"-- (this server|llama-server), (\S+): (load|chat)", line)
        if match:
            server_side = (0 if match.group(1) == "this server" else 1, match.group(2), match.group(3))
            continue
        if line.startswith("{") and server_side:
            result = json.loads(line)
            side, name, workload = server_side
            if workload == "load" and name in _SERVER_SIDES:
                model.round = max(model.round, 1)
                model.add("server, 64 clients / 16 slots", _SERVER_SIDES[name], side,
                          result["tokens_per_s"])
            elif workload == "chat":
                model.chat[side] = result["ratio"]
            server_side = None
    return models


def fmt(value):
    return "-" if value is None else (f"{value:.1f}" if value < 1000 else f"{value:,.0f}")


def table(model):
    out = [f"| {model.name} | weights | this server | llama.cpp | ratio | rounds |",
           "| --- | --- | --- | --- | --- | --- |"]
    for (workload, weights), rounds in model.rounds.items():
        pairs = [r for r in rounds if r[0] is not None and r[1] is not None]
        if not pairs:
            continue
        ours = statistics.median(r[0] for r in pairs)
        theirs = statistics.median(r[1] for r in pairs)
        ratio = statistics.median(r[0] / r[1] for r in pairs)
        out.append(f"| {workload} (tokens/s) | {weights} | {fmt(ours)} | {fmt(theirs)} | "
                   f"{ratio:.2f}x | {len(pairs)} |")
    if len(model.chat) == 2:
        out.append(f"| 20-turn chat: TTFT turns 18-20 over 1-3 | float32 | {model.chat[0]:.2f} | "
                   f"{model.chat[1]:.2f} | | 1 |")
    return "\n".join(out)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        models = parse(f)
    print("\n\n".join(table(m) for m in models if m.rounds or m.chat))


if __name__ == "__main__":
    main()
