"""Golden outputs of the transformers GLM-5.3-Flash (glm5_next) attention code
for npu/cpu's attention-op tests (hf_golden_test.go).

Run where torch and transformers (5.17, models/glm5_next) are installed:

    python3 make_golden.py OUTDIR

It writes OUTDIR/manifest.json and one raw little-endian file per tensor
(NAME.f32 or NAME.i32). Everything is fp32 on the CPU, seeded.
"""
import json
import os
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers.models.glm5_next import modeling_glm5_next as M

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
manifest = {"transformers": transformers.__version__, "torch": torch.__version__, "tensors": {}}


def save(name, t):
    a = t.detach().cpu().contiguous().numpy()
    if a.dtype.kind == "f":
        a, ext = a.astype("<f4"), "f32"
    else:
        a, ext = a.astype("<i4"), "i32"
    a.tofile(os.path.join(out, f"{name}.{ext}"))
    manifest["tensors"][name] = {"shape": list(a.shape), "dtype": ext}


def init_(p, std, mean=0.0):
    with torch.no_grad():
        p.normal_(mean, std)


with torch.no_grad():
    # ---- KDA: forget gate (both forms), chunked and recurrent attention ----
    H, K, T, D = 2, 32, 100, 48
    cfg = SimpleNamespace(linear_head_dim=K, linear_num_heads=H, hidden_size=D, linear_lower_bound=-5.0)
    gate = M.Glm5NextTextForgetGate(cfg)
    init_(gate.f_a_proj.weight, 0.3)
    init_(gate.f_b_proj.weight, 0.5)
    init_(gate.dt_bias, 1.0)
    init_(gate.A_log, 0.5)
    h = torch.randn(1, T, D)
    f = gate.f_b_proj(gate.f_a_proj(h))
    g_lb = gate(h)  # [1, T, H, K]
    gate.safe_gate_lower_bound = None
    g_sp = gate(h)
    save("kda_f", f.view(T, H * K))
    save("kda_dt_bias", gate.dt_bias)
    save("kda_a_log", gate.A_log)
    save("kda_g_lb", g_lb.view(T, H * K))
    save("kda_g_sp", g_sp.view(T, H * K))

    q, k, v = (torch.randn(1, T, H, K) for _ in range(3))
    beta = torch.sigmoid(torch.randn(1, T, H))
    s0 = torch.randn(1, H, K, K) * 0.3
    save("kda_qkv", torch.cat([q.reshape(T, H * K), k.reshape(T, H * K), v.reshape(T, H * K)], dim=-1))
    save("kda_beta", beta.view(T, H))
    save("kda_s0", s0.view(H, K, K))
    for name, g in (("lb", g_lb), ("sp", g_sp)):
        o, s = M.chunk_kimi_delta_attention(q, k, v, g=g, beta=beta, chunk_size=64, initial_state=s0.clone(),
                                            output_final_state=True, use_qk_l2norm_in_kernel=True)
        save(f"kda_chunk_out_{name}", o.reshape(T, H * K))
        save(f"kda_chunk_state_{name}", s.view(H, K, K))
        o, s = M.recurrent_kimi_delta_attention(q, k, v, g, beta, s0.clone(), True, use_qk_l2norm_in_kernel=True)
        save(f"kda_rec_out_{name}", o.reshape(T, H * K))
        save(f"kda_rec_state_{name}", s.view(H, K, K))

    # ---- DSA k-pool indexer ----
    T, D, QR = 45, 48, 24
    Hi, Di, kp, topk = 4, 16, 4, 16
    icfg = SimpleNamespace(hidden_size=D, index_n_heads=Hi, index_head_dim=Di, qk_rope_head_dim=0, index_topk=topk,
                           q_lora_rank=QR, index_kpool=kp, index_kpool_always_select_tail=True)
    idx = M.Glm5NextTextIndexer(icfg, 0)
    for p, std in ((idx.wq_b.weight, 0.3), (idx.wk.weight, 0.3), (idx.weights_proj.weight, 0.3),
                   (idx.index_kpool_compress_ape, 0.5), (idx.index_kpool_compress_gate, 0.3), (idx.k_norm.bias, 0.1)):
        init_(p, std)
    init_(idx.k_norm.weight, 0.1, 1.0)
    h = torch.randn(1, T, D)
    q_resid = torch.randn(1, T, QR)
    mask = torch.ones(1, T, dtype=torch.bool)
    sel = idx(h, q_resid, mask, None)  # [1, T, topk + kp - 1]
    iq = idx.wq_b(q_resid)
    ik = idx.k_norm(idx.wk(h))
    ig = F.linear(h, idx.index_kpool_compress_gate)
    iw = idx.weights_proj(h).float() * (Hi ** -0.5)
    packed = torch.cat([ik, ig, mask.to(ik.dtype)[..., None]], dim=-1)
    pool_keys, pool_indices, pool_valid = idx.get_pooled_states(packed)
    save("idx_q", iq.view(T, Hi * Di))
    save("idx_w", iw.view(T, Hi))
    save("idx_keys", ik.view(T, Di))
    save("idx_gates", ig.view(T, Di))
    save("idx_ape", idx.index_kpool_compress_ape)
    save("idx_pooled", pool_keys[0, pool_valid[0]])
    save("idx_sel", sel.view(T, -1))
    manifest["idx_scale"] = idx.softmax_scale

    # ---- sparse NoPE MLA over the indexer's selection (eager path) ----
    Ha, dk, dv, R = 4, 16, 16, 32
    kvb = torch.randn(Ha * (dk + dv), R) * R ** -0.5
    lat = torch.randn(1, 1, T, R)
    qa = torch.randn(1, T, Ha, dk)
    kv = F.linear(lat, kvb).view(1, T, Ha, dk + dv).transpose(1, 2)
    keys, values = torch.split(kv, [dk, dv], dim=-1)
    qs = qa.transpose(1, 2)
    amask = M.Glm5NextTextAttention.build_attention_mask_from_topk(
        SimpleNamespace(config=SimpleNamespace(_attn_implementation="eager")), topk_indices=sel, query_states=qs,
        kv_length=T)
    o, _ = M.eager_attention_forward(SimpleNamespace(num_key_value_groups=1, training=False), qs, keys, values, amask,
                                     scaling=dk ** -0.5)
    save("mla_q", qa.reshape(T, Ha * dk))
    save("mla_latents", lat.view(T, R))
    save("mla_kvb", kvb)
    save("mla_out", o.reshape(T, Ha * dv))

with open(os.path.join(out, "manifest.json"), "w") as fh:
    json.dump(manifest, fh, indent=1, sort_keys=True)
print("wrote", len(manifest["tensors"]), "tensors with transformers", transformers.__version__)
