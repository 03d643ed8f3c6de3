#!/usr/bin/env python3
"""MTP (multi-token prediction) goldens for npuserve's glm5_next drafter.

transformers 5.17 has no MTP module (it ignores `layers.45.*`), so the
reference is assembled from its pieces:

  trunk  = testdata/glm5next/tiny loaded with Glm5NextForConditionalGeneration
           (fp32, CPU); h_t = last_hidden_state (post final norm, the lm_head
           input).
  MTP    = enorm, hnorm (Glm5NextTextRMSNorm), eh_proj (nn.Linear(2D, D)),
           then one plain-residual DSA + MoE block and shared_head.norm. The
           block is a one-layer Glm5NextTextModel (layer_types
           [deepseek_sparse_attention], mlp_layer_types [sparse]) whose two
           hyper-connections are replaced by IdentityHC (post = 1, comb = I,
           collapsed = stream 0; the streams stay identical copies, so the
           layer computes exactly u + Attn(norm(u)) and then + MoE(norm(.)))
           and whose hc_head takes stream 0; its final `norm` is
           shared_head.norm. The block therefore runs transformers' own DSA
           attention, k-pool indexer, cache and MoE code, with its own
           DynamicCache (the MTP layer's cache).

  MTP(h_t, x_{t+1}) at position t:
     e  = embed_tokens[x_{t+1}]            (trunk's embedding, shared)
     e  = 0 at position 0                  (vLLM's rule; "nomask" goldens omit it)
     u0 = eh_proj(cat[enorm(e), hnorm(h_t)])   (embedding half first)
     g  = shared_head.norm(block(u0))
     draft logits = lm_head(g)             (trunk's lm_head, shared)
  chain step j >= 1: h <- g of the previous step (post shared_head.norm),
                     x <- the previous draft token.

Random MTP weights are saved under the checkpoint's names,
model.language_model.layers.{num_hidden_layers}.{enorm,hnorm,eh_proj,
self_attn.*, mlp.*, input_layernorm, post_attention_layernorm,
shared_head.norm}, next to a copy of tiny's weights:

  testdata/glm5next/mtp/   config.json (tiny's, num_nextn_predict_layers 1),
                           model.safetensors (tiny + MTP tensors, f32),
                           tokenizer.json, tokenizer_config.json,
                           generation_config.json, golden.json,
                           golden.safetensors

golden.safetensors (i = prompt index, 0..len(prompts)-1; T_i = prompt length):
  trunk.logits.<i>     [T_i, V]  trunk logits of the prompt (== tiny's own)
  mtp.logits.<i>       [T_i, V]  teacher-forced MTP logits at every prompt
                                 position t (input h_t, x_{t+1}; row T_i-1
                                 uses x_T = the trunk's greedy next token),
                                 position-0 embedding zeroed
  mtp.hidden.<i>       [T_i, D]  the post-shared_head.norm hidden g of those rows
  mtp.logits_nomask.<i> [T_i, V] the same without the position-0 rule
  draft.logits.<i>     [K, V]    the k=3 greedy chain from the end of the
                                 prompt: row 0 = mtp.logits.<i>[T_i-1], rows
                                 1.. the chained steps (post-norm recycle)
  verify.logits.<i>    [K+1, V]  trunk logits of one multi-token call over
                                 [x_T, d_1..d_K] at positions T_i..T_i+K on
                                 the prompt's cache
golden.json: prompts, next_token (x_T per prompt), drafts (d_1..d_K per
prompt), verify_greedy (argmax of each verify row), k, pos0_zero, margins,
versions, seed.

The chain above runs the MTP layer's indexer at every step. With
--index-share the fixture also gets the chain under
index_share_for_mtp_iteration, npuserve's rule (engine/model/glm5next
spec.go sharedSelection): step 0 (the last prompt row) runs the indexer;
step j >= 1 attends to the pools step 0 selected plus every position from
step 0's tail start through its own position (a forward hook replaces the
indexer's output; transformers turns the positions into a mask, so order
and width do not matter):
  draft_shared.logits.<i> [K, V]  the shared chain's draft logits
  golden.json drafts_shared, margins.shared_argmax
The script checks the hook on a short prompt, where every pool stays
selectable and the shared chain must equal the unshared one. The seed
search ignores the shared rows, so the rest of the fixture is unchanged.
The committed fixture was made without --index-share (TestMTPGolden then
checks the unshared chain only, with sharing turned off).

Run from the repository root on the accelerator host (torch and
transformers==5.17.0, no network; CPU fp32 is used):
    python3 tools/golden/mtp_golden.py --src testdata/glm5next/tiny --out testdata/glm5next/mtp --index-share
"""

