"""Every tensor refusal of the Python layer, without torch and without a GPU (CI): the checks read
only dtype, device, shape, stride() and data_ptr(), so tensor-like stand-ins drive them. A
refused call raises ValueError naming the op, the argument, what was expected and what was given,
before any pointer reaches C++ (the stand-ins' pointers would fault there). The GPU cases (the
same calls on real tensors, and that the communicator keeps working after them) are in
test_gpu.py."""
import math

import pytest

from tilewire import _checks as chk
from tilewire.comm import Comm, gemm
from tilewire.ep import EpBuffer
from tilewire.moe import MoE, MoeDims, grouped_mm, interleave_gate_up


class Dev:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class DType:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


class T:
    """A tensor as the checks see it."""

    def __init__(self, shape, dtype="bfloat16", device=("cuda", 0), stride=None):
        self.shape = tuple(shape)
        self.dtype = DType(dtype)
        self.device = Dev(*device)
        s, st = 1, []
        for d in reversed(self.shape):
            st.append(s)
            s *= max(d, 1)
        self._stride = tuple(stride) if stride is not None else tuple(reversed(st))

    def stride(self):
        return self._stride

    def data_ptr(self):
        return 0x7000_0000

    def numel(self):
        return math.prod(self.shape)

    def element_size(self):
        return 2

    def t(self):  # a transposed view: same memory
        return T(tuple(reversed(self.shape)), self.dtype.name, (self.device.type, self.device.index),
                 tuple(reversed(self._stride)))


class FakeC:  # the C++ communicator's attributes the checks read; any call into it fails the test
    rank, nranks, device = 0, 2, 0

    def __getattr__(self, name):
        raise AssertionError(f"_C.Comm.{name} reached after a refused call")


def fake_comm():
    c = object.__new__(Comm)
    c._c, c._closed, c._staging = FakeC(), False, {}
    return c


def fake_ep(comm, payload="bfloat16", low_latency=False):
    b = object.__new__(EpBuffer)
    b._comm, b.hidden, b.topk, b.payload = comm, 2048, 8, payload
    b.num_experts, b.low_latency, b.max_tokens = 16, low_latency, 64
    b._tokens, b._rows, b._closed = 0, None, False
    b._b = FakeC()
    return b


def refused(f, *needles):
    with pytest.raises(ValueError) as e:
        f()
    for n in needles:
        assert n in str(e.value), f"'{n}' not in: {e.value}"


# ------------------------------------------------------------------ GEMMs
def test_matrix_a_refusals():
    refused(lambda: chk.matrix_a("op", T((64, 32), device=("cpu",)), 0), "op: A is on cpu", "cuda:0")
    refused(lambda: chk.matrix_a("op", T((64, 32), device=("cuda", 1)), 0), "A is on cuda:1", "communicator")
    refused(lambda: chk.matrix_a("op", T((64, 32), "float32"), 0), "A has dtype torch.float32", "torch.bfloat16")
    refused(lambda: chk.matrix_a("op", T((2, 64, 32)), 0), "A has shape [2, 64, 32]", "2 dimensions")
    refused(lambda: chk.matrix_a("op", T((32, 64)).t(), 0), "row-major", "contiguous()")
    refused(lambda: chk.matrix_a("op", [[1.0]], 0), "A must be a torch.Tensor, got list")
    assert chk.matrix_a("op", T((64, 32)), 0) == (64, 32)
    assert chk.matrix_a("op", T((0, 32)), 0) == (0, 32)  # no rows on this rank: legal


def test_matrix_b_layouts_and_refusals():
    A = T((64, 32))
    assert chk.matrix_b("op", T((48, 32)), "nk", A, 32, 0) == ("nk", 48)
    assert chk.matrix_b("op", T((32, 48)), "kn", A, 32, 0) == ("kn", 48)
    # A transposed view is the other layout over the same bytes: no copy.
    assert chk.matrix_b("op", T((32, 48)).t(), "nk", A, 32, 0) == ("kn", 48)
    assert chk.matrix_b("op", T((48, 32)).t(), "kn", A, 32, 0) == ("nk", 48)
    refused(lambda: chk.matrix_b("op", T((48, 32), "float16"), "nk", A, 32, 0), "B has dtype torch.float16", "A's dtype")
    refused(lambda: chk.matrix_b("op", T((48, 16)), "nk", A, 32, 0), "K = 16", "A [M, K] has K = 32")
    refused(lambda: chk.matrix_b("op", T((48, 32)), "mn", A, 32, 0), "b_layout is 'mn'")
    refused(lambda: chk.matrix_b("op", T((48, 64), stride=(128, 2)), "nk", A, 64, 0), "neither row-major")
    refused(lambda: chk.matrix_b("op", T((48, 32), device=("cpu",)), "nk", A, 32, 0), "B is on cpu")


