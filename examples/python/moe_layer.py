"""A mixture-of-experts layer with tilewire's dispatch and combine, checked against a dense
reference.

    torchrun --nproc-per-node N examples/python/moe_layer.py

Router (softmax over E experts, top-2), dispatch of every token to the ranks holding its
experts (one row per token and destination rank, in (source rank, token) order), the local
experts' GEMMs on the rows they own (tilewire.gemm), each row's outputs weighted and summed on
the expert's rank, then combine: every rank's partial sum of each token added back at the
token's rank in rank order, in fp32, rounded once. Each rank holds E / N experts; every rank
makes all weights from one seed so that it can also compute the dense layer for its own tokens
(the reference). Exit status 0 when they agree."""
import os
import sys

import torch
import torch.distributed as dist

import tilewire


def main() -> int:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    rank, P = dist.get_rank(), dist.get_world_size()
    comm = tilewire.init()
    N, D, k, L = 512, 2048, 2, 4  # tokens per rank, width, experts per token, experts per rank
    E = L * P
    g = torch.Generator(device="cuda").manual_seed(0)  # the same weights everywhere
    Wr = (torch.randn(E, D, device="cuda", generator=g) / D ** 0.5).to(torch.bfloat16)      # router
    We = (torch.randn(E, D, D, device="cuda", generator=g) / D ** 0.5).to(torch.bfloat16)   # expert e: [D_out, D_in]
    gx = torch.Generator(device="cuda").manual_seed(100 + rank)  # this rank's tokens
    x = torch.randn(N, D, device="cuda", generator=gx).to(torch.bfloat16)

    probs = torch.softmax((x.float() @ Wr.float().T), dim=1)
    w, idx = probs.topk(k, dim=1)  # [N, k] fp32 weights, int64 expert ids

    buf = tilewire.EpBuffer(comm, max_tokens_per_rank=N, hidden=D, topk=k, num_experts=E)
    r = buf.dispatch(x, idx, w)  # r.x [n, D]; r.topk_idx: local expert ids, -1 where another rank's
    y = torch.zeros(r.x.shape, dtype=torch.float32, device="cuda")
    for l in range(L):
        rows = (r.topk_idx == l).any(dim=1).nonzero().flatten()
        if rows.numel() == 0:
            continue
        h = tilewire.gemm(r.x[rows].contiguous(), We[rank * L + l])  # [rows, D]
        wl = (r.topk_weights[rows] * (r.topk_idx[rows] == l)).sum(dim=1, keepdim=True)
        y[rows] += wl * h.float()
    out = buf.combine(y.to(torch.bfloat16))  # [N, D]

    ref = torch.zeros(N, D, device="cuda")
    for j in range(k):
        for e in range(E):
            t = (idx[:, j] == e).nonzero().flatten()
            if t.numel():
                ref[t] += w[t, j:j + 1] * (x[t].float() @ We[e].float().T)
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    errs = [None] * P
    dist.all_gather_object(errs, err)
    if rank == 0:
        print(f"moe_layer: {P} ranks, {N} tokens each, {E} experts (top-{k}), width {D}, {r.x.shape[0]} rows "
              f"received on rank 0: max |out - ref| / max |ref| per rank = {', '.join(f'{e:.2e}' for e in errs)} "
              f"({'ok' if max(errs) < 2e-2 else 'WRONG'})")
    buf.close()
    comm.close()
    dist.destroy_process_group()
    return 0 if max(errs) < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