import argparse
import copy
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402
from make_fixtures import Glm5NextForConditionalGeneration, mg  # noqa: E402

K = 3
PROMPTS = [1, 2]  # indices into tiny's golden.json prompts (29 and 70 tokens: both cross the sparse threshold)
POS0_ZERO = True
MIN_MARGIN = 2e-4  # relative argmax margin of every draft/verify row compared exactly in Go


class IdentityHC(nn.Module):
    """A hyper-connection that leaves the (identical) streams as they are:
    post = 1, comb = I, collapsed = stream 0. With identical input streams the
    decoder layer then computes the plain residual x + f(norm(x)) exactly."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, hidden_streams):
        b, s, n, _ = hidden_streams.shape
        assert n == self.n, (n, self.n)
        dev = hidden_streams.device
        post = torch.ones(b, s, n, dtype=torch.float32, device=dev)
        comb = torch.eye(n, dtype=torch.float32, device=dev).expand(b, s, n, n)
        return post, comb, hidden_streams[:, :, 0]


class FirstStream(nn.Module):
    """hc_head replacement: stream 0 (the streams are identical copies)."""

    def forward(self, hidden_streams):
        return hidden_streams[:, :, 0]


def mtp_text_config(tc):
    """The trunk's text config reduced to the MTP block: one DSA + MoE layer."""
    t = copy.deepcopy(tc)
    t.update(num_hidden_layers=1, layer_types=["deepseek_sparse_attention"], mlp_layer_types=["sparse"],
             indexer_types=["full"], first_k_dense_replace=0)
    return t


class MTP:
    """The reference MTP layer: norms and eh_proj here, the block in `stack`."""

    def __init__(self, trunk, block_model, seed):
        tc = trunk.config.text_config
        D = tc.hidden_size
        g = torch.Generator().manual_seed(seed)
        self.trunk = trunk
        self.block_model = block_model
        self.stack = block_model.model.language_model
        n = tc.hc_mult
        layer = self.stack.layers[0]
        layer.attn_hc = IdentityHC(n)
        layer.ffn_hc = IdentityHC(n)
        self.stack.hc_head = FirstStream()
        self.enorm = mg.Glm5NextTextRMSNorm(D, eps=tc.rms_norm_eps)
        self.hnorm = mg.Glm5NextTextRMSNorm(D, eps=tc.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * D, D, bias=False)
        with torch.no_grad():
            self.enorm.weight.copy_(torch.randn(D, generator=g) * 0.1 + 1.0)
            self.hnorm.weight.copy_(torch.randn(D, generator=g) * 0.1 + 1.0)
            self.eh_proj.weight.copy_(torch.randn(D, 2 * D, generator=g) * (1.0 / (2 * D) ** 0.5))
        self.D = D

    def step(self, h, toks, pos0, cache):
        """One MTP call over rows (h [S, D], toks [S] the next tokens);
        pos0: the first row is sequence position 0. Returns (logits [S, V], g [S, D], cache)."""
        S = len(toks)
        assert h.shape == (S, self.D), h.shape
        with torch.no_grad():
            e = self.trunk.model.language_model.embed_tokens(torch.tensor(toks)).float()
            if pos0:
                e[0] = 0
            u0 = self.eh_proj(torch.cat([self.enorm(e), self.hnorm(h)], dim=-1))
            assert u0.shape == (S, self.D)
            out = self.stack(inputs_embeds=u0[None], past_key_values=cache, use_cache=True)
            gh = out.last_hidden_state[0].float()
            assert gh.shape == (S, self.D), gh.shape
            logits = self.trunk.lm_head(gh).float()
        return logits, gh, out.past_key_values

    def state_tensors(self, L, tmpdir):
        """The MTP weights under the checkpoint's names (layer L), converted to
        the on-disk form by save_pretrained of the one-layer model."""
        from safetensors.torch import load_file
        shutil.rmtree(tmpdir, ignore_errors=True)
        self.block_model.save_pretrained(tmpdir, safe_serialization=True)
        files = [f for f in os.listdir(tmpdir) if f.endswith(".safetensors")]
        assert files, f"save_pretrained wrote no safetensors into {tmpdir}"
        saved = {}
        for f in files:
            saved.update(load_file(os.path.join(tmpdir, f)))
        shutil.rmtree(tmpdir)
        pre = f"model.language_model.layers.{L}."
        out = {}
        for k, v in saved.items():
            if ".layers.0." in k:
                rest = k.split(".layers.0.", 1)[1]
                if rest.startswith("hc_") or ".hc_" in rest or rest.startswith("attn_hc") or rest.startswith("ffn_hc"):
                    continue
                out[pre + rest] = v.float().contiguous()
            elif k == "model.language_model.norm.weight":
                out[pre + "shared_head.norm.weight"] = v.float().contiguous()
        out[pre + "enorm.weight"] = self.enorm.weight.detach().clone()
        out[pre + "hnorm.weight"] = self.hnorm.weight.detach().clone()
        out[pre + "eh_proj.weight"] = self.eh_proj.weight.detach().clone()
        return out


