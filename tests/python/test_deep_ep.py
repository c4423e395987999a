"""tilewire.deep_ep driven the way DeepEP's own tests drive deep_ep.Buffer (our code, their
checks): rank-coded rows, counts against a torch layout, combine against the sum. Under torchrun
(one process per GPU); skipped without torch, a GPU or torchrun.

    torchrun --nproc-per-node N -m pytest -q tests/python/test_deep_ep.py
"""
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
if "RANK" not in os.environ:
    pytest.skip("needs torchrun (a torch.distributed process group)", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

from tilewire.deep_ep import Buffer  # noqa: E402


@pytest.fixture(scope="module")
def group():
    if not dist.is_initialized():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl")
    return dist.group.WORLD


def routing(rank, N, E, k, seed):
    """Distinct experts per token, some slots -1, some tokens routed nowhere (seeded per rank)."""
    g = torch.Generator().manual_seed(seed + rank)
    idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(N)])
    idx[::7, -1] = -1
    idx[5::11] = -1
    w = torch.randint(1, 5, (N, k), generator=g).float() / 4
    return idx.cuda(), w.cuda()


def test_normal_dispatch_and_combine(group):
    R, rank = dist.get_world_size(group), dist.get_rank(group)
    N, H, k, E = 96, 2048, 4, 8 * R
    buf = Buffer(group, Buffer.get_dispatch_config(R).get_nvl_buffer_size_hint(2 * H, R), 0, max_tokens_per_rank=N)
    # Rank-coded rows (DeepEP's test: value = rank), plus the token id in the last column.
    x = torch.full((N, H), float(rank), dtype=torch.bfloat16, device="cuda")
    x[:, -1] = torch.arange(N, device="cuda").to(torch.bfloat16)
    idx, w = routing(rank, N, E, k, 100)
    per_rank, rdma, per_expert, in_rank, event = buf.get_dispatch_layout(idx, E)
    assert rdma is None
    L = E // R
    ref_in_rank = torch.zeros((N, R), dtype=torch.bool, device="cuda")
    for j in range(k):
        ok = idx[:, j] >= 0
        ref_in_rank[ok.nonzero().squeeze(1), (idx[ok, j] // L)] = True
    assert torch.equal(in_rank, ref_in_rank)
    assert torch.equal(per_rank, ref_in_rank.sum(0).int())
    assert torch.equal(per_expert, torch.bincount(idx[idx >= 0], minlength=E).int())
    recv_x, recv_idx, recv_w, per_expert_list, handle, event = buf.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=idx, topk_weights=w, async_finish=True)
    event.current_stream_wait()
    # Received: every rank's tokens that have an expert here, by source rank then token.
    routes = [routing(q, N, E, k, 100) for q in range(R)]
    want = [(q, t) for q in range(R) for t in range(N) if ((routes[q][0][t] // L) == rank).logical_and(routes[q][0][t] >= 0).any()]
    assert recv_x.shape[0] == len(want)
    assert torch.equal(recv_x[:, 0].float().cpu(), torch.tensor([float(q) for q, _ in want]))
    assert torch.equal(recv_x[:, -1].float().cpu(), torch.tensor([float(t) for _, t in want]))
    assert recv_idx.dtype == torch.int64
    for i, (q, t) in enumerate(want):
        mine = (routes[q][0][t] // L == rank) & (routes[q][0][t] >= 0)
        assert torch.equal(recv_idx[i].cpu(), torch.where(mine, routes[q][0][t] % L, -1).cpu()), f"row {i}"
        assert torch.equal(recv_w[i].cpu(), torch.where(mine, routes[q][1][t], 0).cpu()), f"row {i}"
    counts = torch.zeros(L, dtype=torch.long)
    for q, t in want:
        for e in routes[q][0][t].tolist():
            if e >= 0 and e // L == rank:
                counts[e % L] += 1
    assert per_expert_list == counts.tolist()
    # Combine of the rows as received: each token is its row times the ranks it reached.
    out, _, event = buf.combine(recv_x, handle)
    reached = ref_in_rank.sum(1, keepdim=True).float()
    assert torch.equal(out.float(), (x.float() * reached).to(torch.bfloat16).float())
    # The cached dispatch (the handle): the same rows again.
    again = buf.dispatch(x, handle=handle)[0]
    assert torch.equal(again, recv_x)
    buf.destroy()


def test_low_latency_dispatch_and_combine(group):
    R, rank = dist.get_world_size(group), dist.get_rank(group)
    N, H, k, E = 64, 2048, 4, 8 * R
    L = E // R
    buf = Buffer(group, 0, Buffer.get_low_latency_rdma_size_hint(N, H, R, E), low_latency_mode=True)
    x = torch.full((N, H), float(rank - 128), dtype=torch.bfloat16, device="cuda")  # DeepEP's LL test
    x[:, -1] = torch.arange(N, device="cuda").to(torch.bfloat16)
    idx, w = routing(rank, N, E, k, 200)
    stats = torch.zeros(L, dtype=torch.int32, device="cuda")
    for hook_mode in (False, True):  # the second call receives in the hook
        recv_x, recv_count, handle, event, hook = buf.low_latency_dispatch(
            x, idx, N, E, cumulative_local_expert_recv_stats=stats, use_fp8=False, return_recv_hook=hook_mode)
        hook()
        routes = [routing(q, N, E, k, 200) for q in range(R)]
        for l in range(L):
            e = rank * L + l
            want = [(q, t) for q in range(R) for t in range(N) if (routes[q][0][t] == e).any()]
            n = recv_count[l].item()
            assert n == len(want), f"expert {l}"
            assert torch.equal(recv_x[l, :n, 0].float().cpu(), torch.tensor([float(q - 128) for q, _ in want]))
            assert torch.equal(recv_x[l, :n, -1].float().cpu(), torch.tensor([float(t) for _, t in want]))
        # The experts' output written straight into the combine buffer (zero copy): y = x.
        y = buf.get_next_low_latency_combine_buffer(handle)
        y.copy_(recv_x)
        out, event, hook = buf.low_latency_combine(y, idx, w, handle, zero_copy=True, return_recv_hook=hook_mode)
        hook()
        want_out = (((idx >= 0).float() * w).sum(1, keepdim=True) * x.float()).to(torch.bfloat16)
        assert torch.equal(out, want_out), f"hook mode {hook_mode}"
    assert torch.equal(stats.cpu(), 2 * recv_count.cpu())
    buf.destroy()
