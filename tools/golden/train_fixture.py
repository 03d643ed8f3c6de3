#!/usr/bin/env python3
"""A trained golden fixture: the `tiny` glm5_next architecture trained on text.

The random fixtures of make_fixtures.py have nearly flat next-token
distributions, so any perturbation (bf16 weights, int8 quantization) flips
many top-1 predictions; quantization targets stated for trained models
cannot be measured on them. This script trains the `tiny` configuration
with transformers 5.17 on this repository's own Go and Markdown files
(byte-level BPE of make_fixtures.py), then writes the same fixture files as
make_fixtures.py (reference logits and greedy tokens computed in fp32 on the
CPU) plus eval_prompts.jsonl: held-out token windows for
`npuserve eval` / the quantization agreement tests.

  testdata/glm5next/trained/        model (f32), golden.json, golden.safetensors,
                                    eval_prompts.jsonl
  testdata/glm5next/trained-bf16/   the same weights rounded to bf16

Run from the repository root on a host with torch and transformers==5.17.0
(a GPU makes training take a minute; the CPU works, slower):
    python3 tools/golden/train_fixture.py --out testdata/glm5next

Training: AdamW, batch 32 x 128 tokens, cosine schedule, for --steps steps
or --max-seconds, whichever ends first; the routers' correction bias follows
the auxiliary-loss-free balancing rule (bias += 1e-3 * sign(mean load - load)).
The indexers get no gradient (selection is discrete) and keep their random
initialisation. A different tree, GPU or step count gives a different,
equally valid model; golden.json records the corpus hash and the losses.
"""

import argparse
import copy
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402
from make_fixtures import Glm5NextForConditionalGeneration, mg  # noqa: E402

NAME = "trained"
SEQ = 128
BATCH = 32
EVAL_WINDOWS = 24
EVAL_LEN = 96


