#!/usr/bin/python3
"""One workload for any server with OpenAI's /v1/completions, so that this
server and a peer (llama.cpp's llama-server) are measured by the same client
(docs/benchmarks-log.md, "LFM2 and Granite 4.0-H against llama.cpp").

  load: CONCURRENCY closed-loop clients, each sending a prompt of its own
        (about PROMPT_WORDS random words; no two prompts share a prefix
        longer than a word) for MAX_TOKENS new tokens, for SECONDS. Prints
        the generated tokens/s (the servers' own usage counts) and requests.
  chat: one conversation of TURNS turns, each about NEW_WORDS new words and
        MAX_TOKENS generated (greedy); the whole transcript is sent again
        every turn, streamed. Prints the time to first token of every turn,
        its prompt tokens and how many of them the server prefilled (the
        prompt less `cached_tokens`, from the streamed usage), and the ratio
        of the last three turns' median time to the first three's.

Usage:
  scripts/bench/openai_peer.py --url=http://127.0.0.1:PORT [--model=NAME]
      [--extra='{"ignore_eos": true}'] load [--concurrency=16] [--seconds=60]
      [--prompt_words=40] [--max_tokens=128]
  scripts/bench/openai_peer.py --url=... chat [--turns=20] [--new_words=20]
      [--max_tokens=40]
--extra adds fields to every request: this server's `attn_ignore_eos` or
llama-server's `ignore_eos`, so that both generate MAX_TOKENS every time.
Progress goes to stderr, one JSON line of results to stdout.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program "
         "question work government number night point home water room mother area money "
         "story fact month lot right study book eye job word business issue side kind head "
         "house service friend father power hour game line end member law car city name").split()


def words(rng, count):
    return " ".join(rng.choice(WORDS) for _ in range(count))


class Client:
    def __init__(self, url, model, extra):
        parsed = urllib.parse.urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port
        self.model, self.extra = model, extra

    def body(self, prompt, max_tokens, stream):
        b = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        if self.model:
            b["model"] = self.model
        b.update(self.extra)
        return json.dumps(b)

    def complete(self, prompt, max_tokens):
        """The completion's usage (a whole response)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        conn.request("POST", "/v1/completions", self.body(prompt, max_tokens, False),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:500]!r}")
        return json.loads(data)["usage"]

    def stream(self, prompt, max_tokens):
        """(seconds to the first chunk of text, the whole text, the usage or None)."""
        start = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        conn.request("POST", "/v1/completions", self.body(prompt, max_tokens, True),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:500]!r}")
        first, text, usage = None, [], None
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            choices = chunk.get("choices") or []
            if choices and first is None:
                first = time.monotonic() - start
            text.extend(c.get("text", "") for c in choices)
            usage = chunk.get("usage") or usage
        conn.close()
        return first, "".join(text), usage


def load(client, args):
    deadline = time.monotonic() + args.seconds
    generated, requests, prompt_tokens, errors = [0] * args.concurrency, [0] * args.concurrency, [], []

    def run(i):
        rng = random.Random(i)
        while time.monotonic() < deadline:
            try:
                usage = client.complete(words(rng, args.prompt_words), args.max_tokens)
            except Exception as e:  # noqa: BLE001 - reported below, the run goes on
                errors.append(str(e))
                return
            generated[i] += usage["completion_tokens"]
            requests[i] += 1
            prompt_tokens.append(usage["prompt_tokens"])

    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, the first: {errors[0]}")
    return {"concurrency": args.concurrency, "seconds": round(elapsed, 1),
            "requests": sum(requests), "generated_tokens": sum(generated),
            "tokens_per_s": round(sum(generated) / elapsed, 1),
            "median_prompt_tokens": statistics.median(prompt_tokens) if prompt_tokens else 0}


def chat(client, args):
    rng = random.Random(7)
    transcript, ttfts, prompts, prefilled = "", [], [], []
    for turn in range(1, args.turns + 1):
        transcript += f"\nUser: {words(rng, args.new_words)}\nAssistant:"
        first, text, usage = client.stream(transcript, args.max_tokens)
        if first is None:
            raise RuntimeError(f"turn {turn}: the stream carried no text")
        ttfts.append(first * 1000)
        transcript += text
        # Tokens the server had to prefill: the prompt less what it had cached.
        if usage:
            prompts.append(usage["prompt_tokens"])
            details = usage.get("prompt_tokens_details") or {}
            prefilled.append(usage["prompt_tokens"] - (details.get("cached_tokens") or 0))
        print(f"turn {turn}: {ttfts[-1]:.1f} ms to the first token, "
              f"{prompts[-1] if usage else '?'} prompt tokens, "
              f"{prefilled[-1] if usage else '?'} prefilled", file=sys.stderr)
    head, tail = statistics.median(ttfts[:3]), statistics.median(ttfts[-3:])
    return {"turns": args.turns, "ttft_ms": [round(t, 1) for t in ttfts],
            "ttft_first3_ms": round(head, 1), "ttft_last3_ms": round(tail, 1),
            "ratio": round(tail / head, 2), "prompt_tokens": prompts, "prefilled_tokens": prefilled}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", default="")
    parser.add_argument("--extra", default="{}", help="JSON fields added to every request")
    sub = parser.add_subparsers(dest="workload", required=True)
    p = sub.add_parser("load")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--prompt_words", type=int, default=40)
    p.add_argument("--max_tokens", type=int, default=128)
    p = sub.add_parser("chat")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--new_words", type=int, default=20)
    p.add_argument("--max_tokens", type=int, default=40)
    args = parser.parse_args()
    client = Client(args.url, args.model, json.loads(args.extra))
    result = load(client, args) if args.workload == "load" else chat(client, args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