class IndexShare:
    """index_share_for_mtp_iteration for the reference chain (see the
    module doc): mode "keep" records the last row's selection of the MTP
    indexer (step 0), mode "use" replaces the indexer's output for a
    one-row chain step j with step 0's pools plus positions tail_start..q0+j."""

    def __init__(self, block_model, kpool, tail):
        mods = [m for m in block_model.modules() if isinstance(m, mg.Glm5NextTextIndexer)]
        assert len(mods) == 1, f"{len(mods)} indexers in the MTP block"
        self.kp, self.tail = kpool, tail
        self.mode, self.sel0, self.q0, self.j = None, None, None, 0
        self.calls = 0
        self.handle = mods[0].register_forward_hook(self._hook)

    def _hook(self, mod, args, out):
        if self.mode == "keep":
            self.sel0 = out[0, -1].clone()
            return None
        if self.mode != "use":
            return None
        assert out.shape[:2] == (1, 1), out.shape
        vis = (self.q0 + 1) // self.kp
        pools = [int(p) for p in self.sel0.tolist() if 0 <= p < vis * self.kp]
        assert len(pools) % self.kp == 0, pools
        row = pools + (list(range(vis * self.kp, self.q0 + self.j + 1)) if self.tail else [])
        self.calls += 1
        return torch.tensor(row, dtype=out.dtype, device=out.device).view(1, 1, -1)

    def chain(self, mtp, h, toks):
        """The shared k=K chain from the last of the rows (h, toks) at
        positions 0..len-1: (draft tokens, draft logits [K, V])."""
        S = len(toks)
        self.mode = "keep"
        lg, g, cache = mtp.step(h, toks, POS0_ZERO, None)
        self.mode = None
        drafts, rows, gl = [int(lg[-1].argmax())], [lg[-1]], g[-1:]
        for j in range(1, K):
            self.mode, self.q0, self.j = "use", S - 1, j
            l1, gl, cache = mtp.step(gl, [drafts[-1]], False, cache)
            self.mode = None
            drafts.append(int(l1[0].argmax()))
            rows.append(l1[0])
        return drafts, torch.stack(rows)


def argmax_margin(row):
    srt = row.sort(descending=True)[0]
    return ((srt[0] - srt[1]) / srt.abs().max()).item()


def trunk_hidden(trunk, ids):
    with torch.no_grad():
        out = trunk.model.language_model(input_ids=torch.tensor([ids]), use_cache=True)
        h = out.last_hidden_state[0].float()
        logits = trunk.lm_head(h).float()
    return h, logits, out.past_key_values


def unshared_chain(mtp, h, toks):
    """The k=K chain without sharing from the last of the rows (h, toks)."""
    lg, g, cache = mtp.step(h, toks, POS0_ZERO, None)
    drafts, rows, gl = [int(lg[-1].argmax())], [lg[-1]], g[-1:]
    for _ in range(1, K):
        l1, gl, cache = mtp.step(gl, [drafts[-1]], False, cache)
        drafts.append(int(l1[0].argmax()))
        rows.append(l1[0])
    return drafts, torch.stack(rows)


def shared_goldens(trunk, mtp, share, prompts, res):
    """The chains under index sharing, added to res (after the seed search,
    with no Recorder attached, so the rest of the fixture is unchanged)."""
    res["drafts_shared"], res["shared_margin"] = [], float("inf")
    for i, p in enumerate(prompts):
        h, _, _ = trunk_hidden(trunk, p)
        toks = p[1:] + [res["next"][i]]
        # The hook on a short prefix (every pool selectable: at most
        # index_topk/kpool pools visible to the whole chain) must not
        # change the chain.
        n = max(2, share.kp * mtp_topk_pools(trunk) - K)
        ds, dls = share.chain(mtp, h[:n], toks[:n])
        du, dlu = unshared_chain(mtp, h[:n], toks[:n])
        assert share.calls > 0, "the index-share hook never ran"
        assert ds == du and mf.rel(dls, dlu) < 1e-5, f"prompt {i}: shared chain on a dense prefix differs: {ds} vs {du}"
        ds, dls = share.chain(mtp, h, toks)
        dl = res["tensors"][f"draft.logits.{i}"]
        assert ds[0] == res["drafts"][i][0] and mf.rel(dls[:1], dl[:1]) < 1e-6, "step 0 must not change under sharing"
        for r in dls:
            res["shared_margin"] = min(res["shared_margin"], argmax_margin(r))
        res["tensors"][f"draft_shared.logits.{i}"] = dls
        res["drafts_shared"].append(ds)
        print(f"mtp: prompt {i}: shared drafts {ds}, unshared {res['drafts'][i]}", flush=True)


