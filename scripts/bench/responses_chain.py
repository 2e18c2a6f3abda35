#!/usr/bin/python3
"""A long conversation through /v1/responses (docs/benchmarks-log.md,
"Responses chains"): TURNS turns chained by previous_response_id, each with
the same instructions, about 20 new input tokens and 24 output tokens
(greedy, attn_ignore_eos), timed per turn, on the bundled rwkv7 model:

  state   the server as it is: each turn continues the previous reply's
          state from the state cache and prefills only its new input;
  none    --state_cache_bytes=0: each turn prefills the whole conversation.

Prints progress on stderr and a Markdown report on stdout: per-turn median
time of the first and last ten turns (the first turn left out), the tokens
each turn prefilled, and cached_tokens against the conversation's length.

Usage: scripts/bench/responses_chain.py [--build=build] [--turns=100]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(build, *flags):
    log = f"/tmp/responses_chain_{os.getpid()}_{time.monotonic_ns()}.log"
    started = subprocess.run(
        ["bash", f"{REPO}/scripts/lib/local_server.sh", "start", f"{build}/server/attn-server",
         f"{build}/client/attnctl", log, f"--models={REPO}/models/rwkv7.pt", "--max_tokens=4096",
         "--max_prompt_tokens=65536", *flags], capture_output=True, text=True)
    if started.returncode != 0:
        raise RuntimeError(f"attn-server did not start: {started.stderr[-2000:]}")
    pid, _, _, http_port = (int(x) for x in started.stdout.split())
    return pid, http_port


def post(port, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/responses",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as answer:
        response = json.load(answer)
    return time.perf_counter() - began, response


def chain(port, turns, label):
    rows, previous = [], None
    for turn in range(1, turns + 1):
        body = {"input": f"Turn {turn}: and what did the sailors see on the sea at night?",
                "instructions": "Answer in one short sentence.", "max_output_tokens": 24,
                "temperature": 0, "attn_ignore_eos": True}
        if previous:
            body["previous_response_id"] = previous["id"]
        took, previous = post(port, body)
        usage = previous["usage"]
        rows.append((took, usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"],
                     usage["output_tokens"]))
        if turn % 10 == 0:
            print(f"  {label}: turn {turn}, {took * 1000:.1f} ms, {usage['input_tokens']} input "
                  f"tokens, {usage['input_tokens_details']['cached_tokens']} cached",
                  file=sys.stderr, flush=True)
    return rows


def summary(label, rows):
    first = statistics.median(r[0] for r in rows[1:11]) * 1000
    last = statistics.median(r[0] for r in rows[-10:]) * 1000
    prefilled = [r[1] - r[2] for r in rows[1:]]
    history = sum(1 for prev, row in zip(rows, rows[1:]) if row[2] == prev[1] + prev[3])
    return (f"| {label} | {first:.1f} | {last:.1f} | {last / first:.2f}x | "
            f"{min(prefilled)}-{max(prefilled)} | {rows[-1][1]} | {history} of {len(rows) - 1} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=f"{REPO}/build")
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    results = []
    for label, flags in (("state", ()), ("none", ("--state_cache_bytes=0",))):
        print(f"== {label}", file=sys.stderr, flush=True)
        pid, port = start(args.build, *flags)
        try:
            results.append(summary(label, chain(port, args.turns, label)))
        finally:
            os.kill(pid, signal.SIGKILL)
    print(f"{args.turns} turns by previous_response_id, bundled rwkv7, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| server | ms/turn, turns 2-11 | ms/turn, last 10 | last / first | tokens "
          "prefilled per turn | last turn's input tokens | turns whose cached_tokens is the "
          "whole history |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(results))


if __name__ == "__main__":
    sys.exit(main())
