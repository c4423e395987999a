"""tilewire from PyTorch on GPUs, under torchrun (one process per GPU):

    torchrun --nproc-per-node N -m pytest -q tests/python/test_gpu.py

Skipped without torch, without a GPU, or outside torchrun (these tests need a process group).
Inputs are seeded small integers (sums exact in bf16) or checked against torch's own ops."""
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
if "RANK" not in os.environ:
    pytest.skip("needs torchrun (a torch.distributed process group)", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

import tilewire  # noqa: E402


@pytest.fixture(scope="module")
def comm():
    if not dist.is_initialized():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl")
    c = tilewire.init()
    yield c
    c.close()


def seeded(n, rank, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-8, 9, (n,), generator=g).to(torch.bfloat16).cuda()


def test_all_reduce_symmetric_and_staged(comm):
    n = 1 << 20
    want = sum(seeded(n, q, 1).float() for q in range(comm.nranks)).to(torch.bfloat16)
    x = comm.empty((n,), torch.bfloat16)
    x.copy_(seeded(n, comm.rank, 1))
    comm.all_reduce(x, symmetric=True)
    assert torch.equal(x, want)
    y = seeded(n, comm.rank, 1)  # ordinary torch memory: staged through a window
    comm.all_reduce(y)
    assert torch.equal(y, want)


def test_collect_frees_only_what_every_rank_dropped(comm):
    comm.collect()
    t = comm.empty((1024,), torch.float32)
    if comm.rank == 0:
        del t
    torch.cuda.synchronize()
    assert comm.collect() == (1 if comm.nranks == 1 else 0)
    if comm.rank != 0:
        del t
    assert comm.collect() == (0 if comm.nranks == 1 else 1)


def test_gemm_matches_torch(comm):
    A = torch.randn(512, 256, device="cuda").to(torch.bfloat16)
    B = torch.randn(384, 256, device="cuda").to(torch.bfloat16)
    C = tilewire.comm.gemm(A, B)
    ref = (A.float() @ B.float().T)
    assert (C.float() - ref).abs().max().item() <= 0.02 * ref.abs().max().item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gemm_allreduce_matches_the_sum_of_partials(comm, dtype):
    g = torch.Generator(device="cuda").manual_seed(7 + comm.rank)
    A = torch.randn(1024, 512, device="cuda", generator=g).to(dtype)
    B = torch.randn(1024, 512, device="cuda", generator=g).to(dtype)
    C = comm.gemm_allreduce(A, B)
    part = (A.float() @ B.float().T).to(dtype).float()
    dist.all_reduce(part)
    assert (C.float() - part).abs().max().item() <= 0.05 * part.abs().max().item()


def test_bad_arguments_raise_value_error(comm):
    with pytest.raises(ValueError):
        comm.empty((16,), torch.complex64)


def test_torch_ops_and_compile(comm):
    n = 4096
    want = sum(seeded(n, q, 3).float() for q in range(comm.nranks)).to(torch.bfloat16)
    x = seeded(n, comm.rank, 3)
    assert torch.equal(torch.ops.tilewire.all_reduce(x, comm.id, "auto"), want)

    @torch.compile(fullgraph=True)
    def f(t):
        return torch.ops.tilewire.all_reduce(t * 1, comm.id, "auto")

    assert torch.equal(f(x), want)


def test_ep_dispatch_combine_identity_experts(comm):
    P, N, H, k = comm.nranks, 96, 1024, 2
    buf = tilewire.EpBuffer(comm, max_tokens_per_rank=N, hidden=H, topk=k, num_experts=2 * P)
    x = seeded(N * H, comm.rank, 5).view(N, H)
    g = torch.Generator().manual_seed(11 + comm.rank)
    idx = torch.randint(-1, 2 * P, (N, k), generator=g).cuda()
    idx[:, 1] = torch.where(idx[:, 1] == idx[:, 0], -1, idx[:, 1])
    w = torch.rand((N, k), generator=g).cuda()
    r = buf.dispatch(x, idx, w)
    out = buf.combine(r.x)  # each received row back unchanged: out = (ranks the token went to) x x
    n_t = torch.zeros(N, device="cuda")
    for d in range(P):
        n_t += ((idx // 2) == d).any(dim=1).float()
    assert torch.equal(out.float(), (n_t[:, None] * x.float()).to(torch.bfloat16).float())
    buf.close()


def test_gemm_allreduce_graph_replay(comm):
    """gemm_allreduce captured into a CUDA graph (torch.cuda.graph) and replayed on new inputs:
    bit-identical to the eager call on the same inputs, with the output poisoned before each
    replay. The first call, outside the capture, makes the workspace (a collective allocation)."""
    g = torch.Generator(device="cuda").manual_seed(17 + comm.rank)
    A = torch.randn(768, 512, device="cuda", generator=g).to(torch.bfloat16)
    B = torch.randn(1024, 512, device="cuda", generator=g).to(torch.bfloat16)
    comm.gemm_allreduce(A, B)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        C = comm.gemm_allreduce(A, B)
    for rep in range(3):
        A.copy_(torch.randn(A.shape, device="cuda", generator=g).to(torch.bfloat16))
        B.copy_(torch.randn(B.shape, device="cuda", generator=g).to(torch.bfloat16))
        want = comm.gemm_allreduce(A, B)
        C.fill_(float("nan"))
        graph.replay()
        assert torch.equal(C, want), f"replay {rep}"


def test_ep_low_latency_identity_experts(comm):
    """Low-latency dispatch then combine with identity experts (y = the received rows): every
    expert's rows are the sources' rows, and out[t] = sum_j w[t][j] x[t] over the token's experts.
    Small integers times quarters: every product and sum is exact, so the check is bitwise."""
    P, N, H, k, L = comm.nranks, 64, 1024, 2, 4
    E = L * P
    buf = tilewire.EpBuffer(comm, max_tokens_per_rank=N, hidden=H, topk=k, num_experts=E, low_latency=True)

    def routing(rank):
        g = torch.Generator().manual_seed(31 + rank)
        idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(N)])
        idx[::5, 1] = -1
        w = torch.randint(1, 5, (N, k), generator=g).float() / 4
        return idx, w

    idx, w = (t.cuda() for t in routing(comm.rank))
    x = seeded(N * H, comm.rank, 6).view(N, H)
    buf.dispatch_send(x, idx)
    r = buf.dispatch_recv()
    count = r.count.cpu()
    routes = [routing(q)[0] for q in range(P)]
    for l in range(L):  # rows of local expert l: (source rank, token) order
        e = comm.rank * L + l
        want_src = [(q, t) for q in range(P) for t in range(N) if (routes[q][t] == e).any()]
        assert count[l].item() == len(want_src), f"expert {l}"
        n = len(want_src)
        got_src = list(zip(r.src_rank[l, :n].tolist(), r.src_token[l, :n].tolist()))
        assert got_src == want_src, f"expert {l}: sources"
        if n:
            rows = torch.stack([seeded(N * H, q, 6).view(N, H)[t] for q, t in want_src])
            assert torch.equal(r.x[l, :n], rows), f"expert {l}: rows"
    buf.combine_send(r.x)
    out = buf.combine_recv(w)
    sel = (idx >= 0).float() * w
    want = (sel.sum(dim=1, keepdim=True) * x.float()).to(torch.bfloat16)
    assert torch.equal(out, want)
    buf.close()


def test_reduce_scatter_and_all_gather_match_torch_distributed(comm):
    P, n = comm.nranks, 1 << 16
    x = seeded(n * P, comm.rank, 8)
    want = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    dist.reduce_scatter_tensor(want, x.clone())
    got = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    comm.reduce_scatter(x, got)
    assert torch.equal(got, want)
    y = seeded(n, comm.rank, 9)
    want_g = torch.empty(n * P, dtype=torch.bfloat16, device="cuda")
    dist.all_gather_into_tensor(want_g, y)
    got_g = torch.empty(n * P, dtype=torch.bfloat16, device="cuda")
    comm.all_gather(y, got_g)
    assert torch.equal(got_g, want_g)


def test_gemm_both_b_layouts_match_torch(comm):
    g = torch.Generator(device="cuda").manual_seed(3)
    A = torch.randn(300, 256, device="cuda", generator=g).to(torch.bfloat16)
    B_nk = torch.randn(520, 256, device="cuda", generator=g).to(torch.bfloat16)
    ref = A.float() @ B_nk.float().T
    tol = 0.02 * ref.abs().max().item()
    assert (tilewire.gemm(A, B_nk, "nk").float() - ref).abs().max().item() <= tol
    assert (tilewire.gemm(A, B_nk.T.contiguous(), "kn").float() - ref).abs().max().item() <= tol


def test_gemm_reducescatter_and_allgather_gemm_match_torch(comm):
    """Rank r's rows of the sum of partials (against torch.distributed on bf16-rounded partials),
    and the all-gather + GEMM (against torch.matmul on the gathered A)."""
    P, r = comm.nranks, comm.rank
    M, N, K = 1000, 512, 256
    g = torch.Generator(device="cuda").manual_seed(41 + r)
    A = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    B = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    S = tilewire.shard_rows(M, P)
    part = (A.float() @ B.float().T).to(torch.bfloat16).float()
    dist.all_reduce(part)
    want = part[r * S:min(M, (r + 1) * S)]
    for path in ("sequential", "fused"):
        C = comm.gemm_reducescatter(A, B, path=path)
        assert C.shape == want.shape
        assert (C.float() - want).abs().max().item() <= 0.02 * want.abs().max().item(), path
    rows = max(0, min(M, (r + 1) * S) - r * S)
    full = torch.randn(M, K, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16).cuda()  # same on every rank
    shard = full[r * S:r * S + rows].contiguous()
    ref = full.float() @ B.float().T
    for path in ("sequential", "fused"):
        C, G = comm.allgather_gemm(shard, B, M, return_gathered=True, path=path)
        assert torch.equal(G, full), path
        assert (C.float() - ref).abs().max().item() <= 0.02 * ref.abs().max().item(), path


def test_sequence_parallel_custom_ops_compile(comm):
    """torch.ops.tilewire.gemm_reducescatter / allgather_gemm inside torch.compile(fullgraph=True):
    the same results as the eager methods."""
    g = torch.Generator(device="cuda").manual_seed(51 + comm.rank)
    M, N, K = 512, 256, 128
    A = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    B = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)

    @torch.compile(fullgraph=True)
    def rs(a, b):
        return torch.ops.tilewire.gemm_reducescatter(a, b, comm.id, "nk", "sequential")

    assert torch.equal(rs(A, B), comm.gemm_reducescatter(A, B, path="sequential"))
    S = tilewire.shard_rows(M, comm.nranks)
    shard = A[comm.rank * S:min(M, (comm.rank + 1) * S)].contiguous()

    @torch.compile(fullgraph=True)
    def ag(a, b):
        return torch.ops.tilewire.allgather_gemm(a, b, comm.id, M, "nk")

    assert torch.equal(ag(shard, B), comm.allgather_gemm(shard, B, M))


