#!/usr/bin/env python3
"""Decode throughput of the transformers reference (glm5_next) on a GPU.

The yardstick the CUDA backend is compared with (issue 9): the same model
config with random weights, bf16, batched greedy decode through
transformers' own cache, timed after a warm-up, on one GPU.

    python3 tools/bench/hf_decode.py --config configs/small/config.json \
        --batch 16 --context 64 --steps 32

Prints one JSON line per batch size: tokens/s of the timed decode steps.
Needs torch with CUDA and transformers 5.17 (glm5_next); no network.
"""
import argparse
import json
import time

import torch
from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", default="16")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = Glm5NextConfig(**json.load(f))
    dt = getattr(torch, a.dtype)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Glm5NextForConditionalGeneration(cfg).to(dt).eval()
    V = cfg.text_config.vocab_size
    for B in [int(x) for x in a.batch.split(",")]:
        g = torch.Generator(device="cuda").manual_seed(1)
        ids = torch.randint(0, V, (B, a.context), device="cuda", generator=g)
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
            cache = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            # one warm-up step, then the timed ones
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            t0 = time.time()
            for _ in range(a.steps):
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            dt_s = time.time() - t0
        print(json.dumps({"impl": "transformers " + __import__("transformers").__version__, "gpu": torch.cuda.get_device_name(),
                          "config": a.config, "dtype": a.dtype, "batch": B, "context": a.context, "steps": a.steps,
                          "ms_per_step": 1e3 * dt_s / a.steps, "tokens_per_s": B * a.steps / dt_s}), flush=True)


if __name__ == "__main__":
    main()
