#!/usr/bin/python3
"""Formats the JSON lines of scripts/bench/bench_server.sh as Markdown tables,
with each target of the serving issue and whether this run met it."""
import json
import os
import statistics
import sys


def load(out, name):
    path = os.path.join(out, name + ".jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def verdict(ok):
    return "met" if ok else "**not met**"


def step_pair(rounds, phase):
    """Median over rounds of the mean `phase` step in process and in the server, or "-"."""
    engine = [r["engine"].get(f"{phase}_step_ms", {}).get("64") for r in rounds]
    server = [r.get("server_steps", {}).get(f"{phase}_ms") for r in rounds]
    if None in engine or None in server or not rounds:
        return "-"
    return f"{statistics.median(engine):.2f} / {statistics.median(server):.2f}"


def grpc_run(ratio_round):
    """The client's result of a ratio round (older recordings hold it bare)."""
    grpc = ratio_round["grpc"]
    return grpc.get("run", grpc)


def cpu_cells(rounds, threads):
    """Where the CPU went during the gRPC runs (medians over rounds): the shares
    of the machine's CPUs taken by the engine's threads, the server's other
    threads and the client; and the engine's tokens/s per CPU it used in the
    server against in process (where it keeps its `threads` CPUs busy)."""
    usage = [r["grpc"].get("cpu") for r in rounds]
    if not rounds or None in usage:
        return "- | -"
    def share(key):
        return statistics.median(u[key] / (u["wall_s"] * u["cpus"]) for u in usage)
    per_cpu = statistics.median(
        (grpc_run(r)["tokens_per_s"] / (u["engine_s"] / u["wall_s"]))
        / (r["engine"]["throughput"]["64"] / threads)
        for r, u in zip(rounds, usage) if u["engine_s"] > 0)
    return (f"{100 * share('engine_s'):.0f}% / {100 * share('serving_s'):.0f}% / "
            f"{100 * share('client_s'):.0f}% | {per_cpu:.2f}")


def main():
    out = sys.argv[1]
    engine = {e["name"]: e for e in load(out, "engine")}
    grpc_runs = load(out, "grpc")
    contexts = load(out, "context")
    python = load(out, "python")
    slow = load(out, "slow")
    memory = {m["name"]: m["idle_rss_mb"] for m in load(out, "memory")}
    ratio_rounds = load(out, "ratio")

    print("### Engine in process (`attn-engine-bench`)\n")
    print("| model | params | tok/s c=1 | c=8 | c=64 | c=256 | decode 64 rows | model GFLOP/s | torch::mm GFLOP/s | ratio (>= 0.50) | prefill 512 | 512 steps | speed-up (>= 10) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, e in engine.items():
        t = e["throughput"]
        ratio = e["decode64_model_gflops"] / e["mm_gflops"]
        # The median of per-pair ratios; older recordings have only the medians.
        speedup = e.get("prefill_speedup", e["step512_ms"] / e["prefill512_ms"])
        print(f"| {name} | {e['parameters']/1e6:.2f}M | {t.get('1', 0):.0f} | {t.get('8', 0):.0f} | "
              f"{t.get('64', 0):.0f} | {t.get('256', 0):.0f} | {e['decode64_ms']:.2f} ms | "
              f"{e['decode64_model_gflops']:.1f} | {e['mm_gflops']:.1f} | {ratio:.2f} {verdict(ratio >= 0.5)} | "
              f"{e['prefill512_ms']:.1f} ms | {e['step512_ms']:.1f} ms | {speedup:.1f}x {verdict(speedup >= 10)} |")
    print("\nPrefill 512 and 512 steps: medians over interleaved pairs (30 in a full run); the speed-up is the median "
          "of each pair's steps / prefill.")

    wide = {name: e for name, e in engine.items() if e.get("wide_d_model", 0) > 0}
    if wide:
        print("\nThe same architectures made wider (untrained, random weights; a step's cost does not "
              "depend on their values), to show where the ratio above is limited by the bundled "
              "models' small matrices rather than by the engine:\n")
        print("| model | d_model | params | decode 64 rows | model GFLOP/s | torch::mm GFLOP/s | ratio (>= 0.50) |")
        print("|---|---|---|---|---|---|---|")
        for name, e in wide.items():
            ratio = e["wide_decode64_model_gflops"] / e["wide_mm_gflops"]
            print(f"| {name} | {e['wide_d_model']} | {e['wide_parameters']/1e6:.1f}M | "
                  f"{e['wide_decode64_ms']:.2f} ms | {e['wide_decode64_model_gflops']:.1f} | "
                  f"{e['wide_mm_gflops']:.1f} | {ratio:.2f} {verdict(ratio >= 0.5)} |")

    print("\n### Over gRPC (`attnctl bench`, prompt 128, 128 new tokens, closed loop)\n")
    print("| model | concurrency | tok/s | vs engine table above | TTFT p50 / p95 / p99 ms | ITL p50 / p95 / p99 ms | errors | server RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in grpc_runs:
        run = r["run"]
        c = str(run["concurrency"])
        base = engine.get(r["name"], {}).get("throughput", {}).get(c)
        ratio = run["tokens_per_s"] / base if base else float("nan")
        mark = f"{ratio:.2f}"
        ttft, itl = run["ttft_ms"], run["itl_ms"]
        print(f"| {r['name']} | {c} | {run['tokens_per_s']:.0f} | {mark} | "
              f"{ttft['p50']:.1f} / {ttft['p95']:.1f} / {ttft['p99']:.1f} | "
              f"{itl['p50']:.2f} / {itl['p95']:.2f} / {itl['p99']:.2f} | {run['errors']} | {r['rss_mb']:.0f} |")
    if ratio_rounds:
        print("\n### gRPC against the engine at 64 streams (rounds alternating the two)\n")
        print("The ratios in the table above compare runs minutes apart; these pair each "
              "gRPC run with an engine run just before it. The target is judged where the "
              "engine has the same CPU in both: with 1 engine thread it has a core of its own, "
              "in process and in the server alike (`--engine_cpus`, and `taskset` for the "
              "engine bench), while gRPC's threads and the client run on the other, as a "
              "client on its own machine would. That row is what the serving layer costs. "
              "With 2 engine threads the server's engine also shares both cores with gRPC's "
              "threads and the client, which the engine in process does not; the CPU columns "
              "show what they take, and the last but two shows the engine's tokens/s per CPU "
              "it used, in the server against in process.\n")
        print("The last two columns are the engine's mean decode step and prefill chunk (ms, "
              "medians over the rounds), in process and in the server (from its "
              "`attn_step_duration_seconds`): the same model's steps on about the same batches "
              "(the server's decode batches run a few rows short while clients reconnect).\n")
        print("| model | engine threads | engine tok/s per round | gRPC tok/s per round | ratios | "
              "median ratio (>= 0.90) | CPU during gRPC: engine / serving / client | "
              "engine tok/s per CPU: server / in process | decode step ms: in process / server | "
              "prefill chunk ms: in process / server |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        by_model = {}
        for r in ratio_rounds:
            by_model.setdefault((r["name"], r.get("threads", 2)), []).append(r)
        for (name, threads), rounds in sorted(by_model.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            engines = [r["engine"]["throughput"]["64"] for r in rounds]
            grpcs = [grpc_run(r)["tokens_per_s"] for r in rounds]
            ratios = [g / e for g, e in zip(grpcs, engines)]
            median = statistics.median(ratios)
            judged = verdict(median >= 0.9) if threads == 1 else "(cores shared with the client)"
            print(f"| {name} | {threads} | {' / '.join(f'{e:.0f}' for e in engines)} | "
                  f"{' / '.join(f'{g:.0f}' for g in grpcs)} | {' / '.join(f'{x:.2f}' for x in ratios)} | "
                  f"{median:.2f} {judged} | {cpu_cells(rounds, threads)} | "
                  f"{step_pair(rounds, 'decode')} | {step_pair(rounds, 'prefill')} |")
    if memory:
        print("\nIdle server RSS after start (MB, includes the preallocated state pool of 256 slots): "
              + ", ".join(f"{k} {v:.0f}" for k, v in memory.items()) + ".")

    rounds = max((r.get("round", 1) for r in contexts), default=1)
    how = f"{rounds} rounds alternating the contexts" if rounds > 1 else "one round"
    streams = max((r["run"].get("streams", 1) for r in contexts), default=1)
    print(f"\n### Inter-token latency by context (concurrency 1, {streams} streams of 64 new tokens "
          f"per round, {how})\n")
    print("Shared: the engine's 2 threads on the 2 cores the client also uses. Pinned: the engine "
          "on a core of its own (`--engine_cpus`), gRPC and the client on the other.\n")
    print("| model | context | shared: ITL p50 ms (median of rounds) | vs context 192 | "
          "pinned: ITL p50 ms | vs context 192 | server RSS MB |")
    print("|---|---|---|---|---|---|---|")
    by_context = {}
    for r in contexts:
        key = (r["name"], r["context"])
        by_context.setdefault(key, {}).setdefault(r.get("placement", "shared"), []).append(r)
    first = {}
    for (name, context), placements in by_context.items():
        cells = []
        for placement in ("shared", "pinned"):
            runs = placements.get(placement, [])
            if not runs:
                cells += ["-", "-"]
                continue
            p50 = statistics.median(r["run"]["itl_ms"]["p50"] for r in runs)
            first.setdefault((name, placement), p50)
            ratio = p50 / first[(name, placement)]
            flat = name != "mha"
            mark = f"{ratio:.3f}" + (f" {verdict(ratio <= 1.05)}" if flat and context > 4000 else "")
            cells += [f"{p50:.3f}", mark]
        rss = max(r["rss_mb"] for runs in placements.values() for r in runs)
        print(f"| {name} | {context} | {' | '.join(cells)} | {rss:.0f} |")
    print("\nIn process, one batch-1 step at context 128 vs ~4096 (interleaved): "
          + ", ".join(f"{n} {e['step_ctx_long_ms']/e['step_ctx128_ms']:.3f}x" for n, e in engine.items()) + ".")

    if python:
        pythons = [r["python"]["median_ms_per_token"] for r in python]
        engines = [r["engine"]["token_interval_c1_ms"] for r in python]
        steps = [r["engine"]["decode_step_c1_ms"] for r in python]
        ratios = [p / e for p, e in zip(pythons, engines)]
        median = statistics.median(ratios)
        print("\n### Batch 1 against plain Python eager PyTorch (`tests/tools/python_eager_baseline.py`)\n")
        print(f"aft-conv; {len(python)} rounds, each the Python loop then the engine.\n")
        print("| | ms per token, per round |")
        print("|---|---|")
        print(f"| Python eager loop, same recurrence, same weights | {' / '.join(f'{x:.3f}' for x in pythons)} |")
        print(f"| engine, concurrency 1: median time between two tokens (in process, sampling and event delivery included) | {' / '.join(f'{x:.3f}' for x in engines)} |")
        print(f"| of which the model's decode step | {' / '.join(f'{x:.3f}' for x in steps)} |")
        print(f"| speed-up | {' / '.join(f'{x:.1f}x' for x in ratios)} |")
        print(f"| median speed-up (target >= 5) | {median:.1f}x {verdict(median >= 5)} |")

    if slow:
        s = slow[0]
        run = s["run"]
        growth = s["held_rss_mb"] - s["idle_rss_mb"]
        print(f"\n### {s['streams']:,} concurrent slow-reading streams (aft-conv)\n")
        print("| idle RSS MB | RSS with all streams open MB | growth MB (<= 1024) | peak RSS MB | health check ms | new 16-token request ms | streams ok / failed |")
        print("|---|---|---|---|---|---|---|")
        print(f"| {s['idle_rss_mb']:.0f} | {s['held_rss_mb']:.0f} | {growth:.0f} {verdict(growth <= 1024)} | "
              f"{s['peak_rss_mb']:.0f} | {s['health_ms']} | {s['generate_ms']} | {run['streams']} / {run['errors']} |")


if __name__ == "__main__":
    main()
