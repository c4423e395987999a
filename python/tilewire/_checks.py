"""Argument checks on tensors, made before any pointer crosses into C++.

The C++ ops take raw device pointers and trust them: a CPU tensor, a transposed view or the
wrong dtype would be read as garbage, or fault the CUDA context of every rank that shares it.
So every op of the package passes its tensors through these checks first, and a refused call
raises ValueError naming the op, the argument, what was expected and what was given, and writes
nothing. They read only the attributes a tensor has (dtype, device, shape, stride(),
data_ptr()), so they run, and are tested, without torch and without a GPU
(tests/python/test_checks.py).
"""
from __future__ import annotations

# str(torch dtype) -> the name tilewire's C++ layer takes.
DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32",
          "torch.uint8": "uint8", "torch.int32": "int32", "torch.int64": "int64",
          "torch.float8_e4m3fn": "float8_e4m3fn"}
BF16, FP16, FP32 = "torch.bfloat16", "torch.float16", "torch.float32"
INDEX_DTYPES = ("torch.int64", "torch.int32")


def _fail(op: str, msg: str):
    raise ValueError(f"{op}: {msg}")


def tensor(op: str, name: str, t) -> None:
    if not all(hasattr(t, a) for a in ("dtype", "shape", "device", "data_ptr", "stride")):
        _fail(op, f"{name} must be a torch.Tensor, got {type(t).__name__}")


def dtype(op: str, name: str, t, allowed, why: str = "") -> None:
    """t's dtype is one of `allowed` (str(torch dtype) names)."""
    allowed = (allowed,) if isinstance(allowed, str) else tuple(allowed)
    if str(t.dtype) not in allowed:
        _fail(op, f"{name} has dtype {t.dtype}; expected {' or '.join(allowed)}{why}")


def on_gpu(op: str, name: str, t, device: int | None) -> None:
    """t lives on CUDA device `device` (None: any CUDA device)."""
    dev = t.device
    if getattr(dev, "type", None) != "cuda":
        want = f"cuda:{device}" if device is not None else "a CUDA device"
        _fail(op, f"{name} is on {dev}; expected {want} (tilewire's kernels read device memory)")
    if device is not None and dev.index is not None and dev.index != device:
        _fail(op, f"{name} is on {dev}; expected cuda:{device} (the communicator's GPU)")


def dims(op: str, name: str, t, n: int, what: str = "") -> tuple:
    shape = tuple(t.shape)
    if len(shape) != n:
        _fail(op, f"{name} has shape {list(shape)}; expected {n} dimensions{what}")
    return shape


def _strides_of(shape) -> tuple:
    s, out = 1, []
    for d in reversed(shape):
        out.append(s)
        s *= max(d, 1)
    return tuple(reversed(out))


def is_row_major(t) -> bool:
    """Dense in row-major order (dimensions of size 1 may have any stride)."""
    shape, stride = tuple(t.shape), tuple(t.stride())
    want = _strides_of(shape)
    return all(d <= 1 or s == w for d, s, w in zip(shape, stride, want))


def is_col_major_2d(t) -> bool:
    """A 2-D tensor that is the transpose of a row-major one (t.t() is contiguous)."""
    shape, stride = tuple(t.shape), tuple(t.stride())
    if len(shape) != 2:
        return False
    return (shape[0] <= 1 or stride[0] == 1) and (shape[1] <= 1 or stride[1] == max(shape[0], 1))


def row_major(op: str, name: str, t) -> None:
    if not is_row_major(t):
        _fail(op, f"{name} is not contiguous (shape {list(t.shape)}, strides {list(t.stride())}); "
                  f"pass {name}.contiguous()")


def same(op: str, what: str, a, b) -> None:
    if a != b:
        _fail(op, what)


def matrix_a(op: str, A, device: int | None, name: str = "A") -> tuple:
    """A [M, K], bf16 or fp16, row-major, on the GPU: (M, K)."""
    tensor(op, name, A)
    dtype(op, name, A, (BF16, FP16))
    on_gpu(op, name, A, device)
    M, K = dims(op, name, A, 2, " [M, K]")
    if not is_row_major(A):
        _fail(op, f"{name} [M, K] must be row-major (strides [K, 1]); got strides {list(A.stride())} "
                  f"(a transposed view: pass {name}.contiguous())")
    return M, K


def matrix_b(op: str, B, b_layout: str, A, K: int, device: int | None, name: str = "B") -> tuple:
    """B as `b_layout` ("nk": [N, K]; "kn": [K, N]), row-major, in A's dtype, with A's K. A view
    whose transpose is row-major is taken as the other layout (same memory, no copy). Returns
    (the layout to pass to C++, N)."""
    tensor(op, name, B)
    if b_layout not in ("nk", "kn"):
        _fail(op, f"b_layout is '{b_layout}'; expected 'nk' ({name} [N, K]) or 'kn' ({name} [K, N])")
    dtype(op, name, B, str(A.dtype), " (A's dtype)")
    on_gpu(op, name, B, device)
    r, c = dims(op, name, B, 2, " ([N, K] for b_layout 'nk', [K, N] for 'kn')")
    N, Kb = (r, c) if b_layout == "nk" else (c, r)
    if Kb != K:
        _fail(op, f"{name} has shape {[r, c]} for b_layout '{b_layout}', so K = {Kb}; A [M, K] has K = {K}")
    if is_row_major(B):
        return b_layout, N
    if is_col_major_2d(B):  # B.t() is row-major: the same bytes are the other layout
        return ("kn" if b_layout == "nk" else "nk"), N
    _fail(op, f"{name} is neither row-major nor a transposed row-major view (strides {list(B.stride())}); "
              f"pass {name}.contiguous()")


def out_tensor(op: str, name: str, t, shape, dt: str, device: int | None) -> None:
    """An output the caller passed: that shape and dtype, on the GPU (any strides: written through
    a copy when not row-major)."""
    tensor(op, name, t)
    dtype(op, name, t, dt)
    on_gpu(op, name, t, device)
    if tuple(t.shape) != tuple(shape):
        _fail(op, f"{name} has shape {list(t.shape)}; expected {list(shape)}")


def n_of(B, b_layout: str) -> int:
    """N of B as `b_layout` names it ([N, K] for "nk", [K, N] for "kn"): the one shape rule."""
    return B.shape[0] if b_layout == "nk" else B.shape[1]
