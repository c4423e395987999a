"""A small MoE transformer block compiled whole with torch.compile, its FFN tilewire's expert-parallel
MoE (torch.ops.tilewire.moe_ffn), checked against the same block in eager torch with every expert
computed densely.

    torchrun --nproc-per-node N examples/python/moe_block.py

Each rank holds its own sequences (data parallel attention) and E / N of the experts (expert
parallel FFN):

    h   = x + Attention(RMSNorm(x))             causal, 8 heads, torch's scaled_dot_product_attention
    r   = RMSNorm(h);  top-k of softmax(r Wr)    the router, top-4 of E, weights renormalized
    out = h + MoE(r)                             SwiGLU experts: W2_e (SiLU(W1g_e r) * W1u_e r)

`torch.compile(block, fullgraph=True)` traces the attention, the norms and the router into
inductor kernels and keeps tilewire's op as one opaque call: dispatch, the grouped GEMMs and the
combine run inside it on the current stream. Every rank makes all weights from one seed, so it
can compute the dense reference for its own tokens. Exit status 0 when the compiled block
matches the reference on every rank (bf16 tolerance) and its second call gives the same bits.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as fn

import tilewire

T, D, HEADS, F, K, L = 256, 1024, 8, 512, 4, 4  # tokens per rank, width, heads, expert FFN, top-k, experts per rank


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(torch.bfloat16)


def attention(x, wqkv, wo):
    q, k, v = (x @ wqkv.t()).view(T, 3, HEADS, D // HEADS).permute(1, 2, 0, 3)  # [HEADS, T, D / HEADS] each
    o = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(0, 1).reshape(T, D) @ wo.t()


def route(r, wr):
    probs = torch.softmax(r.float() @ wr.float().t(), dim=-1)
    w, idx = probs.topk(K, dim=-1)
    return idx, w / w.sum(-1, keepdim=True)


def main() -> int:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    me, P = dist.get_rank(), dist.get_world_size()
    comm = tilewire.init()
    E = L * P
    g = torch.Generator(device="cuda").manual_seed(0)  # the same weights on every rank

    def weight(*shape, scale):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).to(torch.bfloat16)

    n1, n2 = (1 + 0.1 * torch.randn(D, device="cuda", generator=g) for _ in range(2))
    wqkv, wo, wr = weight(3 * D, D, scale=D ** -0.5), weight(D, D, scale=D ** -0.5), weight(E, D, scale=D ** -0.5)
    w1, w2 = weight(E, 2 * F, D, scale=D ** -0.5), weight(E, D, F, scale=F ** -0.5)  # gate rows, then up rows
    w1_local, w2_local = w1[me * L:(me + 1) * L].contiguous(), w2[me * L:(me + 1) * L].contiguous()
    x = torch.randn(T, D, device="cuda", generator=torch.Generator(device="cuda").manual_seed(100 + me))
    x = x.to(torch.bfloat16)

    moe = tilewire.MoE(comm, max_tokens_per_rank=T, hidden=D, ffn=F, topk=K, num_experts=E)

    @torch.compile(fullgraph=True)
    def block(x):
        h = x + attention(rms_norm(x, n1), wqkv, wo)
        r = rms_norm(h, n2)
        idx, w = route(r, wr)
        return h + torch.ops.tilewire.moe_ffn(r, idx, w, w1_local, w2_local, moe.id), h, r, idx, w

    out, h, r, idx, w = block(x)
    again = block(x)[0]
    moe.check()

    # The reference, eager and dense: every expert of the layer on this rank's tokens, routed as the
    # compiled block routed them (an eager router could break a near tie the other way), and the
    # attention half against eager torch.
    h_eager = x + attention(rms_norm(x, n1), wqkv, wo)
    err_h = ((h.float() - h_eager.float()).abs().max() / h_eager.float().abs().max()).item()
    ffn = torch.zeros(T, D, device="cuda")
    for e in range(E):
        sel = (idx == e)
        t = sel.any(-1).nonzero().flatten()
        if t.numel() == 0:
            continue
        a = (r[t] @ w1[e].t()).float()
        act = (fn.silu(a[:, :F]) * a[:, F:]).to(torch.bfloat16)
        ffn[t] += (w * sel)[t].sum(-1, keepdim=True) * (act @ w2[e].t()).float()
    ref = h.float() + ffn
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    same = torch.equal(out, again)
    oks = [None] * P
    dist.all_gather_object(oks, (err < 2e-2 and err_h < 2e-2 and same, err, err_h, same))
    ok = all(o[0] for o in oks)
    if me == 0:
        print(f"moe_block: {P} ranks, {T} tokens each, {E} experts (top-{K}), width {D}, compiled with "
              f"torch.compile(fullgraph=True): max |out - ref| / max |ref| per rank = "
              f"{', '.join(f'{o[1]:.2e}' for o in oks)} (attention half against eager: "
              f"{', '.join(f'{o[2]:.2e}' for o in oks)}); second call bit-identical on "
              f"{sum(o[3] for o in oks)} of {P} ranks ({'ok' if ok else 'WRONG'})")
    moe.close()
    comm.close()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
