"""tilewire's ops as torch custom ops (torch.library), so that torch.compile and CUDA-graph
capture see them as opaque calls on the current stream:

    torch.ops.tilewire.all_reduce_(x, comm_id, algo)            in place, x symmetric or staged
    torch.ops.tilewire.all_reduce(x, comm_id, algo) -> Tensor   out of place
    torch.ops.tilewire.reduce_scatter(x, comm_id) -> Tensor
    torch.ops.tilewire.all_gather(x, comm_id) -> Tensor
    torch.ops.tilewire.gemm(A, B, b_layout) -> Tensor
    torch.ops.tilewire.gemm_allreduce(A, B, comm_id, b_layout) -> Tensor
    torch.ops.tilewire.gemm_reducescatter(A, B, comm_id, b_layout, path) -> Tensor   rank's rows
    torch.ops.tilewire.allgather_gemm(A_shard, B, comm_id, M, b_layout) -> Tensor
    torch.ops.tilewire.grouped_mm(a, b, counts, offsets, b_layout) -> Tensor     offsets may be None
    torch.ops.tilewire.moe_ffn(x, topk_idx, topk_weights, w_gate_up, w_down, moe_id) -> Tensor [N, H]

comm_id is Comm.id (the communicator's handle in this process), moe_id MoE.id. Registered once: when tilewire
is imported after torch, else by tilewire.init() (`import tilewire` never imports torch itself).
The methods of Comm call the library directly (the custom-op dispatch costs microseconds, which
matters for small all-reduces).
"""

from typing import Optional

from . import _C, _checks
from .comm import comm_of
from .comm import gemm as _gemm
from .moe import grouped_args
from .moe import grouped_mm as _grouped_mm
from .moe import moe_of

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    import torch

    @torch.library.custom_op("tilewire::all_reduce_", mutates_args=("x",))
    def all_reduce_(x: torch.Tensor, comm: int, algo: str) -> None:
        comm_of(comm).all_reduce(x, algo=algo)

    @all_reduce_.register_fake
    def _(x, comm, algo):
        return None

    @torch.library.custom_op("tilewire::all_reduce", mutates_args=())
    def all_reduce(x: torch.Tensor, comm: int, algo: str) -> torch.Tensor:
        out = torch.empty_like(x)
        out.copy_(x)
        comm_of(comm).all_reduce(out, algo=algo)
        return out

    @all_reduce.register_fake
    def _(x, comm, algo):
        return torch.empty_like(x)

    @torch.library.custom_op("tilewire::reduce_scatter", mutates_args=())
    def reduce_scatter(x: torch.Tensor, comm: int) -> torch.Tensor:
        c = comm_of(comm)
        out = x.new_empty((x.numel() // c.nranks,))
        return c.reduce_scatter(x, out)

    @reduce_scatter.register_fake
    def _(x, comm):
        return x.new_empty((x.numel() // comm_of(comm).nranks,))

    @torch.library.custom_op("tilewire::all_gather", mutates_args=())
    def all_gather(x: torch.Tensor, comm: int) -> torch.Tensor:
        c = comm_of(comm)
        out = x.new_empty((x.numel() * c.nranks,))
        return c.all_gather(x, out)

    @all_gather.register_fake
    def _(x, comm):
        return x.new_empty((x.numel() * comm_of(comm).nranks,))

    @torch.library.custom_op("tilewire::gemm", mutates_args=())
    def gemm(A: torch.Tensor, B: torch.Tensor, b_layout: str) -> torch.Tensor:
        return _gemm(A, B, b_layout)

    @gemm.register_fake
    def _(A, B, b_layout):
        return A.new_empty((A.shape[0], _checks.n_of(B, b_layout)))

    @torch.library.custom_op("tilewire::gemm_allreduce", mutates_args=())
    def gemm_allreduce(A: torch.Tensor, B: torch.Tensor, comm: int, b_layout: str) -> torch.Tensor:
        return comm_of(comm).gemm_allreduce(A, B, b_layout=b_layout)

    @gemm_allreduce.register_fake
    def _(A, B, comm, b_layout):
        return A.new_empty((A.shape[0], _checks.n_of(B, b_layout)))

    @torch.library.custom_op("tilewire::gemm_reducescatter", mutates_args=())
    def gemm_reducescatter(A: torch.Tensor, B: torch.Tensor, comm: int, b_layout: str, path: str) -> torch.Tensor:
        return comm_of(comm).gemm_reducescatter(A, B, b_layout=b_layout, path=path)

    @gemm_reducescatter.register_fake
    def _(A, B, comm, b_layout, path):
        c = comm_of(comm)
        rows = _C.shard_rows_of(A.shape[0], c.nranks, c.rank)
        return A.new_empty((rows, _checks.n_of(B, b_layout)))

    @torch.library.custom_op("tilewire::allgather_gemm", mutates_args=())
    def allgather_gemm(A_shard: torch.Tensor, B: torch.Tensor, comm: int, M: int, b_layout: str) -> torch.Tensor:
        return comm_of(comm).allgather_gemm(A_shard, B, M, b_layout=b_layout)

    @allgather_gemm.register_fake
    def _(A_shard, B, comm, M, b_layout):
        return A_shard.new_empty((M, _checks.n_of(B, b_layout)))

    @torch.library.custom_op("tilewire::grouped_mm", mutates_args=())
    def grouped_mm(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor, offsets: Optional[torch.Tensor],
                   b_layout: str) -> torch.Tensor:
        return _grouped_mm(a, b, counts, offsets, b_layout=b_layout)

    @grouped_mm.register_fake
    def _(a, b, counts, offsets, b_layout):
        return a.new_empty(grouped_args("grouped_mm", a, b, counts, offsets, None, b_layout, "auto")[5])

    # The whole FFN is one opaque call: its steps run on the current stream and synchronize nothing,
    # so a compiled graph keeps them in order and a CUDA graph can capture them.
    @torch.library.custom_op("tilewire::moe_ffn", mutates_args=())
    def moe_ffn(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, w_gate_up: torch.Tensor,
                w_down: torch.Tensor, moe: int) -> torch.Tensor:
        return moe_of(moe).forward(x, topk_idx, topk_weights, w_gate_up, w_down)

    @moe_ffn.register_fake
    def _(x, topk_idx, topk_weights, w_gate_up, w_down, moe):
        return x.new_empty((x.shape[0], moe_of(moe).dims.hidden))

    _registered = True
