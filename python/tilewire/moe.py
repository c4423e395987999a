"""The experts' GEMMs and the whole MoE FFN on torch tensors (docs/grouped_gemm.md, docs/moe.md),
on torch's current stream.

    out = tilewire.grouped_mm(r.x, w, r.count)           # low-latency receive [L, cap, H]: padded
    out = tilewire.grouped_mm(a, w, counts, offsets)     # [rows, K] with groups at offsets: packed

    moe = tilewire.MoE(comm, max_tokens_per_rank=128, hidden=7168, ffn=2048, topk=8, num_experts=256,
                       low_latency=True)
    out = moe(x, topk_idx, topk_weights, w_gate_up, w_down)   # [N, H]; weights of this rank's experts
    out = torch.ops.tilewire.moe_ffn(x, topk_idx, topk_weights, w_gate_up, w_down, moe.id)  # the same,
                                                                # as a custom op (torch.compile)
    moe.close()                                                 # collective

Counts (and offsets) stay on the device: neither call synchronizes, and both can be captured in a
CUDA graph. Every tensor is checked first (dtype, device, shape, strides) and a refused call
raises ValueError naming the argument, writing nothing.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Optional

from . import _C
from . import _checks as chk
from .comm import Comm, _stream

_TILES = ("auto", "64x128pp", "64x256pp", "128x256coop")


def _int32_vector(op: str, name: str, t, n: int, device) -> None:
    chk.tensor(op, name, t)
    chk.dtype(op, name, t, "torch.int32")
    chk.on_gpu(op, name, t, device)
    if tuple(t.shape) != (n,):
        chk._fail(op, f"{name} has shape {list(t.shape)}; expected [{n}] (one per group)")
    chk.row_major(op, name, t)


def grouped_args(op: str, a, b, counts, offsets, out, b_layout: str, tile: str):
    """The checks of grouped_mm; returns (groups, N, K, rows, group_rows, out shape)."""
    chk.tensor(op, "a", a)
    chk.dtype(op, "a", a, chk.BF16, " (bf16 only)")
    chk.on_gpu(op, "a", a, None)
    dev = a.device.index
    if len(a.shape) not in (2, 3):
        chk._fail(op, f"a has shape {list(a.shape)}; expected [rows, K] (packed, with offsets) or "
                      "[L, rows per group, K] (padded)")
    chk.row_major(op, "a", a)
    if b_layout not in ("nk", "kn"):
        chk._fail(op, f"b_layout is '{b_layout}'; expected 'nk' (b [L, N, K]) or 'kn' (b [L, K, N])")
    if tile not in _TILES:
        chk._fail(op, f"tile is '{tile}'; expected one of {', '.join(_TILES)}")
    chk.tensor(op, "b", b)
    chk.dtype(op, "b", b, chk.BF16, " (a's dtype)")
    chk.on_gpu(op, "b", b, dev)
    L, r, c = chk.dims(op, "b", b, 3, " ([L, N, K] for b_layout 'nk', [L, K, N] for 'kn')")
    chk.row_major(op, "b", b)
    N, Kb = (r, c) if b_layout == "nk" else (c, r)
    K = a.shape[-1]
    if Kb != K:
        chk._fail(op, f"b has shape {[L, r, c]} for b_layout '{b_layout}', so K = {Kb}; a has K = {K}")
    _int32_vector(op, "counts", counts, L, dev)
    if len(a.shape) == 3:
        if a.shape[0] != L:
            chk._fail(op, f"a has {a.shape[0]} groups (shape {list(a.shape)}); b has {L}")
        if offsets is not None:
            chk._fail(op, "offsets is given with a padded a [L, rows per group, K]; pass a as [rows, K] instead")
        rows, group_rows = a.shape[0] * a.shape[1], a.shape[1]
        out_shape = (L, a.shape[1], N)
    else:
        if offsets is None:
            chk._fail(op, f"a is [rows, K] (shape {list(a.shape)}) but offsets is None: a packed layout needs each "
                          "group's first row (or pass a padded a [L, rows per group, K])")
        _int32_vector(op, "offsets", offsets, L, dev)
        rows, group_rows = a.shape[0], 0
        out_shape = (rows, N)
    if out is not None:
        chk.out_tensor(op, "out", out, out_shape, chk.BF16, dev)
        chk.row_major(op, "out", out)
    return L, N, K, rows, group_rows, out_shape


def grouped_mm(a, b, counts, offsets=None, out=None, b_layout: str = "nk", tile: str = "auto", rows_hint: int = 0,
               validate: bool = False):
    """out[rows of group g] = a[rows of group g] @ b[g]^T (b_layout "nk": b [L, N, K]) or @ b[g] ("kn"),
    bf16, fp32 accumulation. a [L, R, K] (padded: group g's counts[g] rows from a[g, 0]) or [rows, K]
    with offsets (packed: from row offsets[g]); counts, offsets: int32 [L] on the GPU. out: a's
    rows with N columns; rows outside every group are not written (out=None: zeros there).
    validate=True synchronizes and raises ValueError when a count or offset breaks the layout (else
    such a call writes nothing, silently)."""
    op = "grouped_mm"
    L, N, K, rows, group_rows, out_shape = grouped_args(op, a, b, counts, offsets, out, b_layout, tile)
    import torch
    if out is None:
        out = torch.zeros(out_shape, dtype=torch.bfloat16, device=a.device)
    status = torch.empty((1,), dtype=torch.int32, device=a.device) if validate else None
    _C.grouped_gemm(a.data_ptr(), b.data_ptr(), out.data_ptr(), counts.data_ptr(),
                    offsets.data_ptr() if offsets is not None else 0, L, N, K, rows, group_rows, b_layout, tile,
                    rows_hint, status.data_ptr() if status is not None else 0, _stream())
    if validate:
        s = int(status.item())
        if s != 0:
            raise ValueError(f"{op}: group {-s - 1} has a count (or offset) that breaks the layout "
                             f"({'counts[g] <= rows per group' if group_rows else 'ascending, disjoint, within a'}); "
                             "nothing was written")
    return out


MoeDims = namedtuple("MoeDims", "hidden ffn topk local_experts max_tokens device gate_up_interleaved")


def interleave_gate_up(w):
    """w [L, 2F, H] with each expert's gate rows [0, F) then up rows [F, 2F) -> a new tensor with
    them interleaved in blocks of 8 rows (row 16j + i: gate row 8j + i; row 16j + 8 + i: up row
    8j + i), the layout MoE(..., gate_up_interleaved=True) takes: the SwiGLU then runs in the gate-up
    GEMM's epilogue. Made once (at load), not per call. Any device and dtype."""
    op = "interleave_gate_up"
    chk.tensor(op, "w", w)
    if len(w.shape) != 3:
        chk._fail(op, f"w has {len(w.shape)} dimensions; expected 3 ([L, 2 x ffn, hidden])")
    L, two_f, H = (int(v) for v in w.shape)
    if two_f % 16 != 0:
        chk._fail(op, f"w has {two_f} rows per expert; expected 2 x ffn with ffn a multiple of 8")
    return w.reshape(L, 2, two_f // 16, 8, H).transpose(1, 2).reshape(L, two_f, H).contiguous()

_MOES = {}  # MoE.id -> MoE, while open (torch.ops.tilewire.moe_ffn names its MoE by id)


def moe_of(i: int) -> "MoE":
    m = _MOES.get(int(i))  # int(): a SymInt id does not hash (see comm_of)
    if m is None:
        raise ValueError(f"tilewire: no open MoE with id {i}")
    return m


def moe_args(op: str, d: MoeDims, x, topk_idx, topk_weights, w_gate_up, w_down, out) -> int:
    """The checks of MoE.forward; returns N."""
    H, F, k, L = d.hidden, d.ffn, d.topk, d.local_experts

    def rows(name, t, dtypes, cols, what):
        chk.tensor(op, name, t)
        chk.dtype(op, name, t, dtypes)
        chk.on_gpu(op, name, t, d.device)
        n, c = chk.dims(op, name, t, 2, what)
        if c != cols:
            chk._fail(op, f"{name} has shape {[n, c]}; expected {cols} columns{what}")
        chk.row_major(op, name, t)
        return n

    n = rows("x", x, chk.BF16, H, f" [N, hidden = {H}] bf16")
    if n > d.max_tokens:
        chk._fail(op, f"x has {n} tokens; the MoE holds at most {d.max_tokens} per rank")
    if rows("topk_idx", topk_idx, chk.INDEX_DTYPES, k, f" [N, topk = {k}] int64 or int32") != n:
        chk._fail(op, f"topk_idx has {topk_idx.shape[0]} rows; x has {n} tokens")
    if rows("topk_weights", topk_weights, chk.FP32, k, f" [N, topk = {k}] float32") != n:
        chk._fail(op, f"topk_weights has {topk_weights.shape[0]} rows; x has {n} tokens")
    for name, t, shape in (("w_gate_up", w_gate_up, (L, 2 * F, H)), ("w_down", w_down, (L, H, F))):
        chk.tensor(op, name, t)
        chk.dtype(op, name, t, chk.BF16)
        chk.on_gpu(op, name, t, d.device)
        if tuple(t.shape) != shape:
            what = ("[L, hidden, ffn]" if name == "w_down" else
                    "[L, 2 x ffn, hidden]: gate and up rows in blocks of 8 (interleave_gate_up)" if d.gate_up_interleaved
                    else "[L, 2 x ffn, hidden]: gate rows, then up rows")
            chk._fail(op, f"{name} has shape {list(t.shape)}; expected {list(shape)} ({what}, L = this rank's experts)")
        chk.row_major(op, name, t)
    if out is not None:
        chk.out_tensor(op, "out", out, (n, H), chk.BF16, d.device)
    return n


class MoE:
    """An expert-parallel MoE FFN over a communicator (docs/moe.md). Rank d holds experts
    [d L, (d + 1) L), L = num_experts / nranks, and passes their weights to each call:
    w_gate_up [L, 2 ffn, hidden] (gate rows, then up rows; with gate_up_interleaved, in blocks of 8:
    interleave_gate_up), w_down [L, hidden, ffn], bf16."""

    def __init__(self, comm: Comm, max_tokens_per_rank: int, hidden: int, ffn: int, topk: int, num_experts: int,
                 low_latency: bool = False, max_expert_rows: int = 0, num_sms: int = 0, overlap: bool = False,
                 fused_combine: Optional[bool] = None, gate_up_interleaved: bool = False,
                 direct_dispatch: Optional[bool] = None, slot_combine: bool = False):
        """Collective. max_expert_rows: high throughput's (row, expert) capacity (0: the worst case).
        overlap: high throughput, the gate-up GEMM beside the dispatch, each tile starting once its
        rows have landed (docs/moe.md, "Overlap"). fused_combine: high throughput, the combine sums
        each row's experts as it sends them (docs/moe.md, "Fused combine"); direct_dispatch: high
        throughput, the dispatch stores each row in its expert-major place (docs/moe.md, "The
        direct dispatch"; every rank the same, not with overlap); None: the library's default.
        Every setting of these gives the same bits. gate_up_interleaved: w_gate_up comes
        interleaved (interleave_gate_up) and the SwiGLU runs in the gate-up GEMM's epilogue on its
        fp32 sums (docs/moe.md, "SwiGLU in the epilogue"): one pass over memory fewer, no [R, 2F]
        buffer, and other bits than the plain layout (gate and up are not rounded first).
        slot_combine: high throughput, with direct_dispatch: the down GEMM stores each expert row
        into its token's rank, which sums them in fp32 in slot order (docs/moe.md, "The slot
        combine"; every rank the same): its own bits, the same on every run."""
        comm._live("MoE")
        flag = lambda v: -1 if v is None else int(bool(v))  # noqa: E731
        self._m = _C.MoE(comm._c, max_tokens_per_rank, hidden, ffn, topk, num_experts, low_latency, max_expert_rows,
                         num_sms, bool(overlap), flag(fused_combine), bool(gate_up_interleaved),
                         flag(direct_dispatch), bool(slot_combine))
        self._comm = comm
        self.dims = MoeDims(hidden, ffn, topk, num_experts // comm.nranks, max_tokens_per_rank, comm.device,
                            bool(gate_up_interleaved))
        self.low_latency = low_latency
        self._closed = False
        self.id = id(self)  # for torch.ops.tilewire.moe_ffn (torch_ops.py)
        _MOES[self.id] = self

    def _live(self, op: str) -> None:
        if self._closed:
            raise RuntimeError(f"tilewire.MoE.{op}: the MoE is closed")
        self._comm._live(f"MoE.{op}")

    @property
    def bytes(self) -> int:
        return self._m.bytes

    def forward(self, x, topk_idx, topk_weights, w_gate_up, w_down, out=None):
        """Collective. out [N, H] bf16 = sum_j topk_weights[t, j] x expert(topk_idx[t, j])(x[t])."""
        op = "MoE.forward"
        self._live("forward")
        n = moe_args(op, self.dims, x, topk_idx, topk_weights, w_gate_up, w_down, out)
        import torch
        target = out if out is not None and chk.is_row_major(out) else torch.empty(
            (n, self.dims.hidden), dtype=torch.bfloat16, device=x.device)
        self._m.forward(x.data_ptr(), n, topk_idx.data_ptr(), topk_idx.dtype == torch.int64, topk_weights.data_ptr(),
                        w_gate_up.data_ptr(), w_down.data_ptr(), target.data_ptr(), _stream())
        if out is not None and target is not out:
            out.copy_(target)  # a non-contiguous out: written through a temporary
            return out
        return target

    __call__ = forward

    def check(self) -> None:
        """Synchronizes; ValueError when the last forward's routing was refused (every rank) or this
        rank received more expert rows than max_expert_rows (this rank)."""
        self._live("check")
        self._m.check(_stream())

    def close(self) -> None:
        """Collective. Later calls raise RuntimeError."""
        if self._closed:
            return
        self._m.close()
        self._closed = True
        _MOES.pop(self.id, None)
