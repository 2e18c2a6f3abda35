#!/usr/bin/env python3
"""Turns mixer_bench's JSON output into docs/benchmarks-log.md (markdown on stdout).

usage: bench_report.py RESULTS.json "COMMAND THAT PRODUCED IT"
"""
import json
import platform
import re
import subprocess
import sys
from collections import defaultdict

KINDS = ["mha", "mha-alibi", "relative", "linear-elu", "linear-exp",
         "aft-full", "aft-local", "aft-simple", "aft-conv"]
FLAT_KINDS = {"aft-simple", "aft-conv", "aft-decay", "linear-elu", "linear-exp", "linear-decay"}
WINDOW_KINDS = {"aft-local"}  # flat too, bounded by its window; no stated target
CONTEXTS = [64, 512, 4096, 8192]


def medians(results):
    """name -> median row, for the aggregate rows Google Benchmark writes."""
    out = {}
    for row in results["benchmarks"]:
        if row.get("aggregate_name") == "median":
            out[row["run_name"]] = row
    return out


def cpu_model():
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        match = re.search(r"Model name:\s*(.+)", text)
        return match.group(1).strip() if match else platform.processor()
    except OSError:
        return platform.processor()


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def step_table(rows, batch):
    lines = [f"| mixer | " + " | ".join(f"ctx {c}" for c in CONTEXTS) + " |",
             "|---" * (len(CONTEXTS) + 1) + "|"]
    for kind in KINDS:
        times = []
        for c in CONTEXTS:
            row = rows.get(f"Step/{kind}/batch:{batch}/context:{c}")
            times.append(row["real_time"] if row else None)
        lines.append(f"| {kind} | " + " | ".join(fmt(t) for t in times) + " |")
    return "\n".join(lines)


def flatness_table(rows):
    lines = ["| mixer | batch | step at 64 (us) | step at 8192 (us) | ratio | target |",
             "|---|---|---|---|---|---|"]
    for kind in KINDS:
        for batch in (1, 64):
            row = rows.get(f"Flatness/{kind}/batch:{batch}")
            if not row:
                continue
            ratio = row["ratio"]
            if kind in FLAT_KINDS:
                target = "<= 1.05: " + ("met" if ratio <= 1.05 else "MISSED")
            elif kind in WINDOW_KINDS:
                target = "flat (window)"
            else:
                target = "grows (cache)"
            lines.append(f"| {kind} | {batch} | {fmt(row['short_us'])} | {fmt(row['long_us'])} "
                         f"| {ratio:.3f} | {target} |")
    return "\n".join(lines)


def ratio_table(rows):
    lines = ["| mixer | context | step (us) | its matmuls alone (us) | ratio | target <= 1.5 |",
             "|---|---|---|---|---|---|"]
    for kind in KINDS:
        for context in (64, 8192):
            row = rows.get(f"Ratio/{kind}/batch:1/context:{context}")
            if not row:
                continue
            ratio = row["ratio"]
            lines.append(f"| {kind} | {context} | {fmt(row['step_us'])} | {fmt(row['matmul_us'])} "
                         f"| {ratio:.2f} | {'met' if ratio <= 1.5 else 'MISSED'} |")
    return "\n".join(lines)


def parallel_table(rows):
    times = sorted({int(m.group(1)) for name in rows
                    for m in [re.match(r"Parallel/.+/time:(\d+)$", name)] if m})
    lines = ["| mixer | " + " | ".join(f"T={t} (ms)" for t in times) + " | us/token at largest T |",
             "|---" * (len(times) + 2) + "|"]
    for kind in KINDS:
        values = []
        for t in times:
            row = rows.get(f"Parallel/{kind}/time:{t}")
            values.append(row["real_time"] if row else None)
        per_token = values[-1] * 1000 / times[-1] if values and values[-1] else None
        lines.append(f"| {kind} | " + " | ".join(fmt(v, 2) for v in values) +
                     f" | {fmt(per_token, 1)} |")
    return "\n".join(lines)


def main():
    path, command = sys.argv[1], sys.argv[2]
    with open(path) as f:
        results = json.load(f)
    rows = medians(results)
    ctx = results["context"]
    print(f"""# Benchmark log

Every measurement, dated, with its command and machine, oldest first; a
new one is added at the end (the mixer tables at the top and "Serving" are
rewritten by `scripts/bench/run_benchmarks.sh` and `bench_server.sh`).
docs/benchmarks.md holds the current result of each topic and points here.

The mixer tables: recorded by `{command}` on {ctx['date']}.
Machine: {cpu_model()}, {ctx['num_cpus']} CPUs, LibTorch 1.13 (Debian) with
OpenBLAS (openmp), `at::set_num_threads` as in the command. Mixers use
d_model 256, 4 heads, window 32 (aft-local, aft-conv); states are filled with
valid random values at the stated length. Every figure is the median of the
repetitions; ratios come from the interleaved benchmarks (both sides timed
in the same loop), because this machine's speed drifts between runs.

## Per-token step cost (us), batch 1

Each cell is its own run; compare across contexts with the flatness table
below, whose two sides share one loop.

{step_table(rows, 1)}

## Per-token step cost (us), batch 64 (time for the whole batch)

{step_table(rows, 64)}

## Flat per-token cost: step at context 8192 against context 64

Both steps timed in the same loop on two halves of one state pool.

{flatness_table(rows)}

## Step against its own matrix multiplications, batch 1

The same step's matrix multiplications alone, on the mixer's own weights and
state, timed in the same loop: the in/out projections; for softmax attention
q.K^T and p.V over the cache (Transformer-XL also q against the projected
distances); for linear attention the per-head state products; for windowed
AFT the bias-factor row times the ring (a matrix-vector product per step,
over the whole cache for aft-full). The elementwise work runs in one fused loop over the channels
(`model/kernels/`).

{ratio_table(rows)}

## Parallel forward, batch 1

{parallel_table(rows)}
""")


if __name__ == "__main__":
    main()