def test_gemm_refuses_cpu_tensors_before_touching_cuda():
    refused(lambda: gemm(T((64, 32), device=("cpu",)), T((48, 32), device=("cpu",))), "gemm: A is on cpu")


def test_comm_gemms_refuse_bad_tensors():
    c = fake_comm()
    A, B = T((256, 128)), T((512, 128))
    refused(lambda: c.gemm_allreduce(A.t(), B), "gemm_allreduce: A [M, K] must be row-major")
    refused(lambda: c.gemm_allreduce(A, T((512, 128), "float16")), "gemm_allreduce: B has dtype torch.float16")
    refused(lambda: c.gemm_allreduce(A, T((512, 64))), "gemm_allreduce: B has shape [512, 64]", "K = 64")
    refused(lambda: c.gemm_allreduce(A, B, out=T((256, 256))), "gemm_allreduce: out has shape [256, 256]", "[256, 512]")
    refused(lambda: c.gemm_reducescatter(A, T((512, 128), device=("cuda", 1))), "gemm_reducescatter: B is on cuda:1")
    refused(lambda: c.allgather_gemm(T((256, 128), "float32"), B, 512), "allgather_gemm: A_shard has dtype torch.float32")


def test_time_gemm_allreduce_refuses_bad_tensors():
    c = fake_comm()
    A, B = T((256, 128)), T((512, 128))
    op = "_time_gemm_allreduce: "
    refused(lambda: c._time_gemm_allreduce([(A, B)], 20), op + "sets has 1 (A, B) pairs; expected 2")
    refused(lambda: c._time_gemm_allreduce([(A, B), (A, B)], 0), op + "iters is 0")
    refused(lambda: c._time_gemm_allreduce([(A.t(), B), (A, B)]), op + "A0 [M, K] must be row-major")
    refused(lambda: c._time_gemm_allreduce([(A, T((512, 64))), (A, B)]), op + "B0 has shape [512, 64]", "K = 64")
    refused(lambda: c._time_gemm_allreduce([(A, B), (T((256, 128), device=("cpu",)), B)]), op + "A1 is on cpu")
    refused(lambda: c._time_gemm_allreduce([(A, B), (T((128, 128)), B)]), op + "A1 has shape [128, 128]", "[256, 128]")
    refused(lambda: c._time_gemm_allreduce([(A, B), (T((256, 128), "float16"), B)]), op + "A1 has dtype torch.float16",
            "A0's dtype")
    refused(lambda: c._time_gemm_allreduce([(A, B), (A, T((512, 128), "float16"))]), op + "B1 has dtype torch.float16")
    refused(lambda: c._time_gemm_allreduce([(A, B), (A, T((384, 128)))]), op + "B1 has shape [384, 128]")
    refused(lambda: c._time_gemm_allreduce([(A, B), (A, T((128, 512)).t())]), op + "B1 has shape [512, 128]",
            "strides [1, 512]")


def test_collectives_refuse_bad_tensors():
    c = fake_comm()
    refused(lambda: c.all_reduce(T((1024,), "int32")), "all_reduce: tensor has dtype torch.int32")
    refused(lambda: c.all_reduce(T((1024,), device=("cpu",))), "all_reduce: tensor is on cpu")
    refused(lambda: c.all_reduce(T((1024,)), out=T((512,))), "all_reduce: out has shape [512]", "[1024]")
    refused(lambda: c.all_reduce(T((1024,)), out=T((1024,), "float32")), "all_reduce: out has dtype torch.float32")
    refused(lambda: c.all_reduce(T((32, 32)).t(), symmetric=True), "tensor is not contiguous")
    refused(lambda: c.reduce_scatter(T((1024,)), T((256,))), "reduce_scatter: tensor has 1024 elements", "256 x 2")
    refused(lambda: c.all_gather(T((512,)), T((512,))), "all_gather: out has 512 elements", "512 x 2")


def test_use_after_close_is_a_runtime_error():
    c = fake_comm()
    c._closed = True
    for call in (lambda: c.all_reduce(T((16,))), lambda: c.gemm_allreduce(T((8, 8)), T((8, 8))), c.barrier, c.collect):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    b = fake_ep(fake_comm())
    b._closed = True
    with pytest.raises(RuntimeError, match="EpBuffer.dispatch: the buffer is closed"):
        b.dispatch(T((4, 2048)), T((4, 8), "int64"), T((4, 8), "float32"))
    b = fake_ep(c)  # the buffer is open, its communicator is not
    with pytest.raises(RuntimeError, match="communicator is closed"):
        b.check()


