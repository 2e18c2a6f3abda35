#!/usr/bin/python3
"""Soak and chaos against a running attn-server (scripts/check/soak.sh starts one).

For --minutes, --workers threads each pick one of these at random, again and again:
  unary    Generate, 8 tokens                          expect OK
  stream   GenerateStream, 32 tokens, read fully       expect OK
  score    Score of a short text                       expect OK
  cancel   a long stream cancelled after a few tokens  expect CANCELLED
  deadline a long stream with a 100 ms deadline        expect DEADLINE_EXCEEDED
  bad      an invalid request (top_p 2, max_tokens -1) expect INVALID_ARGUMENT
  slow     a stream read with 20 ms pauses             expect OK
  kill     attnctl streaming, killed with SIGKILL      (the server sees a cancel)
Any other status is a failure. Every 5 s it samples the server's RSS and open file
descriptors. At the end it waits for the server to go idle and checks:
  - the running gauge is back to 0;
  - attn_requests_total agrees with what the clients counted, per method;
  - RSS and descriptors are flat after the warm-up: it reports the slope of a
    least-squares line through the samples of the last 80% of the run (the state
    cache fills first, up to --state_cache_bytes, so the warm-up includes that).
Prints a Markdown report; exits 1 on any failure.
"""
import argparse
import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
from grpc_tools import protoc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stubs():
    out = tempfile.mkdtemp(prefix="soak_")
    shutil.copy(os.path.join(REPO, "proto", "attn", "v1", "text_generation.proto"),
                os.path.join(out, "text_generation.proto"))
    if protoc.main(["protoc", f"-I{out}", f"--python_out={out}", f"--grpc_python_out={out}",
                    os.path.join(out, "text_generation.proto")]) != 0:
        sys.exit("cannot compile text_generation.proto")
    sys.path.insert(0, out)
    import text_generation_pb2 as pb  # noqa: E402
    import text_generation_pb2_grpc as pb_grpc  # noqa: E402
    return pb, pb_grpc