def evaluate(trunk, mtp, prompts, golden_src):
    res = {"tensors": {}, "next": [], "drafts": [], "verify_greedy": []}
    margin = float("inf")
    V = trunk.config.text_config.vocab_size
    for i, p in enumerate(prompts):
        T = len(p)
        h, logits, tcache = trunk_hidden(trunk, p)
        assert logits.shape == (T, V)
        d = mf.rel(logits, golden_src[i])
        assert d < 1e-5, f"prompt {i}: trunk logits differ from tiny's golden by {d}"
        margin = min(margin, argmax_margin(logits[-1]))
        x_T = int(logits[-1].argmax())
        toks = p[1:] + [x_T]
        # Teacher-forced MTP over the prompt, then the chain on that cache.
        lg, g, mcache = mtp.step(h, toks, POS0_ZERO, None)
        nomask, _, _ = mtp.step(h, toks, not POS0_ZERO, None)
        assert lg.shape == (T, V) and nomask.shape == (T, V)
        drafts = [int(lg[-1].argmax())]
        dl = [lg[-1]]
        margin = min(margin, argmax_margin(lg[-1]))
        gs = [g[-1:]]
        for j in range(1, K):
            l1, g1, mcache = mtp.step(gs[-1], [drafts[-1]], False, mcache)
            assert l1.shape == (1, V)
            margin = min(margin, argmax_margin(l1[0]))
            drafts.append(int(l1[0].argmax()))
            dl.append(l1[0])
            gs.append(g1)
        # The cached chain must equal one uncached MTP call over the same rows
        # (rows T..T+K-2 carry (g of the previous step, d_j)).
        lg2, _, _ = mtp.step(torch.cat([h] + gs[:-1], 0), toks + drafts[:-1], POS0_ZERO, None)
        dc = mf.rel(lg2[T - 1:], torch.stack(dl))
        assert dc < 1e-5, f"prompt {i}: cached draft chain differs from the uncached MTP call by {dc}"
        # Verify forward: one multi-token call over [x_T, d_1..d_K].
        vin = [x_T] + drafts
        with torch.no_grad():
            vo = trunk(input_ids=torch.tensor([vin]), past_key_values=tcache, use_cache=True)
        vl = vo.logits[0].float()
        assert vl.shape == (K + 1, V), vl.shape
        full, _ = mf.full_logits(trunk, p + vin)
        dv = mf.rel(vl, full[T - 1 + 1:T + K + 1])
        assert dv < 1e-5, f"prompt {i}: cached verify forward differs from the full sequence by {dv}"
        assert mf.rel(full[T - 1], logits[-1]) < 1e-5
        for r in vl:
            margin = min(margin, argmax_margin(r))
        res["tensors"][f"trunk.logits.{i}"] = logits
        res["tensors"][f"mtp.logits.{i}"] = lg
        res["tensors"][f"mtp.hidden.{i}"] = g
        res["tensors"][f"mtp.logits_nomask.{i}"] = nomask
        res["tensors"][f"draft.logits.{i}"] = torch.stack(dl)
        res["tensors"][f"verify.logits.{i}"] = vl
        res["next"].append(x_T)
        res["drafts"].append(drafts)
        res["verify_greedy"].append([int(r.argmax()) for r in vl])
    return res, margin