# ------------------------------------------------------------------ EP
def test_ep_dispatch_refusals():
    b = fake_ep(fake_comm())
    x, idx, w = T((32, 2048)), T((32, 8), "int64"), T((32, 8), "float32")
    refused(lambda: b.dispatch(T((32, 1024)), idx, w), "EpBuffer.dispatch: x has shape [32, 1024]", "hidden = 2048")
    refused(lambda: b.dispatch(T((32, 2048), "float32"), idx, w), "x has dtype torch.float32", "torch.bfloat16")
    refused(lambda: b.dispatch(x, T((32, 2), "int64"), T((32, 2), "float32")), "topk_idx has shape [32, 2]", "topk = 8")
    refused(lambda: b.dispatch(x, T((32, 8), "int16"), w), "topk_idx has dtype torch.int16", "torch.int64 or torch.int32")
    refused(lambda: b.dispatch(x, idx, T((32, 8), "bfloat16")), "topk_weights has dtype torch.bfloat16")
    refused(lambda: b.dispatch(x, T((16, 8), "int64"), w), "topk_idx has 16 rows; x has 32 tokens")
    refused(lambda: b.dispatch(T((65, 2048)), T((65, 8), "int64"), T((65, 8), "float32")), "65 tokens", "at most 64")
    refused(lambda: b.dispatch(x, idx, w, x_scales=T((32, 16), "float32")), "x_scales is given", "bf16")
    refused(lambda: b.dispatch(T((32, 2048), device=("cpu",)), idx, w), "x is on cpu")


def test_ep_fp8_scales_checked():
    b = fake_ep(fake_comm(), payload="fp8")
    x, idx, w = T((32, 2048), "float8_e4m3fn"), T((32, 8), "int64"), T((32, 8), "float32")
    refused(lambda: b.dispatch(x, idx, w), "needs x_scales")
    refused(lambda: b.dispatch(x, idx, w, x_scales=T((16, 32), "float32").t()), "x_scales is not contiguous")
    refused(lambda: b.dispatch(x, idx, w, x_scales=T((32, 8), "float32")), "x_scales has shape [32, 8]", "16 columns")
    refused(lambda: b.dispatch(T((32, 2048)), idx, w, x_scales=T((32, 16), "float32")), "x has dtype torch.bfloat16",
            "torch.float8_e4m3fn or torch.uint8")


def test_ep_combine_and_low_latency_refusals():
    b = fake_ep(fake_comm())
    b._tokens, b._rows = 32, 40
    refused(lambda: b.combine(T((40, 1024))), "EpBuffer.combine: y has shape [40, 1024]")
    refused(lambda: b.combine(T((39, 2048))), "y has 39 rows; the last dispatch received 40")
    refused(lambda: b.combine(T((40, 2048)), weights=T((40, 1), "float32")), "weights has shape [40, 1]", "[40]")
    refused(lambda: b.combine(T((40, 2048)), out=T((32, 2048), "float32")), "out has dtype torch.float32")
    ll = fake_ep(fake_comm(), low_latency=True)
    refused(lambda: ll.dispatch_send(T((8, 2048), "float32"), T((8, 8), "int64")), "dispatch_send: x has dtype torch.float32")
    refused(lambda: ll.combine_send(T((8, 64, 2048))), "combine_send: y has shape [8, 64, 2048]", "[8, 128, 2048]")
    refused(lambda: ll.combine_send(T((8, 2048, 128)).t()), "combine_send: y has shape")
    ll._tokens = 8
    refused(lambda: ll.combine_recv(T((8, 8), "bfloat16")), "combine_recv: topk_weights has dtype torch.bfloat16")
    refused(lambda: ll.combine_recv(T((7, 8), "float32")), "topk_weights has 7 rows", "had 8 tokens")


