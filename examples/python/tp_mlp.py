"""A tensor-parallel MLP block with tilewire, checked against the unsharded layer.

    torchrun --nproc-per-node N examples/python/tp_mlp.py        (N GPUs, N divides 14336)

Column-parallel up projection (each rank holds F / N rows of W1: tilewire.gemm, no
communication), GELU, then the row-parallel down projection fused with its all-reduce
(comm.gemm_allreduce: each finished tile of the partial product is pushed to the peers while
the next is computed). Every rank makes the same weights from one seed and keeps its shard; the
reference is the whole layer in fp32 on every rank. Exit status 0 when they agree."""
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
    M, D, F = 2048, 4096, 14336  # tokens, model width, FFN width (Llama-3-8B's)
    if F % P:
        raise SystemExit(f"tp_mlp: {P} ranks do not divide the FFN width {F}")
    g = torch.Generator(device="cuda").manual_seed(0)  # the same unsharded weights everywhere
    x = torch.randn(M, D, device="cuda", generator=g).to(torch.bfloat16)
    W1 = (torch.randn(F, D, device="cuda", generator=g) / D ** 0.5).to(torch.bfloat16)  # [F, D]
    W2 = (torch.randn(D, F, device="cuda", generator=g) / F ** 0.5).to(torch.bfloat16)  # [D, F]
    f = F // P
    W1_r = W1[rank * f:(rank + 1) * f].contiguous()     # this rank's rows:    [f, D]
    W2_r = W2[:, rank * f:(rank + 1) * f].contiguous()  # this rank's columns: [D, f]

    h = tilewire.gemm(x, W1_r)                                        # [M, f]
    h = torch.nn.functional.gelu(h.float(), approximate="tanh").to(torch.bfloat16)
    y = comm.gemm_allreduce(h, W2_r)                                  # [M, D], summed over ranks

    h_ref = torch.nn.functional.gelu((x.float() @ W1.float().T).to(torch.bfloat16).float(), approximate="tanh")
    ref = h_ref.to(torch.bfloat16).float() @ W2.float().T
    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    ok = err < 2e-2
    if rank == 0:
        print(f"tp_mlp: {P} ranks, x [{M}, {D}], FFN {F} ({f} per rank): max |y - ref| / max |ref| = {err:.2e} "
              f"({'ok' if ok else 'WRONG'})")
    comm.close()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
