"""tilewire.Comm: a communicator made from a torch.distributed process group, its symmetric
tensors and the ops on torch tensors, on torch's current CUDA stream.

Symmetric tensors (`empty`, `zeros`) live in windows that every rank allocates together. Python
frees objects at different times on different ranks, and releasing a window is collective, so a
tensor that goes away only marks its window free; `collect()` (collective) releases the windows
that every rank has dropped, and `close()` (collective) releases everything. Neither can hang on
a rank that has not dropped a tensor yet: that window simply stays.

torch is imported when a function needs it, so `import tilewire` works without it.
"""
from __future__ import annotations

import weakref

from . import _C
from . import _checks as chk

_DTYPES = chk.DTYPES
_REDUCE = (chk.BF16, chk.FP16, chk.FP32)


def _dtype_name(dtype) -> str:
    name = _DTYPES.get(str(dtype))
    if name is None:
        raise ValueError(f"dtype {dtype} is not one of {', '.join(_DTYPES)}")
    return name


def _stream() -> int:
    import torch
    return torch.cuda.current_stream().cuda_stream


# The open communicators of this process by Comm.id, for torch.ops.tilewire.* (torch_ops.py):
# weak, so that a dropped Comm is not kept alive by the registry.
_COMMS: "weakref.WeakValueDictionary[int, Comm]" = weakref.WeakValueDictionary()


def comm_of(i: int) -> "Comm":
    # int(): under torch.compile a custom op's fake may get the id as a SymInt (Dynamo makes an int
    # that changed between two compiles of one frame dynamic), which does not hash; int() pins it
    # with a guard, so each id gets its own graph.
    c = _COMMS.get(int(i))
    if c is None:
        raise ValueError(f"tilewire: no open communicator with id {i}")
    return c


