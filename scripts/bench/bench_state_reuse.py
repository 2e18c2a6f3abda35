#!/usr/bin/python3
"""State reuse, side by side in one run (docs/benchmarks-log.md, "State reuse").

1. A 20-turn conversation (each turn about 40 new prompt tokens, 40 generated,
   greedy): time to first token and tokens prefilled per turn with the
   server's state cache, with client-held state (attnctl chat), and with
   neither.
2. A shared ~1,000-token system prompt followed by 64 different questions:
   time to first token p50/p95 and its total, cache on and off.
3. 10,000 cached entries (distinct 64-token prompts): the cache's bytes and
   the server's RSS for the default model and, with --state_cache=all, for
   mha-alibi; then the same prompts again: hit rate and TTFT.

4. With --document_tokens=N (and --model), only this: a document of N
   token ids, then --questions requests of the document and 30 ids of
   their own (2 tokens generated each, the cache at its default size):
   the tokens each reused and prefilled, its wall time (attnctl's start-up
   included), and the cache's entries and bytes at the end.

Usage: scripts/bench/bench_state_reuse.py [--build=build] [--skip_entries] [--model=PACKAGE]
  [--document_tokens=N [--questions=8]]
With --model, only the 20-turn conversation, on that package (a hybrid such
as granite-4.0-h-350m written by scripts/bench/hf_models.sh).
Runs the real attn-server and attnctl on 127.0.0.1; prints progress on stderr
and a Markdown report on stdout.
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Server:
    """attn-server on 127.0.0.1, started by scripts/lib/local_server.sh."""

    def __init__(self, build, models, *flags):
        self.log = f"/tmp/bench_state_reuse_{os.getpid()}_{time.monotonic_ns()}.log"
        started = subprocess.run(
            ["bash", f"{REPO}/scripts/lib/local_server.sh", "start", f"{build}/server/attn-server",
             f"{build}/client/attnctl", self.log, f"--models={models}", *flags],
            capture_output=True, text=True)
        if started.returncode != 0:
            raise RuntimeError(f"attn-server did not start: {started.stderr[-2000:]}")
        self.pid, self.port, self.metrics_port, self.http_port = (
            int(x) for x in started.stdout.split())
        self.address = f"127.0.0.1:{self.port}"

    def metric(self, name, model):
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read().decode()
        m = re.search(rf'^{name}{{model="{model}"}} (\S+)$', text, re.M)
        return float(m.group(1)) if m else 0.0

    def rss_mb(self):
        with open(f"/proc/{self.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024

    def stop(self):
        os.kill(self.pid, signal.SIGKILL)


def ctl(build, address, *args):
    return [f"{build}/client/attnctl", f"--server={address}", "--timeout_s=600", *args]


def progress(message):
    print(message, file=sys.stderr, flush=True)


def corpus():
    """Public-domain text: the KJV when bible-kjv is installed, else the docs."""
    try:
        text = subprocess.run(["bible", "-f", "ps1:1-ps150:6"], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        text = ""
    if len(text) < 100000:
        text = "".join(open(os.path.join(REPO, "docs", f), encoding="utf-8").read()
                       for f in sorted(os.listdir(os.path.join(REPO, "docs"))) if f.endswith(".md"))
    words = text.split()
    return words


def lines_of(words, start, count, words_per_line):
    return [" ".join(words[start + i * words_per_line:start + (i + 1) * words_per_line])
            for i in range(count)]


def chat(build, addresses, turns, *flags):
    out = subprocess.run(ctl(build, addresses[0], f"--servers={','.join(addresses)}", "chat",
                             "--temperature=0", "--ignore_eos", "--json", *flags),
                         input="\n".join(turns) + "\n", capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return [json.loads(line) for line in out.stdout.splitlines()]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def tokens_per_word(build, models, words, model):
    server = Server(build, models, f"--default_model={model}")
    try:
        out = subprocess.run(ctl(build, server.address, "tokenize", "--json",
                                 "--text=" + " ".join(words[:2000])),
                             capture_output=True, text=True, check=True)
    finally:
        server.stop()
    return len(json.loads(out.stdout)["token_ids"]) / 2000


def conversation(build, models, words, per_word, model):
    turns = lines_of(words, 0, 20, round(40 / per_word))  # about 40 tokens each
    rows = {}
    for name, flags, chat_flags in [
        ("state cache (text each turn)", [], ["--hold_state=false"]),
        ("client-held state", ["--state_cache=off"], ["--hold_state=true"]),
        ("neither (text each turn)", ["--state_cache=off"], ["--hold_state=false"]),
    ]:
        progress(f"conversation: {name}")
        server = Server(build, models, f"--default_model={model}", *flags)
        try:
            chat(build, [server.address], ["warm up the server"], "--max_tokens=4")
            rows[name] = chat(build, [server.address], turns, "--max_tokens=40", *chat_flags)
        finally:
            server.stop()
    print(f"### 20-turn conversation ({model}, 40 new tokens and 40 generated per turn)\n")
    print("| reuse | TTFT turns 1-3 | TTFT turns 18-20 | ratio | prefilled turn 1 | "
          "prefilled turn 20 | context at turn 20 |")
    print("|---|---|---|---|---|---|---|")
    for name, turns_out in rows.items():
        first, last = turns_out[0], turns_out[-1]
        # Turn 1 alone is noisy: the median of turns 1-3 and of 18-20.
        early = statistics.median(t["ttft_ms"] for t in turns_out[:3])
        late = statistics.median(t["ttft_ms"] for t in turns_out[-3:])
        print(f"| {name} | {early:.2f} ms | {late:.2f} ms | {late / early:.2f}x | "
              f"{first['prefilled_tokens']} | {last['prefilled_tokens']} | "
              f"{last['prompt_tokens'] + (last['cached_tokens'] if 'client' in name else 0)} tokens |")
    print("\nTokens prefilled per turn:\n")
    for name, turns_out in rows.items():
        print(f"- {name}: {[t['prefilled_tokens'] for t in turns_out]}")
    print()


def shared_prefix(build, models, words, per_word):
    system = " ".join(words[2000:2000 + round(1000 / per_word)])  # about 1,000 tokens
    path = "/tmp/bench_state_reuse_system.txt"
    with open(path, "w") as f:
        f.write(system + "\n")
    questions = lines_of(words, 5000, 64, round(12 / per_word))
    print("### Shared system prompt (about 1,000 tokens) and 64 different questions, aft-decay\n")
    print("| state cache | prompt tokens | reused per question (median) | TTFT p50 | TTFT p95 | "
          "TTFT total | prefilled total |")
    print("|---|---|---|---|---|---|---|")
    for name, flags in [("on (checkpoints every 256 tokens)", []),
                        ("on (every 64: --state_cache_interval=64)", ["--state_cache_interval=64"]),
                        ("off", ["--state_cache=off"])]:
        progress(f"shared system prompt: cache {name}")
        server = Server(build, models, "--default_model=aft-decay", *flags)
        try:
            chat(build, [server.address], ["warm up"], "--max_tokens=2")
            out = chat(build, [server.address], questions, "--max_tokens=8", "--fresh_turns",
                       "--hold_state=false", f"--system_file={path}")
        finally:
            server.stop()
        ttft = [t["ttft_ms"] for t in out]
        reused = statistics.median(t["cached_tokens"] for t in out[1:])
        print(f"| {name} | {statistics.median(t['prompt_tokens'] for t in out):.0f} | {reused:.0f} | "
              f"{pct(ttft, 0.5):.2f} ms | {pct(ttft, 0.95):.2f} ms | {sum(ttft):.0f} ms | "
              f"{sum(t['prefilled_tokens'] for t in out)} |")
    print()


def document_questions(build, models, model, document_tokens, questions):
    rng = random.Random(1)
    document = [rng.randrange(3, 500) for _ in range(document_tokens)]
    server = Server(build, models, f"--default_model={model}",
                    f"--max_prompt_tokens={document_tokens + 64}")
    print(f"### One document of {document_tokens} tokens, then {questions} questions about it "
          f"({model}, 30 tokens each, 2 generated)\n")
    print("| request | reused | prefilled | wall time |")
    print("|---|---|---|---|")
    try:
        for q in range(questions + 1):
            ids = document + [rng.randrange(3, 500) for _ in range(30 if q else 0)]
            progress(f"document: {'the document' if q == 0 else f'question {q}'}")
            started = time.monotonic()
            out = subprocess.run(ctl(build, server.address, "generate", "--json", "--max_tokens=2",
                                     "--temperature=0", "--ignore_eos",
                                     "--ids=" + ",".join(map(str, ids))),
                                 capture_output=True, text=True, check=True)
            took = time.monotonic() - started
            usage = json.loads(out.stdout)["usage"]
            print(f"| {'document' if q == 0 else f'question {q}'} | {usage.get('cached_tokens', 0)} | "
                  f"{usage.get('prefilled_tokens', 0)} | {took:.2f} s |")
        entries_now = server.metric("attn_state_cache_entries", model)
        size = server.metric("attn_state_cache_bytes", model)
    finally:
        server.stop()
    print(f"\nThe cache at the end: {entries_now:.0f} entries, {size / 1e6:.1f} MB.\n")


def entries(build):
    print("### 10,000 cached entries (distinct 64-token prompts, 1 generated token)\n")
    print("| model | entries | cache bytes | bytes per entry | server RSS before / after | "
          "replay hit rate | replay TTFT p50 (cold / warm) |")
    print("|---|---|---|---|---|---|---|")
    for model, flags in [("aft-decay", []), ("mha-alibi", ["--state_cache=all"])]:
        progress(f"10,000 entries: {model}")
        server = Server(build, f"{REPO}/models/{model}.pt", f"--default_model={model}",
                        "--state_cache_bytes=12000000000", "--state_cache_interval=100000", *flags)
        try:
            before = server.rss_mb()
            runs = []
            for phase in ("fill", "replay"):
                out = subprocess.run(ctl(build, server.address, "bench", "--streams=10000",
                                         "--concurrency=16", "--prompt_tokens=64",
                                         "--max_tokens=1", "--json", "--progress=false"),
                                     capture_output=True, text=True, check=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                if phase == "fill":
                    count = server.metric("attn_state_cache_entries", model)
                    size = server.metric("attn_state_cache_bytes", model)
                    after = server.rss_mb()
            hits = server.metric("attn_state_cache_hits_total", model)
            misses = server.metric("attn_state_cache_misses_total", model)
        finally:
            server.stop()
        replay_hits = hits / 10000
        print(f"| {model} | {count:.0f} | {size / 1e6:.1f} MB | {size / max(count, 1) / 1e3:.1f} kB | "
              f"{before:.0f} / {after:.0f} MB | {replay_hits:.1%} ({hits:.0f} hits, {misses:.0f} "
              f"misses in both runs) | {runs[0]['ttft_ms']['p50']:.2f} / "
              f"{runs[1]['ttft_ms']['p50']:.2f} ms |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--skip_entries", action="store_true")
    parser.add_argument("--model", default="", help="only the conversation, on this package")
    parser.add_argument("--document_tokens", type=int, default=0,
                        help="with --model: only a document and questions about it")
    parser.add_argument("--questions", type=int, default=8)
    args = parser.parse_args()
    models = args.model or f"{REPO}/models/aft-decay.pt"
    model = os.path.basename(models)[:-len(".pt")]
    if args.document_tokens > 0:
        print(f"Run {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, "
              f"`scripts/bench/bench_state_reuse.py --document_tokens={args.document_tokens}`\n")
        document_questions(args.build, models, model, args.document_tokens, args.questions)
        return
    words = corpus()
    print(f"Run {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, "
          f"`scripts/bench/bench_state_reuse.py`\n")
    per_word = tokens_per_word(args.build, models, words, model)
    conversation(args.build, models, words, per_word, model)
    if args.model:
        return
    shared_prefix(args.build, models, words, per_word)
    if not args.skip_entries:
        entries(args.build)


if __name__ == "__main__":
    main()
