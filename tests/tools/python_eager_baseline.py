#!/usr/bin/python3
"""The baseline the engine is measured against: a plain Python eager PyTorch
loop of the same recurrent math, on the same weights, at batch 1 (or
--batch rows stepping together).

It reads an aft-conv model package (torch.jit.load), runs the AFT-conv
recurrence token by token (running max, sums, ring of the last `window`
keys, per-head filter), and prints

  - the median milliseconds per generated token (greedy decoding), and
  - the greedy token ids after a prompt, so that a caller can check they are
    the server's (the same math, computed independently).

  python_eager_baseline.py models/aft-conv.pt --tokens 200 --prompt 5,17,300
"""
import argparse
import json
import statistics
import time

import torch


class Tensors(dict):
    """A package's tensors by their C++ names ("layers.0.ff.up.weight"); format 2
    stores them with '_' for '.'."""

    def __missing__(self, name):
        if "." not in name:
            raise KeyError(name)
        return self[name.replace(".", "_")]


class AftConvLm:
    def __init__(self, path):
        archive = torch.jit.load(path)
        self.config = json.loads(archive.config)
        self.config = self.config.get("lm", self.config)  # format 2 nests the model's config
        assert self.config["mixer"] == "aft-conv", "this baseline implements aft-conv"
        assert self.config["norm"] == "rmsnorm" and self.config["positions"] == "none"
        self.w = Tensors((name, t.detach()) for name, t in archive.named_buffers())
        self.d = self.config["d_model"]
        self.window = self.config["window"]
        self.layers = self.config["layers"]
        heads = self.config["heads"]
        # Channel c belongs to head c // (d / heads); its filter is bias[head, 0, delta].
        head_of = torch.arange(self.d) // (self.d // heads)
        self.filters = [self.w[f"layers.{l}.mixer.position_bias"][head_of, 0, :].t().exp()
                        for l in range(self.layers)]  # [window, d], delta 0 first

    def rms(self, x, gain):
        return gain * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)

    def new_state(self, batch=1):
        shape = (batch, self.d)
        return [{"c": torch.full(shape, float("-inf")), "num": torch.zeros(shape),
                 "den": torch.zeros(shape), "ek": [], "ekv": []} for _ in range(self.layers)]

    def mix(self, l, x, s):
        p = f"layers.{l}.mixer."
        q, k, v = torch.nn.functional.linear(x, self.w[p + "in_proj.weight"],
                                             self.w[p + "in_proj.bias"]).chunk(3, -1)
        c = torch.maximum(s["c"], k)
        rescale = torch.exp(s["c"] - c)  # exp(-inf) = 0 for the first token
        s["c"] = c
        s["num"] = s["num"] * rescale
        s["den"] = s["den"] * rescale
        s["ek"] = [e * rescale for e in s["ek"]]
        s["ekv"] = [e * rescale for e in s["ekv"]]
        ek = torch.exp(k - c)
        s["ek"].append(ek)
        s["ekv"].append(ek * v)
        if len(s["ek"]) > self.window:  # leaves the window: bias 0 from now on
            s["den"] = s["den"] + s["ek"].pop(0)
            s["num"] = s["num"] + s["ekv"].pop(0)
        num, den = s["num"].clone(), s["den"].clone()
        for delta in range(len(s["ek"])):  # delta = t - t'
            f = self.filters[l][delta]
            num = num + f * s["ekv"][-1 - delta]
            den = den + f * s["ek"][-1 - delta]
        y = torch.sigmoid(q) * num / den
        return torch.nn.functional.linear(y, self.w[p + "out_proj.weight"], self.w[p + "out_proj.bias"])

    def step(self, token, state):
        h = self.w["embedding.weight"][token]
        for l in range(self.layers):
            p = f"layers.{l}."
            h = h + self.mix(l, self.rms(h, self.w[p + "mix_norm.gain"]), state[l])
            ff_in = self.rms(h, self.w[p + "ff_norm.gain"])
            up = torch.nn.functional.linear(ff_in, self.w[p + "ff.up.weight"], self.w[p + "ff.up.bias"])
            h = h + torch.nn.functional.linear(torch.nn.functional.gelu(up), self.w[p + "ff.down.weight"],
                                               self.w[p + "ff.down.bias"])
        return self.rms(h, self.w["final_norm.gain"]) @ self.w["embedding.weight"].t()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package")
    parser.add_argument("--tokens", type=int, default=200, help="tokens to generate")
    parser.add_argument("--prompt", default="5,17,300", help="comma-separated prompt token ids")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads; 0: torch's default")
    parser.add_argument("--batch", type=int, default=1, help="rows stepped together")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model = AftConvLm(args.package)
    prompt = [int(x) for x in args.prompt.split(",")]
    times, generated = [], []
    with torch.inference_mode():
        state = model.new_state(args.batch)
        rows = lambda token: torch.full((args.batch,), token, dtype=torch.long)
        for token in prompt[:-1]:
            model.step(rows(token), state)
        token = prompt[-1]
        for _ in range(args.tokens):
            start = time.perf_counter()
            logits = model.step(rows(token), state)
            token = int(torch.argmax(logits[0]))
            times.append(time.perf_counter() - start)
            generated.append(token)
    # At batch 1 a step is a token; "median_ms_per_token" keeps that name.
    print(json.dumps({"package": args.package, "threads": torch.get_num_threads(),
                      "batch": args.batch, "median_ms_per_step": 1e3 * statistics.median(times),
                      "median_ms_per_token": 1e3 * statistics.median(times),
                      "greedy_ids": generated[:32]}))


if __name__ == "__main__":
    main()