class Comm:
    """A tilewire communicator: one per process (one GPU each), every rank makes the same calls."""

    def __init__(self, c: _C.Comm):
        self._c = c
        self._closed = False
        # (name, bytes, dtype, stream) -> symmetric tensor: staging copies, workspaces and outputs,
        # one per stream (two streams must not race on one; each is made collectively the first
        # time, so every rank makes the same calls on the same number of streams).
        self._staging = {}
        self.id = id(self)  # for torch.ops.tilewire.* (torch_ops.py)
        _COMMS[self.id] = self

    def _live(self, op: str) -> None:
        if self._closed:
            raise RuntimeError(f"tilewire.Comm.{op}: the communicator is closed")

    rank = property(lambda self: self._c.rank)
    nranks = property(lambda self: self._c.nranks)
    device = property(lambda self: self._c.device)

    # ------------------------------------------------------------------ symmetric tensors
    def empty(self, shape, dtype):
        """Collective: an uninitialized symmetric tensor (zero-copy in every op)."""
        import torch
        self._live("empty")
        return torch.from_dlpack(self._c.empty(list(shape), _dtype_name(dtype)))

    def zeros(self, shape, dtype):
        t = self.empty(shape, dtype)
        t.zero_()
        return t

    def collect(self) -> int:
        """Collective: release the windows of tensors that every rank has dropped."""
        self._live("collect")
        return self._c.collect()

    def close(self) -> None:
        """Collective: release every window and the communicator. Tensors from empty() die with it."""
        if self._closed:
            return
        self._staging.clear()
        _COMMS.pop(self.id, None)
        self._c.close()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def barrier(self) -> None:
        self._live("barrier")
        self._c.barrier()

    # ------------------------------------------------------------------ ops
    def _kept(self, key, fits=lambda t: True):
        """The kept symmetric tensor for key (name, bytes, dtype, stream), or None when one must be
        made. Making one is collective and cannot happen while a CUDA graph is captured (torch's
        capture runs on a stream of its own): then the tensor an eager call made for the same name,
        size and dtype on another stream is used. Its replays and eager calls of that op on the
        other stream must then not overlap (they share it)."""
        t = self._staging.get(key)
        if t is not None and fits(t):
            return t
        import torch
        if not torch.cuda.is_current_stream_capturing():
            return None
        for k, v in self._staging.items():
            if k[:3] == key[:3] and fits(v):
                return v
        raise RuntimeError(f"tilewire.Comm: '{key[0]}' needs a symmetric buffer of {key[1]} bytes, which cannot be "
                           "made while a CUDA graph is captured; make one eager call of the same op and shape first")

    def _symmetric(self, t, name: str, stream: int):
        """t itself when it lies in one of this communicator's windows, else a staging copy.

        Cost of a non-symmetric input: one device copy in (and out, for outputs); the staging
        tensor is kept per (name, size) and reused."""
        key = (name, t.numel() * t.element_size(), str(t.dtype), stream)
        s = self._kept(key)
        if s is None:
            s = self.empty((t.numel(),), t.dtype)
            self._staging[key] = s
        s.copy_(t.reshape(-1))
        return s

    def all_reduce(self, tensor, out=None, algo: str = "auto", symmetric: bool = False):
        """Sum over ranks, into `out` (default: in place). `symmetric`: tensor and out come from
        empty(); otherwise they are staged through windows (one copy each way). `out` may have
        any strides (written through a copy)."""
        op = "all_reduce"
        self._live(op)
        chk.tensor(op, "tensor", tensor)
        chk.dtype(op, "tensor", tensor, _REDUCE)
        chk.on_gpu(op, "tensor", tensor, self.device)
        if out is not None:
            chk.out_tensor(op, "out", out, tuple(tensor.shape), str(tensor.dtype), self.device)
        n = tensor.numel()
        dt = _dtype_name(tensor.dtype)
        dst = tensor if out is None else out
        if symmetric:
            chk.row_major(op, "tensor", tensor)
            chk.row_major(op, "out", dst)
            _C.allreduce(self._c, tensor.data_ptr(), dst.data_ptr(), n, dt, algo, _stream())
            return dst
        st = _stream()
        src = self._symmetric(tensor, "all_reduce", st)
        _C.allreduce(self._c, src.data_ptr(), src.data_ptr(), n, dt, algo, st)
        dst.copy_(src.view(tuple(dst.shape)))  # any strides: copy_ writes through them
        return dst

    def reduce_scatter(self, tensor, out):
        """out [numel / nranks] = rank r's shard of the sum; tensor is staged through a window."""
        op = "reduce_scatter"
        self._live(op)
        chk.tensor(op, "tensor", tensor)
        chk.dtype(op, "tensor", tensor, _REDUCE)
        chk.on_gpu(op, "tensor", tensor, self.device)
        chk.tensor(op, "out", out)
        chk.dtype(op, "out", out, str(tensor.dtype), " (tensor's dtype)")
        chk.on_gpu(op, "out", out, self.device)
        chk.row_major(op, "out", out)
        if tensor.numel() != out.numel() * self.nranks:
            raise ValueError(f"{op}: tensor has {tensor.numel()} elements; expected out's {out.numel()} x {self.nranks} ranks")
        st = _stream()
        src = self._symmetric(tensor, "reduce_scatter", st)
        _C.reduce_scatter(self._c, src.data_ptr(), out.data_ptr(), out.numel(), _dtype_name(out.dtype), st)
        return out

    def all_gather(self, tensor, out):
        """out [nranks x numel] = every rank's tensor in rank order; out is staged through a window
        (any strides: written through a copy)."""
        op = "all_gather"
        self._live(op)
        chk.tensor(op, "tensor", tensor)
        chk.dtype(op, "tensor", tensor, _REDUCE + ("torch.uint8", "torch.int32", "torch.int64"))
        chk.on_gpu(op, "tensor", tensor, self.device)
        chk.row_major(op, "tensor", tensor)
        chk.tensor(op, "out", out)
        chk.dtype(op, "out", out, str(tensor.dtype), " (tensor's dtype)")
        chk.on_gpu(op, "out", out, self.device)
        if out.numel() != tensor.numel() * self.nranks:
            raise ValueError(f"{op}: out has {out.numel()} elements; expected tensor's {tensor.numel()} x {self.nranks} ranks")
        st = _stream()
        dst = self._symmetric(out, "all_gather", st)
        _C.all_gather(self._c, tensor.data_ptr(), dst.data_ptr(), tensor.numel(), _dtype_name(tensor.dtype), st)
        out.copy_(dst.view(tuple(out.shape)))
        return out

    def gemm_allreduce(self, A, B, b_layout: str = "nk", path: str = "auto", algo: str = "auto",
                       partials: str = "bfloat16", out=None, view: bool = False):
        """C [M, N] = sum over ranks of A_r [M, K] B_r, bf16 or fp16 (A, B and C in one dtype; fp16
        runs the owner algorithm: algo "auto" or "owner"); partials "bfloat16" are 2-byte partials in
        C's dtype. B may be a transposed view (taken as the other b_layout). C lives in a window
        kept per shape: by default a new tensor (a copy of C) is returned; `out` ([M, N], any
        strides) receives the copy instead; `view=True` returns C itself with no copy, valid until
        the next gemm_allreduce of that shape and dtype on this communicator."""
        op = "gemm_allreduce"
        self._live(op)
        M, K = chk.matrix_a(op, A, self.device)
        b_layout, N = chk.matrix_b(op, B, b_layout, A, K, self.device)
        if out is not None:
            chk.out_tensor(op, "out", out, (M, N), str(A.dtype), self.device)
        dt, ws, C, st = self._gemm_allreduce_target(A, M, N, K, b_layout, path, algo, partials)
        _C.gemm_allreduce(self._c, A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, dt, b_layout, ws.data_ptr(),
                          path, algo, partials, st)
        if view:
            return C.view(M, N)
        if out is not None:
            return out.copy_(C.view(M, N))
        return C.view(M, N).clone()

    def _gemm_allreduce_target(self, A, M: int, N: int, K: int, b_layout: str, path: str, algo: str,
                               partials: str):
        """A's dtype name, the kept workspace and C window of this shape and dtype on the current
        stream, and the stream."""
        dt = _dtype_name(A.dtype)
        ws_bytes = _C.gemm_allreduce_workspace_size(M, N, K, dt, b_layout, self.nranks, path, algo, partials)
        st = _stream()
        ws = self._workspace("gemm_allreduce.ws", ws_bytes, st)
        key = ("gemm_allreduce.C", M * N * A.element_size(), str(A.dtype), st)
        C = self._kept(key)
        if C is None:
            C = self.empty((M * N,), A.dtype)
            self._staging[key] = C
        return dt, ws, C, st

    def _time_gemm_allreduce(self, sets, iters: int = 20, b_layout: str = "nk", path: str = "auto",
                             algo: str = "auto", partials: str = "bfloat16") -> float:
        """Measurement only (scripts/py_gemm_allreduce_time.py): `iters` gemm_allreduce calls made by
        a C++ loop in the extension, the inputs alternating between the two (A, B) pairs of `sets`
        (same shapes and dtype), timed by events on the current stream; us per call. Checked as
        gemm_allreduce is; the result is C's window of that shape (gemm_allreduce(..., view=True))."""
        op = "_time_gemm_allreduce"
        self._live(op)
        if not isinstance(iters, int) or iters < 1:
            raise ValueError(f"{op}: iters is {iters!r}; expected an int >= 1")
        if len(sets) != 2:
            raise ValueError(f"{op}: sets has {len(sets)} (A, B) pairs; expected 2")
        (A0, B0), (A1, B1) = sets
        M, K = chk.matrix_a(op, A0, self.device, "A0")
        lay, N = chk.matrix_b(op, B0, b_layout, A0, K, self.device, "B0")
        if chk.matrix_a(op, A1, self.device, "A1") != (M, K):
            raise ValueError(f"{op}: A1 has shape {list(A1.shape)}; expected A0's {[M, K]}")
        chk.dtype(op, "A1", A1, str(A0.dtype), " (A0's dtype)")
        if chk.matrix_b(op, B1, b_layout, A1, K, self.device, "B1") != (lay, N):
            raise ValueError(f"{op}: B1 has shape {list(B1.shape)} and strides {list(B1.stride())}; "
                             f"expected B0's {list(B0.shape)} and {list(B0.stride())}")
        dt, ws, C, st = self._gemm_allreduce_target(A0, M, N, K, lay, path, algo, partials)
        return _C._time_gemm_allreduce(self._c, A0.data_ptr(), B0.data_ptr(), A1.data_ptr(), B1.data_ptr(),
                                       C.data_ptr(), M, N, K, dt, lay, ws.data_ptr(), path, algo, partials, st, iters)

    def _workspace(self, name: str, nbytes: int, stream: int):
        import torch
        key = (name, 0, "uint8", stream)
        ws = self._kept(key, lambda t: t.numel() >= nbytes)
        if ws is None:
            ws = self.empty((max(nbytes, 1),), torch.uint8)  # collective: every rank makes the same calls
            self._staging[key] = ws
        return ws

    def gemm_reducescatter(self, A, B, b_layout: str = "nk", path: str = "auto"):
        """Rank r's rows of sum over ranks of A_r [M, K_local] B_r: [shard_rows_of(M, P, r), N].
        Shards are ceil(M / P) rounded up to 128 rows (tilewire.shard_rows); the workspace is kept."""
        op = "gemm_reducescatter"
        self._live(op)
        M, K = chk.matrix_a(op, A, self.device)
        b_layout, N = chk.matrix_b(op, B, b_layout, A, K, self.device)
        import torch
        dt = _dtype_name(A.dtype)
        st = _stream()
        ws = self._workspace("gemm_reducescatter.ws", _C.gemm_reducescatter_workspace_size(M, N, dt, self.nranks), st)
        rows = _C.shard_rows_of(M, self.nranks, self.rank)
        C = torch.empty((rows, N), dtype=A.dtype, device=A.device)
        _C.gemm_reducescatter(self._c, A.data_ptr(), B.data_ptr(), C.data_ptr() if rows else 0, M, N, K, dt, b_layout,
                              ws.data_ptr(), path, st)
        return C

    def allgather_gemm(self, A_shard, B, M: int, b_layout: str = "nk", return_gathered: bool = False,
                       path: str = "auto"):
        """C [M, N_local] = the ranks' A shards gathered in rank order ([M, K]) times B_r; with
        return_gathered, (C, the gathered A) for the backward pass. path: "auto", "sequential" or
        "fused" (the GEMM gated per row block beside the gather)."""
        op = "allgather_gemm"
        self._live(op)
        rows, K = chk.matrix_a(op, A_shard, self.device, name="A_shard")
        b_layout, N = chk.matrix_b(op, B, b_layout, A_shard, K, self.device)
        want = _C.shard_rows_of(M, self.nranks, self.rank)
        if rows != want:
            raise ValueError(f"{op}: A_shard has {rows} rows; rank {self.rank}'s shard of M = {M} over {self.nranks} "
                             f"ranks has {want} (tilewire.shard_rows)")
        import torch
        dt = _dtype_name(A_shard.dtype)
        st = _stream()
        ws = self._workspace("allgather_gemm.ws", _C.allgather_gemm_workspace_size(M, K, dt, self.nranks), st)
        C = torch.empty((M, N), dtype=A_shard.dtype, device=A_shard.device)
        G = torch.empty((M, K), dtype=A_shard.dtype, device=A_shard.device) if return_gathered else None
        _C.allgather_gemm(self._c, A_shard.data_ptr() if A_shard.numel() else 0, B.data_ptr(), C.data_ptr(),
                          G.data_ptr() if G is not None else 0, M, N, K, dt, b_layout, ws.data_ptr(), path, st)
        return (C, G) if return_gathered else C