# ------------------------------------------------------------------ grouped GEMM, MoE
def test_grouped_mm_refusals():
    a, b, c = T((4, 64, 256)), T((4, 512, 256)), T((4,), "int32")  # padded: 4 groups of 64 rows, K 256, N 512
    refused(lambda: grouped_mm(T((4, 64, 256), "float16"), b, c), "grouped_mm: a has dtype torch.float16", "bf16 only")
    refused(lambda: grouped_mm(T((4, 64, 256), device=("cpu",)), b, c), "a is on cpu")
    refused(lambda: grouped_mm(T((256,)), b, c), "a has shape [256]", "[rows, K]")
    refused(lambda: grouped_mm(T((256, 64)).t(), b, c, offsets=c), "a is not contiguous")
    refused(lambda: grouped_mm(a, T((4, 512, 128)), c), "b has shape [4, 512, 128]", "K = 128", "K = 256")
    refused(lambda: grouped_mm(a, T((4, 512, 256), device=("cuda", 1)), c), "b is on cuda:1", "cuda:0")
    refused(lambda: grouped_mm(a, b, c, b_layout="nn"), "b_layout is 'nn'")
    refused(lambda: grouped_mm(a, b, c, tile="256x256"), "tile is '256x256'")
    refused(lambda: grouped_mm(a, b, T((4,), "int64")), "counts has dtype torch.int64", "torch.int32")
    refused(lambda: grouped_mm(a, b, T((3,), "int32")), "counts has shape [3]", "[4]")
    refused(lambda: grouped_mm(T((3, 64, 256)), b, c), "a has 3 groups", "b has 4")
    refused(lambda: grouped_mm(a, b, c, offsets=c), "offsets is given with a padded a")
    refused(lambda: grouped_mm(T((200, 256)), b, c), "offsets is None")
    refused(lambda: grouped_mm(T((200, 256)), b, c, offsets=T((4,), "float32")), "offsets has dtype torch.float32")
    refused(lambda: grouped_mm(a, b, c, out=T((4, 64, 256))), "out has shape [4, 64, 256]", "[4, 64, 512]")
    refused(lambda: grouped_mm(T((200, 256)), b, c, offsets=c, out=T((512, 200)).t()), "out is not contiguous")


def fake_moe(comm, low_latency=False):
    m = object.__new__(MoE)
    m._comm, m._m, m._closed, m.low_latency = comm, FakeC(), False, low_latency
    m.dims = MoeDims(hidden=256, ffn=128, topk=4, local_experts=8, max_tokens=32, device=0, gate_up_interleaved=False)
    return m


def test_moe_forward_refusals():
    m = fake_moe(fake_comm())
    x, idx, w = T((16, 256)), T((16, 4), "int64"), T((16, 4), "float32")
    w1, w2 = T((8, 256, 256)), T((8, 256, 128))
    refused(lambda: m(T((16, 256), "float32"), idx, w, w1, w2), "MoE.forward: x has dtype torch.float32")
    refused(lambda: m(T((16, 128)), idx, w, w1, w2), "x has shape [16, 128]", "hidden = 256")
    refused(lambda: m(T((33, 256)), T((33, 4), "int64"), T((33, 4), "float32"), w1, w2), "33 tokens", "at most 32")
    refused(lambda: m(x, T((16, 4), "int16"), w, w1, w2), "topk_idx has dtype torch.int16")
    refused(lambda: m(x, T((16, 8), "int64"), w, w1, w2), "topk_idx has shape [16, 8]", "topk = 4")
    refused(lambda: m(x, T((15, 4), "int64"), w, w1, w2), "topk_idx has 15 rows; x has 16 tokens")
    refused(lambda: m(x, idx, T((16, 4), "bfloat16"), w1, w2), "topk_weights has dtype torch.bfloat16")
    refused(lambda: m(x, idx, w, T((8, 128, 256)), w2), "w_gate_up has shape [8, 128, 256]", "[8, 256, 256]")
    refused(lambda: m(x, idx, w, w1, T((8, 128, 256))), "w_down has shape [8, 128, 256]", "[8, 256, 128]")
    refused(lambda: m(x, idx, w, w1, T((8, 256, 128), device=("cpu",))), "w_down is on cpu")
    refused(lambda: m(x, idx, w, w1, w2, out=T((16, 256), "float16")), "out has dtype torch.float16")
    refused(lambda: m(x.t(), idx, w, w1, w2), "x has shape [256, 16]")
    m._closed = True
    with pytest.raises(RuntimeError):
        m(x, idx, w, w1, w2)


def test_custom_ops_name_only_open_objects():
    """torch.ops.tilewire.* find their Comm and MoE by id; an id of nothing open is refused by name."""
    from tilewire.comm import comm_of
    from tilewire.moe import moe_of
    with pytest.raises(ValueError, match="no open communicator with id 12345"):
        comm_of(12345)
    with pytest.raises(ValueError, match="no open MoE with id 12345"):
        moe_of(12345)


def test_interleave_gate_up_refusals():
    refused(lambda: interleave_gate_up(T((8, 64))), "interleave_gate_up: w has 2 dimensions", "expected 3")
    refused(lambda: interleave_gate_up(T((8, 24, 64))), "w has 24 rows per expert", "ffn a multiple of 8")


def test_interleave_gate_up_reorders():
    torch = pytest.importorskip("torch")
    L, F, H = 2, 24, 5
    w = torch.randn(L, 2 * F, H)
    got = interleave_gate_up(w)
    for l in range(L):
        for r in range(2 * F):
            j, half, i = r // 16, (r // 8) % 2, r % 8
            assert torch.equal(got[l, r], w[l, half * F + 8 * j + i]), (l, r)