def test_refused_tensors_write_nothing_and_the_communicator_works(comm):
    """The refusals of test_checks.py on real tensors: ValueError before any launch (a CPU tensor
    would otherwise fault the context), then the same communicator gives the right result; a
    transposed B is taken as the other layout (no copy), `view=True` returns the window itself,
    `out` receives the result."""
    g = torch.Generator(device="cuda").manual_seed(61 + comm.rank)
    A = torch.randn(256, 128, device="cuda", generator=g).to(torch.bfloat16)
    B = torch.randn(512, 128, device="cuda", generator=g).to(torch.bfloat16)
    C0 = comm.gemm_allreduce(A, B)
    for bad in (lambda: comm.gemm_allreduce(A.T.contiguous().T, B),  # A column-major
                lambda: comm.gemm_allreduce(A, B.half()),
                lambda: comm.gemm_allreduce(A, B[:, :64].contiguous()),
                lambda: tilewire.gemm(A.cpu(), B.cpu()),
                lambda: comm.all_reduce(torch.ones(8, dtype=torch.int32, device="cuda"))):
        with pytest.raises(ValueError):
            bad()
    assert torch.equal(comm.gemm_allreduce(A, B), C0)
    assert torch.equal(comm.gemm_allreduce(A, B, view=True), C0)
    out = torch.full((256, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    comm.gemm_allreduce(A, B, out=out)
    assert torch.equal(out, C0)
    Bt = B.T.contiguous().T  # [N, K] as a column-major view: the "kn" layout of the same bytes
    C1 = comm.gemm_allreduce(A, Bt)
    assert (C1.float() - C0.float()).abs().max().item() <= 0.02 * C0.float().abs().max().item()


def test_non_contiguous_outputs_are_written(comm):
    P, n = comm.nranks, 64
    want = sum(seeded(n * n, q, 12).float() for q in range(P)).to(torch.bfloat16).view(n, n)
    o = torch.zeros(n, n, dtype=torch.bfloat16, device="cuda").T  # strides (1, n)
    comm.all_reduce(seeded(n * n, comm.rank, 12).view(n, n), out=o)
    assert torch.equal(o, want)
    g = torch.zeros(P * n, 2, dtype=torch.bfloat16, device="cuda")[:, 0]  # stride 2
    comm.all_gather(seeded(n, comm.rank, 13), g)
    assert torch.equal(g, torch.cat([seeded(n, q, 13) for q in range(P)]))


def test_use_after_close_raises(comm):
    c2 = tilewire.init()  # collective: a second communicator, closed at once
    buf = tilewire.EpBuffer(c2, max_tokens_per_rank=8, hidden=256, topk=2, num_experts=2 * c2.nranks)
    buf.close()
    with pytest.raises(RuntimeError, match="closed"):
        buf.check()
    c2.close()
    with pytest.raises(RuntimeError, match="closed"):
        c2.all_reduce(torch.ones(8, dtype=torch.bfloat16, device="cuda"))
    c2.close()  # twice: nothing


def test_grouped_mm_matches_torch_per_group(comm):
    g = torch.Generator().manual_seed(11)
    L, N, K, cap = 5, 264, 128, 40
    b = (torch.randn(L, N, K, generator=g) / 8).to(torch.bfloat16).cuda()
    counts = torch.tensor([0, 40, 1, 17, 33], dtype=torch.int32)
    a = torch.randn(L, cap, K, generator=g).to(torch.bfloat16).cuda()  # padded
    out = tilewire.grouped_mm(a, b, counts.cuda(), validate=True)
    for e in range(L):
        c = int(counts[e])
        torch.testing.assert_close(out[e, :c].float(), (a[e, :c].float() @ b[e].float().t()), rtol=1e-2, atol=1e-1)
        assert torch.count_nonzero(out[e, c:]) == 0  # rows outside the group: untouched zeros
    offsets = torch.tensor([0, 3, 50, 52, 80], dtype=torch.int32)  # packed, with gaps
    a2 = torch.randn(120, K, generator=g).to(torch.bfloat16).cuda()
    out2 = tilewire.grouped_mm(a2, b.transpose(1, 2).contiguous(), counts.cuda(), offsets.cuda(), b_layout="kn")
    for e in range(L):
        o, c = int(offsets[e]), int(counts[e])
        torch.testing.assert_close(out2[o:o + c].float(), a2[o:o + c].float() @ b[e].float().t(), rtol=1e-2, atol=1e-1)
    bad = counts.clone()
    bad[2] = cap + 1
    with pytest.raises(ValueError, match="group 2"):
        tilewire.grouped_mm(a, b, bad.cuda(), validate=True)


@pytest.mark.parametrize("low_latency,overlap,interleaved,direct,slots",
                         [(False, False, False, False, False), (False, True, False, False, False),
                          (True, False, False, False, False), (False, False, True, False, False),
                          (True, False, True, False, False), (False, False, False, True, False),
                          (False, False, True, True, False), (False, False, True, True, True)])
def test_moe_ffn_matches_a_torch_reference(comm, low_latency, overlap, interleaved, direct, slots):
    P, me = comm.nranks, comm.rank
    H, F, k, L = 256, 128, 4, 8
    E = L * P
    g = torch.Generator().manual_seed(7)  # the same experts on every rank
    w1 = (torch.randn(E, 2 * F, H, generator=g) / 16).to(torch.bfloat16).cuda()
    w2 = (torch.randn(E, H, F, generator=g) / 16).to(torch.bfloat16).cuda()
    gx = torch.Generator().manual_seed(100 + me)
    n = [40, 0, 23, 1][me % 4]
    x = torch.randn(n, H, generator=gx).to(torch.bfloat16).cuda()
    idx = torch.stack([torch.randperm(E, generator=gx)[:k] for _ in range(n)]) if n else torch.empty((0, k), dtype=torch.int64)
    idx[::5, 1] = -1  # some empty slots
    w = torch.rand(n, k, generator=gx).cuda()
    moe = tilewire.MoE(comm, 48, H, F, k, E, low_latency=low_latency, overlap=overlap, gate_up_interleaved=interleaved,
                       direct_dispatch=direct, slot_combine=slots)
    mine = w1[me * L:(me + 1) * L].contiguous()
    if interleaved:  # the SwiGLU in the gate-up GEMM's epilogue, on the weights reordered once
        mine = tilewire.interleave_gate_up(mine)
    out = moe(x, idx.cuda(), w, mine, w2[me * L:(me + 1) * L].contiguous())
    moe.check()
    again = moe(x, idx.cuda(), w, mine, w2[me * L:(me + 1) * L].contiguous())
    assert torch.equal(out, again)  # deterministic
    ref = torch.zeros(n, H, dtype=torch.float32, device="cuda")
    for t in range(n):
        for j in range(k):
            e = int(idx[t, j])
            if e < 0:
                continue
            h = (x[t:t + 1] @ w1[e].t()).float()  # torch's bf16 GEMM: fp32 accumulation, bf16 out
            act = (torch.nn.functional.silu(h[:, :F]) * h[:, F:]).to(torch.bfloat16)
            ref[t] += w[t, j] * (act @ w2[e].t()).float()[0]
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2 * float(ref.abs().max().clamp(min=1)))
    moe.close()


def _moe_inputs(comm, H, F, k, L, n, seed_w, seed_x):
    """Seeded inputs of a small MoE: this rank's expert weights ([L, 2F, H], [L, H, F], bf16, scaled
    by 1/16), n tokens x [n, H] (bf16), top-k distinct experts of E = L P and their weights; with the
    generator of x, idx and w (seed_x + rank) for more draws. Returns E, w1, w2, x, idx, w, gx."""
    P, me = comm.nranks, comm.rank
    E = L * P
    g = torch.Generator().manual_seed(seed_w)
    w1 = (torch.randn(E, 2 * F, H, generator=g) / 16).to(torch.bfloat16)[me * L:(me + 1) * L].contiguous().cuda()
    w2 = (torch.randn(E, H, F, generator=g) / 16).to(torch.bfloat16)[me * L:(me + 1) * L].contiguous().cuda()
    gx = torch.Generator().manual_seed(seed_x + me)
    x = torch.randn(n, H, generator=gx).to(torch.bfloat16).cuda()
    idx = torch.stack([torch.randperm(E, generator=gx)[:k] for _ in range(n)]).cuda()
    w = torch.rand(n, k, generator=gx).cuda()
    return E, w1, w2, x, idx, w, gx


@pytest.mark.parametrize("low_latency", [False, True])
def test_moe_and_grouped_mm_custom_ops_compile(comm, low_latency):
    """torch.ops.tilewire.moe_ffn and grouped_mm inside torch.compile(fullgraph=True), with torch ops
    around them: the same bits as the eager calls (moe_ffn is deterministic; the ops around it are
    the same kernels compiled or not)."""
    H, F, k, L, n = 256, 128, 4, 4, 32
    E, w1, w2, x, idx, w, gx = _moe_inputs(comm, H, F, k, L, n, 17, 200)
    moe = tilewire.MoE(comm, n, H, F, k, E, low_latency=low_latency)

    @torch.compile(fullgraph=True)
    def block(t):
        return t + torch.ops.tilewire.moe_ffn(t * 2, idx, w, w1, w2, moe.id)

    want = x + moe(x * 2, idx, w, w1, w2)
    assert torch.equal(block(x), want)
    assert torch.equal(block(x), want)  # replayed: the same bits

    counts = torch.tensor([3, 0, 17, 9], dtype=torch.int32, device="cuda")
    offsets = torch.tensor([0, 3, 3, 20], dtype=torch.int32, device="cuda")
    a = torch.randn(29, H, generator=gx).to(torch.bfloat16).cuda()

    @torch.compile(fullgraph=True)
    def mm(t):
        return torch.ops.tilewire.grouped_mm(t, w2.transpose(1, 2).contiguous(), counts, offsets, "nk")

    assert torch.equal(mm(a), tilewire.grouped_mm(a, w2.transpose(1, 2).contiguous(), counts, offsets))
    moe.close()
    with pytest.raises(ValueError, match="no open MoE"):
        torch.ops.tilewire.moe_ffn(x, idx, w, w1, w2, moe.id)


def test_moe_ffn_compiled_once_serves_each_moe(comm):
    """One compiled function called with three MoE ids: Dynamo makes an int that changes between calls
    dynamic, and the op's fake must still find its MoE (a SymInt id does not hash). Each call matches
    the eager call of its own MoE, bit for bit."""
    H, F, k, L, n = 256, 128, 2, 2, 24
    E, w1, w2, x, idx, w, _ = _moe_inputs(comm, H, F, k, L, n, 23, 300)
    moes = [tilewire.MoE(comm, n, H, F, k, E, low_latency=ll) for ll in (False, True, False)]

    @torch.compile(fullgraph=True)
    def ffn(t, moe_id):
        return torch.ops.tilewire.moe_ffn(t, idx, w, w1, w2, moe_id)

    for m in moes:
        assert torch.equal(ffn(x, m.id), m(x, idx, w, w1, w2))
    for m in moes:
        m.close()
