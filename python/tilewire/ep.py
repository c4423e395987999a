"""tilewire.EpBuffer: MoE dispatch and combine on torch tensors (docs/ep.md), on torch's current
stream. Outputs are torch views of the buffer's own memory, valid until the next dispatch (copy
what must outlive it).

    buf = tilewire.EpBuffer(comm, max_tokens_per_rank=4096, hidden=7168, topk=8, num_experts=256)
    r = buf.dispatch(x, topk_idx, topk_weights)       # r.x: [num_recv, H] rows, (source rank, token) order
    out = buf.combine(y)                              # y: [num_recv, H] bf16, each row's expert sum

With exact=True (the default) dispatch reads the row count back (one host synchronization) and
returns tensors of exactly that many rows; exact=False returns worst-case-sized tensors and the
count as a device tensor, with no synchronization (CUDA-graph capturable).

These methods are not torch custom ops (unlike Comm's collectives, torch_ops.py): their outputs
are views of the buffer's own memory, which a custom op may not return, and copying the
worst-case outputs out (P x max_tokens rows) would cost more than the dispatch itself. Under
torch.compile, call them outside the compiled region (or mark it with torch.compiler.disable).
"""
from __future__ import annotations

from collections import namedtuple

from . import _C
from . import _checks as chk
from .comm import Comm, _stream

_IDX, _FP8_X = chk.INDEX_DTYPES, ("torch.float8_e4m3fn", "torch.uint8")

Recv = namedtuple("Recv", "x x_scales topk_idx topk_weights src_rank src_token num_recv tokens_per_expert")
# x [L, cap, H] and y [L, cap, H] bf16 are views of the buffer (valid until the next
# dispatch_send): an expert that writes its output into y sends it back without a copy.
LowLatencyRecv = namedtuple("LowLatencyRecv", "x x_scales count src_rank src_token y")