def corpus_files(root):
    """The repository's Go and Markdown files (not testdata), sorted."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    except Exception:
        out = []
    if not out:  # not a git checkout (a copied tree): walk it
        for d, _, fs in os.walk(root):
            if "/." in d or d.startswith(os.path.join(root, ".")):
                continue
            out += [os.path.relpath(os.path.join(d, f), root) for f in fs]
    keep = [p for p in out if p.endswith((".go", ".md"))
            and not p.startswith(("testdata/", "tools/tokgolden/tables", "shared/")) and "/testdata/" not in p]
    return sorted(keep)


def held_out(path):
    return int(hashlib.sha1(path.encode()).hexdigest(), 16) % 10 == 0


def token_streams(root, tok):
    train, test = [], []
    h = hashlib.sha256()
    eot = tok.token_to_id("<|endoftext|>")
    files = corpus_files(root)
    for p in files:
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            text = f.read()
        h.update(p.encode() + b"\0" + text.encode())
        ids = tok.encode(text).ids + [eot]
        (test if held_out(p) else train).extend(ids)
    return torch.tensor(train), torch.tensor(test), h.hexdigest(), len(files)


def init_model(cfg, seed):
    """transformers' own initialisation, with random indexer, compress and
    router-bias parameters (they get no gradient, or none worth the name)."""
    torch.manual_seed(seed)
    model = Glm5NextForConditionalGeneration(cfg).float()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".indexer.wq_b" in name or ".indexer.weights_proj" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif ".indexer.wk" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.08)
            elif name.endswith("index_kpool_compress_ape"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith("index_kpool_compress_gate"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def train(model, data, steps, max_seconds, device, lr, seed):
    model.to(device).train()
    routers = [m for m in model.modules() if isinstance(m, mg.Glm5NextTextTopkRouter)]
    loads = {}

    def hook(m, args, out):
        loads[id(m)] = torch.bincount(out[2].reshape(-1), minlength=m.num_experts).float()

    handles = [r.register_forward_hook(hook) for r in routers]
    params = [p for n, p in model.named_parameters() if not n.startswith("model.visual")]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    warm = 30
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))
    g = torch.Generator().manual_seed(seed)
    start = time.time()
    curve = []
    step = 0
    for step in range(steps):
        if time.time() - start > max_seconds:
            break
        idx = torch.randint(0, len(data) - SEQ - 1, (BATCH,), generator=g)
        x = torch.stack([data[i:i + SEQ] for i in idx]).to(device)
        out = model(input_ids=x, labels=x, use_cache=False)
        loss = out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            for r in routers:
                ld = loads.get(id(r))
                if ld is not None:
                    r.e_score_correction_bias.add_(1e-3 * torch.sign(ld.mean() - ld))
        if step % 25 == 0 or step == steps - 1:
            curve.append([step, round(loss.item(), 4)])
            print(f"step {step} loss {loss.item():.4f} {time.time() - start:.1f}s", flush=True)
    for h in handles:
        h.remove()
    model.eval()
    return curve, step + 1, time.time() - start


@torch.no_grad()
def heldout_stats(model, windows, device):
    """Mean loss, top-1 accuracy and mean top-1 probability on held-out windows."""
    model.to(device).eval()
    tot_loss = tot_acc = tot_p = n = 0.0
    for w in windows:
        x = torch.tensor([w], device=device)
        lg = model(input_ids=x, use_cache=False).logits[0, :-1].float()
        y = x[0, 1:]
        lp = lg.log_softmax(-1)
        tot_loss += -lp.gather(1, y[:, None]).sum().item()
        tot_acc += (lg.argmax(-1) == y).sum().item()
        tot_p += lp.max(-1)[0].exp().sum().item()
        n += len(y)
    return {"heldout_loss": round(tot_loss / n, 4), "heldout_top1_accuracy": round(tot_acc / n, 4),
            "heldout_mean_top1_prob": round(tot_p / n, 4), "heldout_tokens": int(n)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/glm5next")
    ap.add_argument("--root", default=".")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--max-seconds", type=float, default=240)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--template", default=os.path.join(os.path.dirname(__file__), "glm5_chat_template.jinja"))
    args = ap.parse_args()
    assert mf.transformers.__version__.startswith("5.17"), mf.transformers.__version__
    os.makedirs(os.path.join(args.out, "_tok"), exist_ok=True)
    tok, ids = mf.make_tokenizer(os.path.join(args.out, "_tok"))
    with open(args.template) as f:
        template = f.read()
    train_ids, test_ids, corpus_hash, nfiles = token_streams(args.root, tok)
    print(f"corpus: {nfiles} files, {len(train_ids)} train / {len(test_ids)} held-out tokens, sha256 {corpus_hash}",
          flush=True)

    cfg = mf.build_config(copy.deepcopy(mf.CONFIGS["tiny"]))
    model = init_model(cfg, args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    try:
        curve, steps, secs = train(model, train_ids, args.steps, args.max_seconds, device, args.lr, args.seed)
    except Exception as e:  # a kernel the GPU path lacks: train on the CPU
        if device == "cpu":
            raise
        print(f"training on {device} failed ({e!r}); training on the cpu", flush=True)
        device = "cpu"
        model = init_model(cfg, args.seed)
        curve, steps, secs = train(model, train_ids, args.steps, args.max_seconds, device, args.lr, args.seed)
    model = model.to("cpu").float().eval()

    g = torch.Generator().manual_seed(args.seed)
    starts = torch.randint(0, len(test_ids) - EVAL_LEN - 1, (EVAL_WINDOWS,), generator=g).tolist()
    windows = [test_ids[s:s + EVAL_LEN].tolist() for s in starts]
    stats = heldout_stats(model, windows, "cpu")
    print(f"trained {steps} steps in {secs:.0f}s on {device}: {stats}", flush=True)

    # Golden prompts: held-out windows, moved until every margin is clear.
    text_ids = tok.encode(mf.TEXT_PROMPT).ids
    d32 = os.path.join(args.out, NAME)
    d16 = os.path.join(args.out, NAME + "-bf16")
    for attempt in range(40):
        base = (attempt * 7919 + 13) % (len(test_ids) - 400)
        prompts, off = [], base
        for n in mf.PROMPT_LENS:
            prompts.append(test_ids[off:off + n].tolist())
            off += n
        res, m = mf.evaluate(model, cfg, prompts, text_ids, need_hidden=True)
        print(f"{NAME}: offset {base} margins {m}", flush=True)
        if not mf.margins_ok(m):
            continue
        res16, mb = mf.save_pair(NAME, model, cfg, d32, d16, prompts, text_ids)
        if mf.margins_ok(mb):
            break
    else:
        sys.exit(f"{NAME}: no prompt offset with clear margins")
    extra = {"training": {
        "corpus": "this repository's *.go and *.md files outside testdata (git ls-files, or the walked tree), byte-level BPE",
        "corpus_files": nfiles, "corpus_sha256": corpus_hash,
        "train_tokens": len(train_ids), "heldout_tokens_total": len(test_ids),
        "steps": steps, "seconds": round(secs, 1), "device": device, "batch": BATCH, "seq": SEQ, "lr": args.lr,
        "seed": args.seed, "loss_curve": curve, **stats,
        "prompt_offset": base,
    }}
    mf.write_case(NAME, args.out, ids, template, model, prompts, text_ids, args.seed, res, m, res16, mb, extra)
    with open(os.path.join(d32, "eval_prompts.jsonl"), "w") as f:
        for w in windows:
            f.write(json.dumps(w) + "\n")
    shutil.rmtree(os.path.join(args.out, "_tok"))
    for name in (NAME, NAME + "-bf16"):
        p = os.path.join(args.out, name)
        for fn in sorted(os.listdir(p)):
            print(f"{name}/{fn}: {os.path.getsize(os.path.join(p, fn))} bytes")


if __name__ == "__main__":
    main()
