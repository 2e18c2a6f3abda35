#!/usr/bin/python3
"""The two ceilings a decode step and a prefill are measured against on a
GPU: the device-to-device copy rate (bytes read plus bytes written, over the
time, GB/s), which bounds a decode step that reads every weight once, and
the dense matrix product rate in bf16 (2 n^3 operations an n x n product,
TFLOP/s), which bounds a long prefill. Medians of timed repeats after a
warm-up, each timing waiting for the device. scripts/gpu/device_run.sh runs
it with the machine's PyTorch and passes the copy rate to
attn-backend-bench --bandwidth_gbs.

    python3 scripts/gpu/ceilings.py [--device=cuda] [--copy_mib=1024] [--n=8192]

Prints "ceiling copy G GB/s" and "ceiling bf16 matmul T TFLOP/s".
"""
import argparse
import statistics
import time

import torch


def timed(device, fn, repeats):
    """Median seconds of fn() over `repeats` runs, after two untimed ones."""
    def wait():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(2):
        fn()
    wait()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        wait()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--copy_mib", type=int, default=1024)
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    device = torch.device(args.device)

    values = args.copy_mib * 1024 * 1024 // 4
    source = torch.ones(values, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    seconds = timed(device, lambda: target.copy_(source), args.repeats)
    print(f"ceiling copy {2 * values * 4 / seconds / 1e9:.0f} GB/s "
          f"({args.copy_mib} MiB copied on {device})")
    del source, target

    a = torch.randn(args.n, args.n, device=device).to(torch.bfloat16)
    b = torch.randn(args.n, args.n, device=device).to(torch.bfloat16)
    seconds = timed(device, lambda: torch.mm(a, b), args.repeats)
    print(f"ceiling bf16 matmul {2 * args.n ** 3 / seconds / 1e12:.1f} TFLOP/s "
          f"({args.n} x {args.n} on {device})")


if __name__ == "__main__":
    main()
