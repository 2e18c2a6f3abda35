#!/usr/bin/python3
"""Structured output at serving speed (docs/benchmarks-log.md, "Structured
output serving"): on the bundled rwkv7 model, CONCURRENCY clients each loop
chat completions (max_tokens 128, temperature 1) for SECONDS, free or with a
json_schema response_format, alternating rounds; then the time to first
token of a streamed json_schema request whose schema is new (compiled on
arrival) and one already cached.

Prints progress on stderr and a Markdown report on stdout: per concurrency
the median aggregate generated tokens/s of each mode over the rounds and
their ratio, and the median time to first token of each case.

Usage: scripts/bench/structured_serving.py [--build=build] [--seconds=15] [--rounds=3]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
    "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["title", "year", "tags"], "additionalProperties": False}


def start(build):
    log = f"/tmp/structured_serving_{os.getpid()}.log"
    started = subprocess.run(
        ["bash", f"{REPO}/scripts/lib/local_server.sh", "start", f"{build}/server/attn-server",
         f"{build}/client/attnctl", log, f"--models={REPO}/models/rwkv7.pt"],
        capture_output=True, text=True)
    if started.returncode != 0:
        raise RuntimeError(f"attn-server did not start: {started.stderr[-2000:]}")
    pid, _, _, http_port = (int(x) for x in started.stdout.split())
    return pid, http_port


def body(seed, schema, stream=False):
    b = {"model": "rwkv7", "messages": [{"role": "user", "content": "Describe a book."}],
         "max_tokens": 128, "temperature": 1, "seed": seed, "stream": stream}
    if schema is not None:
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "b", "schema": schema}}
    return json.dumps(b)


def load(port, concurrency, seconds, schema):
    tokens = [0] * concurrency
    dropped = [0]
    deadline = time.monotonic() + seconds

    def client(i):
        seed = i * 100000
        while time.monotonic() < deadline:
            seed += 1
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                conn.request("POST", "/v1/chat/completions", body(seed, schema),
                             {"Content-Type": "application/json", "Connection": "close"})
                answer = json.loads(conn.getresponse().read())
                tokens[i] += answer["usage"]["completion_tokens"]
            except (http.client.HTTPException, OSError):
                dropped[0] += 1  # counted, not retried: the measure is tokens/s
            finally:
                conn.close()

    began = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if dropped[0]:
        print(f"  {dropped[0]} connections closed without an answer", file=sys.stderr)
    return sum(tokens) / (time.monotonic() - began)


def first_token(port, schema):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    began = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body(1, schema, stream=True),
                 {"Content-Type": "application/json", "Connection": "close"})
    answer = conn.getresponse()
    while True:
        line = answer.readline()
        if not line or (line.startswith(b"data: {") and b'"content"' in line):
            took = time.perf_counter() - began
            conn.close()  # the server ends the stream when the client leaves
            return took


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=f"{REPO}/build")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", default="16,64", help="concurrencies; empty: TTFT only")
    args = parser.parse_args()
    pid, port = start(args.build)
    try:
        print("| streams | free tokens/s | json_schema tokens/s | ratio |\n| --- | --- | --- | --- |")
        for concurrency in [int(c) for c in args.streams.split(",") if c]:
            runs = {"free": [], "schema": []}
            for r in range(args.rounds):
                for mode in ("free", "schema"):
                    rate = load(port, concurrency, args.seconds, SCHEMA if mode == "schema" else None)
                    runs[mode].append(rate)
                    print(f"{concurrency} streams, round {r + 1}, {mode}: {rate:.0f} tokens/s",
                          file=sys.stderr)
            free, schema = statistics.median(runs["free"]), statistics.median(runs["schema"])
            print(f"| {concurrency} | {free:.0f} | {schema:.0f} | {schema / free:.2f} |")
        new, cached = [], []
        for i in range(20):
            fresh = json.loads(json.dumps(SCHEMA))
            fresh["properties"][f"field{i}_{os.getpid()}"] = {"type": "boolean"}
            new.append(first_token(port, fresh))
            cached.append(first_token(port, SCHEMA))
        print(f"\nTime to first token, median of 20, one stream: new schema "
              f"{statistics.median(new) * 1000:.1f} ms, cached {statistics.median(cached) * 1000:.1f} ms, "
              f"free {statistics.median([first_token(port, None) for _ in range(20)]) * 1000:.1f} ms")
    finally:
        subprocess.run(["kill", str(pid)])


if __name__ == "__main__":
    main()
