"""comm.gemm_allreduce timed from Python the way `tilewire bench gemm-allreduce` times row (e).

    torchrun --nproc-per-node 1 scripts/py_gemm_allreduce_time.py [M N K] [-R REPEATS] [--warm-s WARM_S] [--json FILE]

bf16, A [M, K], B [N, K] (b_layout "nk"; uniform in [-1, 1) as the CLI's), the inputs rotating over two (A, B) sets, C returned as
a view (no copy): `iters` calls back to back between two CUDA events on torch's current stream,
after `warmup` untimed calls and then untimed calls for WARM_S seconds (default 2, as the CLI's
`--warm-s 2` in scripts/gpu_run.sh python: a GEMM of this size reaches the GPU's power limit after
about a second, so both must time the same state);
the median over `repeats` of (elapsed / iters). Beside it, in alternation, the extension's raw call
(t_raw_us), the call on a side stream (t_side_stream_us) and the same calls made by a C++ loop
inside the extension (t_cpp_loop_us: tw::gemm_allreduce from C++, in this process and GPU state). The same defaults as the CLI (20, 5, 5; scripts/
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
    # Three ways to make the same call, a repeat of each in turn (so that the GPU's clock drifts
    # over all three alike): comm.gemm_allreduce on torch's current stream (the figure compared
    # with the CLI); the extension's raw call with the same pointers, stream and workspace (what
    # the Python checks and bookkeeping add is the difference); comm.gemm_allreduce on a
    # non-blocking side stream, as the CLI's (what the stream adds).
    C = comm.gemm_allreduce(*sets[0], view=True)
    st = torch.cuda.current_stream().cuda_stream
    ws = comm._workspace("gemm_allreduce.ws", 0, st)
    raw = tilewire.comm._C.gemm_allreduce
    side = torch.cuda.Stream()

    def call_python(A, B):
        comm.gemm_allreduce(A, B, view=True)

    def call_raw(A, B):
        raw(comm._c, A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, "bfloat16", "nk", ws.data_ptr(), "auto", "auto",
            "bfloat16", st)

    def cpp_loop():  # the same calls from a C++ loop, timed by its own events on the stream
        return comm._time_gemm_allreduce(sets, iters)

    variants = {"python": (call_python, None), "raw": (call_raw, None), "side_stream": (call_python, side),
                "cpp_loop": (None, None)}
    times = {k: [] for k in variants}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(repeats):
        for name, (fn, stream) in variants.items():
            dist.barrier()
            torch.cuda.synchronize()
            if fn is None:
                times[name].append(cpp_loop())
                continue
            with torch.cuda.stream(stream or torch.cuda.current_stream()):
                start.record()
                for j in range(iters):
                    fn(*sets[j % 2])
                end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / iters)
    row = {"bench": "python gemm_allreduce", "M": M, "N": N, "K_local": K, "nranks": dist.get_world_size(),
           "sm_count": comm._c.sm_count, "iters": iters, "warmup": warmup, "warm_s": warm_s, "repeats": repeats,
           "t_python_us": statistics.median(times["python"]), "t_python_all_us": times["python"],
           "t_raw_us": statistics.median(times["raw"]), "t_side_stream_us": statistics.median(times["side_stream"]),
           "t_cpp_loop_us": statistics.median(times["cpp_loop"]), "t_cpp_loop_all_us": times["cpp_loop"]}
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
