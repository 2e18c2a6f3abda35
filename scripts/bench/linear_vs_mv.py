"""One row through F.linear against torch.mv (docs/model-contract.md, "Speed").

    /usr/bin/python3 scripts/bench/linear_vs_mv.py [--out 4096] [--in 1024] [--threads 2]
"""
import argparse
import time

import torch
import torch.nn.functional as F


def median_ms(call, calls=400, runs=5):
    for _ in range(20):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e3)
    return sorted(times)[runs // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=int, default=4096)
    parser.add_argument("--in", dest="inputs", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    w = torch.randn(args.out, args.inputs)
    x, x8 = torch.randn(1, args.inputs), torch.randn(8, args.inputs)
    linear = median_ms(lambda: F.linear(x, w))
    mv = median_ms(lambda: torch.mv(w, x[0]))
    print(f"| `F.linear(x, w)` | {linear:.3f} |")
    print(f"| `x @ w.t()` | {median_ms(lambda: x @ w.t()):.3f} |")
    print(f"| `torch.mv(w, x[0])` | {mv:.3f} |")
    print(f"| `F.linear` on 8 rows | {median_ms(lambda: F.linear(x8, w)):.3f} |")
    print(f"one row: F.linear / mv = {linear / mv:.1f}")


if __name__ == "__main__":
    main()