class Soak:
    def __init__(self, args, pb, pb_grpc):
        self.args, self.pb = args, pb
        self.channel = grpc.insecure_channel(args.server)
        self.stub = pb_grpc.TextGenerationStub(self.channel)
        self.lock = threading.Lock()
        self.counts = collections.Counter()  # (method, code) as the server should count it
        self.unexpected = []
        self.end = time.time() + args.minutes * 60

    def count(self, method, code, expected):
        with self.lock:
            self.counts[(method, code)] += 1
            if code not in expected:
                self.unexpected.append((method, code))

    def request(self, tokens, **fields):
        return self.pb.GenerateRequest(prompt="And it came to pass", max_tokens=tokens,
                                       temperature=0.8, seed=random.randrange(1 << 30), **fields)

    def stream(self, method_name, request, expected, timeout=None, stop_after=None, pause=0.0):
        call = self.stub.GenerateStream(request, timeout=timeout)
        code = "OK"
        try:
            for i, _ in enumerate(call):
                if stop_after is not None and i + 1 >= stop_after:
                    call.cancel()
                if pause:
                    time.sleep(pause)
        except grpc.RpcError as error:
            code = error.code().name
        # A cancel that arrives after the last message leaves the call OK.
        self.count("GenerateStream", code, expected)

    def unary(self, method, call, expected):
        try:
            call()
            code = "OK"
        except grpc.RpcError as error:
            code = error.code().name
        self.count(method, code, expected)

    def kill(self):
        ctl = [self.args.attnctl, f"--server={self.args.server}", "stream", "--max_tokens=2000",
               "--prompt=And it came to pass", "--ignore_eos"]
        proc = subprocess.Popen(ctl, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        proc.stdout.read(1)  # the stream is running: its first text has arrived
        time.sleep(random.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.stdout.close()
        proc.wait()
        # The server ends the stream CANCELLED (or OK if it was quicker).
        self.count("GenerateStream", "KILLED", {"KILLED"})

    def step(self):
        action = random.choice(["unary", "stream", "score", "cancel", "deadline", "bad", "slow",
                                "kill"])
        if action == "unary":
            self.unary("Generate", lambda: self.stub.Generate(self.request(8)), {"OK"})
        elif action == "stream":
            self.stream("GenerateStream", self.request(32), {"OK"})
        elif action == "score":
            self.unary("Score", lambda: self.stub.Score(self.pb.ScoreRequest(
                text="In the beginning God created the heaven and the earth.")), {"OK"})
        elif action == "cancel":
            self.stream("GenerateStream", self.request(2000, ignore_eos=True), {"CANCELLED"},
                        stop_after=random.randint(1, 20))
        elif action == "deadline":
            self.stream("GenerateStream", self.request(2000, ignore_eos=True),
                        {"DEADLINE_EXCEEDED"}, timeout=0.1)
        elif action == "bad":
            bad = random.choice([self.request(8, top_p=2.0), self.request(-1),
                                 self.pb.GenerateRequest(prompt="")])
            self.unary("Generate", lambda: self.stub.Generate(bad), {"INVALID_ARGUMENT"})
        elif action == "slow":
            self.stream("GenerateStream", self.request(24), {"OK"}, pause=0.02)
        else:
            self.kill()

    def worker(self):
        while time.time() < self.end:
            self.step()


def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def slope(points):
    """Least-squares slope of (t, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / den if den else 0.0


def metrics(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--metrics_port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--attnctl", required=True)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    pb, pb_grpc = stubs()
    soak = Soak(args, pb, pb_grpc)
    before = metrics(args.metrics_port)
    threads = [threading.Thread(target=soak.worker, daemon=True) for _ in range(args.workers)]
    start = time.time()
    for t in threads:
        t.start()
    samples = []
    while any(t.is_alive() for t in threads):
        samples.append((time.time() - start,) + sample(args.pid))
        total = sum(soak.counts.values())
        print(f"\r{time.time() - start:7.0f} s  calls {total:8d}  rss {samples[-1][1]:7.1f} MB  "
              f"fds {samples[-1][2]:4d}", end="", file=sys.stderr, flush=True)
        time.sleep(5)
    print(file=sys.stderr)
    # Idle: the running gauge back to zero (killed clients are noticed at the next step).
    deadline = time.time() + 30
    while time.time() < deadline:
        text = metrics(args.metrics_port)
        running = sum(float(v) for v in re.findall(r"^attn_num_requests_running\{[^}]*\} (\S+)$",
                                                   text, re.M))
        if running == 0:
            break
        time.sleep(0.5)
    after = metrics(args.metrics_port)
    cache = {name: float(value) for name, value in re.findall(
        r'^attn_state_cache_(bytes|capacity_bytes|entries)\{[^}]*\} (\S+)$', after, re.M)}

    def server_counts(text):
        out = collections.Counter()
        for code, method, value in re.findall(
                r'^attn_requests_total\{code="([^"]+)",method="([^"]+)",model="[^"]*"\} (\S+)$',
                text, re.M):
            out[(code, method)] += float(value)
        return out
    delta = server_counts(after)
    delta.subtract(server_counts(before))
    failures = [f"unexpected status {m} {c}" for m, c in soak.unexpected[:20]]
    if running != 0:
        failures.append(f"running gauge {running} after the run")
    print(f"### Soak: {args.minutes:g} minutes, {args.workers} workers\n")
    print("| method | client count | server count | codes (server) |")
    print("|---|---|---|---|")
    for method in ("Generate", "GenerateStream", "Score"):
        client = sum(v for (m, _), v in soak.counts.items() if m == method)
        server = sum(v for (c, m), v in delta.items() if m == method)
        codes = ", ".join(f"{c} {v:.0f}" for (c, m), v in sorted(delta.items()) if m == method and v)
        print(f"| {method} | {client} | {server:.0f} | {codes} |")
        if client != round(server):
            failures.append(f"{method}: clients counted {client}, the server {server:.0f}")
    steady = [s for s in samples if s[0] >= 0.2 * samples[-1][0]]
    rss_slope = slope([(t, r) for t, r, _ in steady]) * 3600
    fd_slope = slope([(t, f) for t, _, f in steady]) * 3600
    print(f"\nRSS {samples[0][1]:.0f} MB at the start, {min(s[1] for s in steady):.0f}-"
          f"{max(s[1] for s in steady):.0f} MB after the warm-up, slope {rss_slope:+.1f} MB/hour; "
          f"open descriptors {min(s[2] for s in steady)}-{max(s[2] for s in steady)}, slope "
          f"{fd_slope:+.1f}/hour; running gauge at the end {running:.0f}. The state cache holds "
          f"{cache.get('entries', 0):.0f} entries, {cache.get('bytes', 0) / 2**20:.1f} of its "
          f"{cache.get('capacity_bytes', 0) / 2**20:.0f} MiB: RSS grows until it is full.")
    if failures:
        print("\nFAILURES:\n" + "\n".join(f"- {f}" for f in failures))
        sys.exit(1)
    print("\nNo unexpected status.")


if __name__ == "__main__":
    main()