def shard_rows(M: int, P: int) -> int:
    """Rows per shard of gemm_reducescatter / allgather_gemm: ceil(M / P) rounded up to 128."""
    return _C.shard_rows(M, P)


def gemm(A, B, b_layout: str = "nk"):
    """C [M, N] = A [M, K] x B ([N, K] for "nk", [K, N] for "kn"), tilewire's Hopper GEMM, on the
    current CUDA device. B may be a transposed view (taken as the other b_layout)."""
    M, K = chk.matrix_a("gemm", A, None)
    b_layout, N = chk.matrix_b("gemm", B, b_layout, A, K, None)
    import torch
    cur = torch.cuda.current_device()
    chk.on_gpu("gemm", "A", A, cur)
    chk.on_gpu("gemm", "B", B, cur)
    C = torch.empty((M, N), dtype=A.dtype, device=A.device)
    _C.gemm(A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, _dtype_name(A.dtype), b_layout, _stream())
    return C


def init(group=None, device: int | None = None, **config) -> Comm:
    """A communicator over a torch.distributed process group (default: the world), one process
    per GPU: rank 0's NCCL unique id travels through the group. `config`: CommConfig fields
    (oneshot_max_bytes, signal_count, max_blocks, want_gin, timeout_ms)."""
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():
        raise RuntimeError("tilewire.init: torch.distributed is not initialized (dist.init_process_group first)")
    group = group or dist.group.WORLD
    rank, nranks = dist.get_rank(group), dist.get_world_size(group)
    obj = [_C.unique_id() if rank == 0 else None]
    dist.broadcast_object_list(obj, src=dist.get_global_rank(group, 0), group=group)
    dev = torch.cuda.current_device() if device is None else device
    return Comm(_C.Comm(obj[0], rank, nranks, dev, **config))
