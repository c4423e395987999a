"""comm.gemm_allreduce timed from Python the way `tilewire bench gemm-allreduce` times row (e).

    torchrun --nproc-per-node 1 scripts/py_gemm_allreduce_time.py [M N K] [-R REPEATS] [--warm-s WARM_S] [--json FILE]

bf16, A [M, K], B [N, K] (b_layout "nk"; uniform in [-1, 1) as the CLI's), the inputs rotating over two (A, B) sets, C returned as
a view (no copy): `iters` calls back to back between two CUDA events on torch's current stream,
after `warmup` untimed calls and then untimed calls for WARM_S seconds (default 2: the CLI times
its row among five others on a GPU already hot, whose clock is lower than after an idle start);
the median over `repeats` of (elapsed / iters). The same defaults as the CLI (20, 5, 5; scripts/
gpu_run.sh python passes -R 9 to both). Prints one JSON line (and writes it to FILE): what the Python layer adds over
the C++ call is the difference between the two figures (scripts/gpu_run.sh python compares them
in the same call)."""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import tilewire


def main(argv) -> int:
    opts = {"--json": None, "-R": "5", "--warm-s": "2"}
    for flag in opts:
        if flag in argv:
            i = argv.index(flag)
            opts[flag] = argv[i + 1]
            argv = argv[:i] + argv[i + 2:]
    out, repeats, warm_s = opts["--json"], int(opts["-R"]), float(opts["--warm-s"])
    M, N, K = (int(v) for v in argv) if argv else (8192, 8192, 4096)
    iters, warmup = 20, 5
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    comm = tilewire.init()
    g = torch.Generator(device="cuda").manual_seed(1 + dist.get_rank())
    # Uniform in [-1, 1), as the CLI fills its operands (a GEMM's clock under its power limit
    # depends on the data it multiplies).
    sets = [((torch.rand(M, K, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16),
             (torch.rand(N, K, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)) for _ in range(2)]
    for j in range(warmup):
        comm.gemm_allreduce(*sets[j % 2], view=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while True:  # a hot GPU, as in the CLI's rotation of rows; every rank makes the same calls
        for j in range(iters):
            comm.gemm_allreduce(*sets[j % 2], view=True)
        torch.cuda.synchronize()
        go = torch.tensor([1 if time.perf_counter() - t0 < warm_s else 0], device="cuda")
        dist.all_reduce(go, op=dist.ReduceOp.MIN)
        if go.item() == 0:
            break
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        for j in range(iters):
            comm.gemm_allreduce(*sets[j % 2], view=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / iters)
    row = {"bench": "python gemm_allreduce", "M": M, "N": N, "K_local": K, "nranks": dist.get_world_size(),
           "iters": iters, "warmup": warmup, "warm_s": warm_s, "repeats": repeats, "t_python_us": statistics.median(times),
           "t_python_all_us": times}
    if dist.get_rank() == 0:
        line = json.dumps(row)
        print(line)
        if out:
            with open(out, "w") as f:
                f.write(line + "\n")
    comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