class EpBuffer:
    def __init__(self, comm: Comm, max_tokens_per_rank: int, hidden: int, topk: int, num_experts: int,
                 payload: str = "bfloat16", low_latency: bool = False, num_sms: int = 0, expert_alignment: int = 1):
        """Collective. payload: "bfloat16" or "fp8" (e4m3, a float32 scale per 128 columns)."""
        self._b = _C.EpBuffer(comm._c, max_tokens_per_rank, hidden, topk, num_experts, payload, low_latency, num_sms,
                              expert_alignment)
        self._comm, self.hidden, self.topk, self.payload = comm, hidden, topk, payload
        self.num_experts, self.low_latency, self.max_tokens = num_experts, low_latency, max_tokens_per_rank
        self._tokens = 0
        self._rows = None  # rows the last dispatch received (exact=True), else unknown on the host
        self._closed = False

    def _live(self, op: str) -> None:
        if self._closed:
            raise RuntimeError(f"tilewire.EpBuffer.{op}: the buffer is closed")
        self._comm._live(f"EpBuffer.{op}")

    def _rows_arg(self, op: str, name: str, t, dtypes, cols: int, what: str):
        """t [n, cols] in one of `dtypes`, row-major, on the communicator's GPU: n."""
        chk.tensor(op, name, t)
        chk.dtype(op, name, t, dtypes)
        chk.on_gpu(op, name, t, self._comm.device)
        n, c = chk.dims(op, name, t, 2, what)
        if c != cols:
            raise ValueError(f"{op}: {name} has shape {[n, c]}; expected {cols} columns{what}")
        chk.row_major(op, name, t)
        return n

    def _routing(self, op: str, topk_idx, n: int) -> None:
        k = self._rows_arg(op, "topk_idx", topk_idx, _IDX, self.topk, f" [N, topk = {self.topk}] (the buffer's top-k)")
        if k != n:
            raise ValueError(f"{op}: topk_idx has {k} rows; x has {n} tokens")

    @property
    def bytes(self) -> int:
        return self._b.bytes

    def _view(self, ptr, shape, dtype):
        import torch
        if ptr == 0:
            return None
        t = torch.from_dlpack(_C.view(ptr, list(shape), dtype, self._comm.device, self._b))
        return t

    def dispatch(self, x, topk_idx, topk_weights, x_scales=None, reuse_layout: bool = False, exact: bool = True) -> Recv:
        op = "EpBuffer.dispatch"
        self._live("dispatch")
        fp8 = self.payload == "fp8"
        n = self._rows_arg(op, "x", x, _FP8_X if fp8 else chk.BF16, self.hidden,
                           f" [N, hidden = {self.hidden}] ({'fp8 e4m3 bytes' if fp8 else 'bf16'}: the buffer's payload)")
        if n > self.max_tokens:
            raise ValueError(f"{op}: x has {n} tokens; the buffer holds at most {self.max_tokens} per rank")
        self._routing(op, topk_idx, n)
        w = self._rows_arg(op, "topk_weights", topk_weights, chk.FP32, self.topk, " [N, topk] float32")
        if w != n:
            raise ValueError(f"{op}: topk_weights has {w} rows; x has {n} tokens")
        if fp8:
            if x_scales is None:
                raise ValueError(f"{op}: an fp8 buffer needs x_scales [N, hidden / 128] float32")
            if self._rows_arg(op, "x_scales", x_scales, chk.FP32, self.hidden // 128, " [N, hidden / 128] float32") != n:
                raise ValueError(f"{op}: x_scales has {x_scales.shape[0]} rows; x has {n} tokens")
        elif x_scales is not None:
            raise ValueError(f"{op}: x_scales is given, but the buffer's payload is bf16 (scales go with fp8)")
        import torch
        r = self._b.dispatch(x.data_ptr(), x_scales.data_ptr() if x_scales is not None else 0, self.payload, n,
                             topk_idx.data_ptr(), topk_idx.dtype == torch.int64, topk_weights.data_ptr(), reuse_layout,
                             _stream())
        self._tokens = n
        cap, H, k = r["capacity"], self.hidden, self.topk
        rows = self._b.num_recv(_stream()) if exact else cap
        self._rows = rows if exact else None
        xs = self._view(r["x"], (cap, H), "uint8" if fp8 else "bfloat16")
        if fp8:
            xs = xs.view(torch.float8_e4m3fn)
        sc = self._view(r["x_scales"], (cap, H // 128), "float32") if fp8 else None
        out = Recv(xs[:rows], sc[:rows] if sc is not None else None,
                   self._view(r["topk_idx"], (cap, k), "int32")[:rows],
                   self._view(r["topk_weights"], (cap, k), "float32")[:rows],
                   self._view(r["src_rank"], (cap,), "int32")[:rows], self._view(r["src_token"], (cap,), "int32")[:rows],
                   self._view(r["num_recv"], (1,), "int32"),
                   self._view(r["tokens_per_expert"], (self.num_experts // self._comm.nranks,), "int32"))
        return out

    def combine(self, y, weights=None, out=None):
        """out [N, H] bf16: every rank's row of each token summed in rank order (fp32, one rounding).
        y [rows, H] bf16 (empty on a rank that received none); weights: optional [rows] float32."""
        op = "EpBuffer.combine"
        self._live("combine")
        rows = self._rows_arg(op, "y", y, chk.BF16, self.hidden, f" [rows received, hidden = {self.hidden}] bf16")
        if self._rows is not None and rows < self._rows:
            raise ValueError(f"{op}: y has {rows} rows; the last dispatch received {self._rows}")
        if weights is not None:
            chk.tensor(op, "weights", weights)
            chk.dtype(op, "weights", weights, chk.FP32)
            chk.on_gpu(op, "weights", weights, self._comm.device)
            if tuple(weights.shape) != (rows,):
                raise ValueError(f"{op}: weights has shape {list(weights.shape)}; expected [{rows}] (one per row of y)")
            chk.row_major(op, "weights", weights)
        if out is not None:
            chk.out_tensor(op, "out", out, (self._tokens, self.hidden), chk.BF16, self._comm.device)
            chk.row_major(op, "out", out)
        import torch
        if out is None:
            out = torch.empty((self._tokens, self.hidden), dtype=torch.bfloat16, device=y.device)
        self._b.combine(y.data_ptr(), weights.data_ptr() if weights is not None else 0, out.data_ptr(), _stream())
        return out

    # ------------------------------------------------------------------ low latency
    def dispatch_send(self, x, topk_idx) -> None:
        op = "EpBuffer.dispatch_send"
        self._live("dispatch_send")
        n = self._rows_arg(op, "x", x, chk.BF16, self.hidden, f" [N, hidden = {self.hidden}] bf16 (fp8 is quantized by the send)")
        if n > self.max_tokens:
            raise ValueError(f"{op}: x has {n} tokens; the buffer holds at most {self.max_tokens} per rank")
        self._routing(op, topk_idx, n)
        import torch
        self._tokens = x.shape[0]
        self._b.dispatch_send(x.data_ptr(), x.shape[0], topk_idx.data_ptr(), topk_idx.dtype == torch.int64, _stream())

    def dispatch_recv(self) -> LowLatencyRecv:
        import torch
        self._live("dispatch_recv")
        r = self._b.dispatch_recv(_stream())
        L, cap, H = self.num_experts // self._comm.nranks, r["capacity"], self.hidden
        fp8 = self.payload == "fp8"
        xs = self._view(r["x"], (L, cap, H), "uint8" if fp8 else "bfloat16")
        if fp8:
            xs = xs.view(torch.float8_e4m3fn)
        return LowLatencyRecv(xs, self._view(r["x_scales"], (L, cap, H // 128), "float32") if fp8 else None,
                              self._view(r["count"], (L,), "int32"), self._view(r["src_rank"], (L, cap), "int32"),
                              self._view(r["src_token"], (L, cap), "int32"), self._view(r["y"], (L, cap, H), "bfloat16"))

    def combine_send(self, y) -> None:
        """y [L, capacity, H] bf16 (LowLatencyRecv.y: no copy)."""
        op = "EpBuffer.combine_send"
        self._live("combine_send")
        chk.tensor(op, "y", y)
        chk.dtype(op, "y", y, chk.BF16)
        chk.on_gpu(op, "y", y, self._comm.device)
        L, cap = self.num_experts // self._comm.nranks, self._comm.nranks * self.max_tokens
        if tuple(y.shape) != (L, cap, self.hidden):
            raise ValueError(f"{op}: y has shape {list(y.shape)}; expected [{L}, {cap}, {self.hidden}] "
                             "(experts of this rank, rows per expert, hidden)")
        chk.row_major(op, "y", y)
        self._b.combine_send(y.data_ptr(), _stream())

    def combine_recv(self, topk_weights, out=None):
        op = "EpBuffer.combine_recv"
        self._live("combine_recv")
        n = self._rows_arg(op, "topk_weights", topk_weights, chk.FP32, self.topk, " [N, topk] float32")
        if n != self._tokens:
            raise ValueError(f"{op}: topk_weights has {n} rows; the last dispatch_send had {self._tokens} tokens")
        if out is not None:
            chk.out_tensor(op, "out", out, (self._tokens, self.hidden), chk.BF16, self._comm.device)
            chk.row_major(op, "out", out)
        import torch
        if out is None:
            out = torch.empty((self._tokens, self.hidden), dtype=torch.bfloat16, device=topk_weights.device)
        self._b.combine_recv(topk_weights.data_ptr(), out.data_ptr(), _stream())
        return out

    def check(self) -> None:
        """Synchronizes; ValueError on every rank if some rank's routing had an expert id out of range."""
        self._live("check")
        self._b.check(_stream())

    def close(self) -> None:
        """Collective: the buffer's window. Later calls raise RuntimeError."""
        if self._closed:
            return
        self._b.close()
        self._closed = True