def mtp_topk_pools(trunk):
    tc = trunk.config.text_config
    return tc.index_topk // tc.index_kpool


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default="testdata/glm5next/tiny")
    ap.add_argument("--out", default="testdata/glm5next/mtp")
    ap.add_argument("--seed", type=int, default=11000)
    ap.add_argument("--index-share", action="store_true",
                    help="also write the draft chain under index_share_for_mtp_iteration (npuserve's rule)")
    args = ap.parse_args()
    import transformers
    from safetensors.torch import load_file
    assert transformers.__version__.startswith("5.17"), transformers.__version__
    torch.set_num_threads(8)

    with open(os.path.join(args.src, "golden.json")) as f:
        src_golden = json.load(f)
    src_tensors = load_file(os.path.join(args.src, "golden.safetensors"))
    prompts = [src_golden["prompts"][i] for i in PROMPTS]
    golden_src = [src_tensors[f"logits.{i}"] for i in PROMPTS]

    trunk = Glm5NextForConditionalGeneration.from_pretrained(args.src, dtype=torch.float32).eval()
    tc = trunk.config.text_config
    L = tc.num_hidden_layers
    with open(os.path.join(args.src, "config.json")) as f:
        cfg_json = json.load(f)
    assert cfg_json["text_config"].get("num_nextn_predict_layers", 0) == 1, "the source config must have num_nextn_predict_layers 1"
    block_text = mtp_text_config(cfg_json["text_config"])

    for attempt in range(200):
        seed = args.seed + attempt
        torch.manual_seed(seed)
        bcfg = mf.build_config(copy.deepcopy(block_text))
        block = Glm5NextForConditionalGeneration(bcfg).float().eval()
        mf.randomize(block, bcfg, seed)
        mtp = MTP(trunk, block, seed)
        rec = mf.Recorder(block)
        try:
            res, margin = evaluate(trunk, mtp, prompts, golden_src)
            im = rec.index_margins()
            router = min(rec.router_margin) if rec.router_margin else float("inf")
        finally:
            rec.close()
        # Recorder keeps the scores of the last indexer call only; the router
        # margins cover every MTP call.
        index = min((m.min().item() for m in im.values()), default=float("inf"))
        print(f"mtp: seed {seed} argmax margin {margin:.3g} router {router:.3g} index(last call) {index:.3g}", flush=True)
        if margin >= MIN_MARGIN and router >= mf.MIN_ROUTER_MARGIN and index >= mf.MIN_INDEX_MARGIN:
            break
    else:
        sys.exit("mtp: no seed with clear margins")

    if args.index_share:
        share = IndexShare(mtp.block_model, tc.index_kpool, tc.index_kpool_always_select_tail)
        shared_goldens(trunk, mtp, share, prompts, res)
        share.handle.remove()
    mtp_tensors = mtp.state_tensors(L, os.path.join(args.out + ".tmp"))
    # The MTP block's tensor names must be the trunk's DSA+MoE layer names without mHC.
    ref_layer = next(l for l in range(L) if tc.layer_types[l] == "deepseek_sparse_attention" and tc.mlp_layer_types[l] == "sparse")
    trunk_w = load_file(os.path.join(args.src, "model.safetensors"))
    ref_names = {k.split(f"layers.{ref_layer}.", 1)[1] for k in trunk_w if f".layers.{ref_layer}." in k}
    ref_names = {n for n in ref_names if not n.startswith("hc_")}
    got = {k.split(f"layers.{L}.", 1)[1] for k in mtp_tensors}
    extra = {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"}
    assert got == ref_names | extra, f"MTP names differ from layer {ref_layer}'s: missing {(ref_names | extra) - got}, extra {got - ref_names - extra}"
    for k, v in mtp_tensors.items():
        r = k.replace(f"layers.{L}.", f"layers.{ref_layer}.")
        if r in trunk_w:
            assert v.shape == trunk_w[r].shape, (k, v.shape, trunk_w[r].shape)
    assert not any(f"layers.{L}." in k for k in trunk_w), "the source checkpoint already has MTP tensors"

    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.src, f), args.out)
    merged = dict(trunk_w)
    merged.update(mtp_tensors)
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in merged.items()}, os.path.join(args.out, "model.safetensors"),
              metadata={"format": "pt"})
    mf.save_safetensors(os.path.join(args.out, "golden.safetensors"), res["tensors"])
    meta = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "source": os.path.basename(os.path.normpath(args.src)),
        "source_prompts": PROMPTS,
        "seed": seed,
        "k": K,
        "pos0_zero": POS0_ZERO,
        "prompts": prompts,
        "next_token": res["next"],
        "drafts": res["drafts"],
        "verify_greedy": res["verify_greedy"],
        "margins": {"argmax": margin, "router": router, "index_last_call": index},
        "index_share": bool(args.index_share),
        "mtp_layer": L,
    }
    if args.index_share:
        meta["drafts_shared"] = res["drafts_shared"]
        meta["margins"]["shared_argmax"] = res["shared_margin"]
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for f in sorted(os.listdir(args.out)):
        print(f"{args.out}/{f}: {os.path.getsize(os.path.join(args.out, f))} bytes")


if __name__ == "__main__":
    main()
