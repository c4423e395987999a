"""The MoE FFN from PyTorch: tilewire.MoE against a torch reference layer on the same inputs, in
one run, under torchrun (one process per GPU):

    torchrun --nproc-per-node N scripts/py_moe_bench.py [--model dsv3|qwen3] [--tokens 128,512]
                                                        [--iters 10] [--json FILE]

The torch reference is what a framework without tilewire runs: per (token, slot) rows sorted by
destination rank, counts exchanged (all_to_all_single, read on the host), rows exchanged
(all_to_all_single), sorted by local expert, the experts' GEMMs (torch._grouped_mm where this
torch has it, else one matmul per expert), SiLU(gate) x up, the rows sent back
(all_to_all_single) and summed per token with their weights. Both run in the high-throughput
shape at EP = the world size (tilewire.MoE low_latency=False), bf16, top-8. Prints per token
count: tilewire's and torch's time per call (CUDA events, median of 5 repeats of `iters`
calls, the slowest rank), their ratio, and the largest difference of the outputs relative to the
output's largest element (#wrong: outputs farther apart than 3%).
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist

import tilewire

MODELS = {"dsv3": (7168, 2048, 256), "qwen3": (4096, 1536, 128)}  # hidden, expert FFN, experts
TOPK = 8
GROUPED = [hasattr(torch, "_grouped_mm")]  # cleared once torch._grouped_mm refuses


def torch_moe(x, idx, w, w1, w2, P, L):
    """The reference layer: x [T, H], idx [T, k] global experts, w [T, k]; w1 [L, 2F, H], w2 [L, H, F]."""
    T, H = x.shape
    F = w2.shape[2]
    flat = idx.reshape(-1)
    keep = (flat >= 0).nonzero().squeeze(1)
    e = flat[keep]
    order = torch.argsort(e, stable=True)  # by destination rank, then expert (experts are rank-major)
    src = keep[order]
    e = e[order]
    send_counts = torch.bincount(e // L, minlength=P)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    sc, rc = send_counts.tolist(), recv_counts.tolist()
    rows = x[src // TOPK]
    got = rows.new_empty((sum(rc), H))
    dist.all_to_all_single(got, rows, rc, sc)
    ge = torch.empty(sum(rc), dtype=e.dtype, device=e.device)
    dist.all_to_all_single(ge, e.contiguous(), rc, sc)
    lo = ge % L
    o2 = torch.argsort(lo, stable=True)
    a = got[o2]
    counts = torch.bincount(lo, minlength=L)
    y = None
    if GROUPED[0]:
        try:
            offs = torch.cumsum(counts, 0).to(torch.int32)
            h = torch._grouped_mm(a, w1.transpose(1, 2), offs=offs)
            act = (torch.nn.functional.silu(h[:, :F].float()) * h[:, F:].float()).to(torch.bfloat16)
            y = torch._grouped_mm(act, w2.transpose(1, 2), offs=offs)
        except (RuntimeError, TypeError) as err:  # this torch's grouped matmul refuses these operands
            GROUPED[0] = False
            print(f"# torch._grouped_mm not usable here ({err}); one matmul per expert", flush=True)
    if y is None:
        y = torch.empty((a.shape[0], H), dtype=torch.bfloat16, device=a.device)
        start = 0
        for l, c in enumerate(counts.tolist()):
            h = a[start:start + c] @ w1[l].t()
            act = (torch.nn.functional.silu(h[:, :F].float()) * h[:, F:].float()).to(torch.bfloat16)
            y[start:start + c] = act @ w2[l].t()
            start += c
    back = torch.empty_like(y)
    back[o2] = y
    ret = rows.new_empty((sum(sc), H))
    dist.all_to_all_single(ret, back, sc, rc)
    out = torch.zeros((T, H), dtype=torch.float32, device=x.device)
    out.index_add_(0, src // TOPK, ret.float() * w.reshape(-1)[src].unsqueeze(1))
    return out.to(torch.bfloat16)


def timed(fn, iters):
    t = []
    for _ in range(5):
        dist.barrier()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        torch.cuda.synchronize()
        t.append(e0.elapsed_time(e1) * 1e3 / iters)
    m = torch.tensor([statistics.median(t)], device="cuda")
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    return float(m)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3", choices=sorted(MODELS))
    ap.add_argument("--tokens", default="128,512,2048")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    comm = tilewire.init()
    P, me = comm.nranks, comm.rank
    H, F, E = MODELS[args.model]
    L = E // P
    g = torch.Generator().manual_seed(100 + me)
    w1 = (torch.randn(L, 2 * F, H, generator=g) / H ** 0.5).to(torch.bfloat16).cuda()
    w2 = (torch.randn(L, H, F, generator=g) / F ** 0.5).to(torch.bfloat16).cuda()
    rows = []
    for T in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(T, H, generator=g).to(torch.bfloat16).cuda()
        idx = torch.stack([torch.randperm(E, generator=g)[:TOPK] for _ in range(T)]).cuda()
        w = torch.rand(T, TOPK, generator=g).cuda()
        moe = tilewire.MoE(comm, T, H, F, TOPK, E, low_latency=False, max_expert_rows=3 * T * TOPK)
        out_tw = moe(x, idx, w, w1, w2)
        moe.check()
        out_ref = torch_moe(x, idx, w, w1, w2, P, L)
        scale = float(out_ref.float().abs().max().clamp(min=1e-6))
        diff = (out_tw.float() - out_ref.float()).abs()
        wrong = int((diff > 0.03 * scale).sum())
        t_tw = timed(lambda: moe(x, idx, w, w1, w2), args.iters)
        t_ref = timed(lambda: torch_moe(x, idx, w, w1, w2, P, L), args.iters)
        row = {"model": args.model, "tokens": T, "ranks": P, "tw_us": t_tw, "torch_us": t_ref,
               "torch_over_tw": t_ref / t_tw, "max_rel_diff": float(diff.max()) / scale, "wrong": wrong,
               "grouped_mm": GROUPED[0]}
        rows.append(row)
        if me == 0:
            print(f"{args.model} T={T:5d} P={P}: tilewire {t_tw:9.1f} us, torch {t_ref:9.1f} us "
                  f"(torch / tilewire {t_ref / t_tw:.3f}), max |diff| / max |out| {row['max_rel_diff']:.4f}, "
                  f"#wrong {wrong}", flush=True)
        moe.close()
    if me == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "py_moe", "torch": torch.__version__, "rows": rows}, f)
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
