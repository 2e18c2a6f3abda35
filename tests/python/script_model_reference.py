"""What a served TorchScript model should give, computed by the module
itself in Python: for each prompt (UTF-8 bytes as ids), its greedy
continuation by a step loop and the log-probabilities forward gives the
prompt and continuation, as JSON.

usage: /usr/bin/python3 script_model_reference.py MODEL.pt TOKENS OUT.json PROMPT...
"""
import json
import sys

import torch


def greedy(module, ids, count):
    with torch.no_grad():
        logits, state = module.prefill(torch.tensor([ids]), module.init_state(1))
        last = logits[0, -1]
        out = []
        for _ in range(count):
            token = int(torch.argmax(last))
            out.append(token)
            step_logits, state = module.step(torch.tensor([token]), state)
            last = step_logits[0]
    return out


def score(module, ids):
    with torch.no_grad():
        logprobs = torch.log_softmax(module.forward(torch.tensor([ids])).double(), -1)[0]
    return [0.0] + [float(logprobs[i, ids[i + 1]]) for i in range(len(ids) - 1)]


def main(path, count, out, prompts):
    module = torch.jit.load(path)
    results = []
    for prompt in prompts:
        ids = list(prompt.encode("utf-8"))
        tokens = greedy(module, ids, count)
        results.append({"prompt": prompt, "greedy": tokens, "score": score(module, ids + tokens)})
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
