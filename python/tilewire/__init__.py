"""tilewire: communication inside GPU kernels (NCCL device API), for PyTorch users.

    import torch.distributed as dist, tilewire
    dist.init_process_group("nccl")                  # torchrun --nproc-per-node N
    comm = tilewire.init()                           # every rank; the NCCL id travels through dist
    x = comm.empty((4096, 8192), torch.bfloat16)     # a symmetric tensor (zero-copy in every op)
    comm.all_reduce(x)                               # on torch's current stream
    comm.close()                                     # collective

`import tilewire` needs no GPU: `tilewire.info()` reports what the machine offers; ops on a
machine without a GPU raise NotImplementedError saying so.
"""
from __future__ import annotations

import json as _json

from . import _C

__version__ = _C.version()


def _nccl_name(code: int) -> str:
    return f"{code // 10000}.{(code // 100) % 100}.{code % 100}"


def _check_nccl(runtime: int, headers: int) -> None:
    """ImportError unless the NCCL loaded in this process is the one the device code was built for.

    NCCL's device-API structures change between patch releases: a kernel built for one and run on
    another reads garbage. (torch loads its NCCL first; this is the version that wins.)"""
    if runtime != headers:
        raise ImportError(
            f"tilewire was compiled for NCCL {_nccl_name(headers)} but this process loaded NCCL {_nccl_name(runtime)} "
            f"(torch's or the system's, whichever loaded first). Install the matching NCCL "
            f"(pip install nvidia-nccl-cu13=={_nccl_name(headers)}) or rebuild tilewire against {_nccl_name(runtime)}.")


_check_nccl(*_C.nccl_versions())


def info() -> dict:
    """`tilewire info --json` as a dict: GPUs, links, NCCL, LSA team, GIN. Needs no GPU."""
    return _json.loads(_C.info_json())


from .comm import Comm, gemm, shard_rows  # noqa: E402  (after the NCCL check)
from .comm import init as _init_comm  # noqa: E402
from .ep import EpBuffer  # noqa: E402
from .moe import MoE, grouped_mm, interleave_gate_up  # noqa: E402
from . import torch_ops as _torch_ops  # noqa: E402


def init(group=None, device: int | None = None, **config) -> Comm:
    """A communicator over a torch.distributed process group (default: the world), one process
    per GPU: rank 0's NCCL unique id travels through the group. `config`: CommConfig fields
    (oneshot_max_bytes, signal_count, max_blocks, want_gin, timeout_ms). Registers the torch ops
    (torch.ops.tilewire.*) if tilewire was imported before torch."""
    _torch_ops.register()
    return _init_comm(group, device, **config)


# The torch ops at import when torch is already loaded (the usual `import torch, tilewire`);
# importing torch here would make `import tilewire` cost torch's import everywhere.
if "torch" in __import__("sys").modules:
    _torch_ops.register()

__all__ = ["Comm", "EpBuffer", "MoE", "gemm", "grouped_mm", "init", "info", "interleave_gate_up", "shard_rows", "__version__"]
