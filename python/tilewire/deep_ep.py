"""A DeepEP-compatible front over tilewire.EpBuffer: code written for DeepEP's intranode
`deep_ep.Buffer` (V1) switches by changing its import,

    from tilewire.deep_ep import Buffer, EventOverlap     # instead of: from deep_ep import ...

for the calls vLLM's and SGLang's DeepEP paths make (docs/ep.md, "DeepEP-compatible front"):
the static size hints and set_num_sms, get_dispatch_layout, dispatch / combine (high
throughput), low_latency_dispatch / low_latency_combine with their receive hooks,
get_next_low_latency_combine_buffer, clean_low_latency_buffer, capture and destroy. The
arguments and return tuples are DeepEP's; what differs:

- Everything runs on torch's current stream, in call order: `async_finish`,
  `allocate_on_comm_stream` and `previous_event` change nothing, and the events returned are
  already complete (EventOverlap.current_stream_wait() does nothing).
- The buffer is sized by shape, not bytes: the first call of each (hidden, top-k, experts,
  payload) makes a tilewire.EpBuffer (collective: every rank makes the same calls, as DeepEP
  requires anyway). High throughput holds `max_tokens_per_rank` tokens per call (a keyword of the
  constructor, default 4096); more raise ValueError.
- A high-throughput handle is valid until the next dispatch on the same shape (combine uses the
  buffer's last dispatch); an older one raises ValueError.
- Low latency: rows per expert are contiguous in (source rank, source token) order, so the order
  is deterministic (DeepEP's is not); fp8 scales are [L, R x maxT, H / 128] row-major (DeepEP's
  are column-major in the last two dimensions); round_scale, use_ue8m0 and use_logfmt are not
  implemented (NotImplementedError).
- combine's topk_weights and bias (reduced or added by DeepEP) are not implemented.
"""
from __future__ import annotations

from .comm import Comm, init
from .ep import EpBuffer


class EventOverlap:
    """DeepEP's event wrapper. tilewire's calls are ordered on the current stream, so the event
    is complete when returned."""

    def __init__(self, event=None):
        self.event = event

    def current_stream_wait(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Config:
    """DeepEP's tuning config: tilewire sizes by shape, so the byte hints are 0."""

    def __init__(self, num_sms: int = 0, *args, **kwargs):  # DeepEP's chunk and ring sizes are ignored
        self.num_sms = num_sms

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return 0

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return 0


class _Handle:
    """What a dispatch hands to its combine: the buffer, the call's routing, and its place among
    the buffer's dispatches (only the last one can be combined)."""

    def __init__(self, buf: EpBuffer, seq: int, n: int, topk_idx, topk_weights):
        self.buf, self.seq, self.num_tokens, self.topk_idx, self.topk_weights = buf, seq, n, topk_idx, topk_weights


class Buffer:
    num_sms = 20  # DeepEP's class default; Buffer.set_num_sms changes it (high-throughput CTAs)

    def __init__(self, group, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0, low_latency_mode: bool = False,
                 num_qps_per_rank: int = 24, allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 explicitly_destroy: bool = False, enable_shrink: bool = False, comm=None,
                 max_tokens_per_rank: int = 4096):
        """Collective over `group` (a torch.distributed process group). The byte sizes are kept
        for callers that compare them; tilewire sizes each EpBuffer by shape."""
        self.group, self.num_nvl_bytes, self.num_rdma_bytes = group, num_nvl_bytes, num_rdma_bytes
        self.low_latency_mode, self.explicitly_destroy = low_latency_mode, explicitly_destroy
        self.max_tokens_per_rank = max_tokens_per_rank
        self._comm: Comm = init(group)
        self.rank, self.group_size = self._comm.rank, self._comm.nranks
        self._ht: dict = {}   # (hidden, topk, experts, payload, alignment) -> EpBuffer
        self._ll: dict = {}   # (max tokens, hidden, topk, experts, payload) -> [EpBuffer, views or None]
        self._seq: dict = {}  # EpBuffer -> dispatches made on it

    # ------------------------------------------------------------------ static helpers
    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        Buffer.num_sms = new_num_sms

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms)

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        return 0

    @staticmethod
    def capture() -> EventOverlap:
        return EventOverlap()

    def destroy(self) -> None:
        """Collective: every buffer, then the communicator."""
        for b in list(self._ht.values()) + [e[0] for e in self._ll.values()]:
            b.close()
        self._ht.clear(), self._ll.clear()
        self._comm.close()

    # ------------------------------------------------------------------ high throughput
    def get_dispatch_layout(self, topk_idx, num_experts: int, previous_event=None, async_finish: bool = False,
                            allocate_on_comm_stream: bool = False):
        """(num_tokens_per_rank [R] int32, None, num_tokens_per_expert [E] int32, is_token_in_rank
        [N, R] bool, event), computed with torch on the current stream."""
        import torch
        R, N = self.group_size, topk_idx.shape[0]
        if num_experts % R != 0:
            raise ValueError(f"get_dispatch_layout: num_experts {num_experts} is not a multiple of the {R} ranks")
        valid = topk_idx >= 0
        per_expert = torch.bincount(topk_idx[valid].long(), minlength=num_experts).to(torch.int32)
        in_rank = torch.zeros((N, R), dtype=torch.bool, device=topk_idx.device)
        rows = torch.arange(N, device=topk_idx.device).unsqueeze(1).expand_as(topk_idx)
        in_rank[rows[valid], (topk_idx[valid] // (num_experts // R)).long()] = True
        return in_rank.sum(dim=0, dtype=torch.int32), None, per_expert, in_rank, EventOverlap()

    def _ht_buffer(self, hidden: int, topk: int, experts: int, fp8: bool, alignment: int) -> EpBuffer:
        key = (hidden, topk, experts, fp8, alignment)
        b = self._ht.get(key)
        if b is None:
            b = EpBuffer(self._comm, self.max_tokens_per_rank, hidden, topk, experts, payload="fp8" if fp8 else "bfloat16",
                         num_sms=Buffer.num_sms, expert_alignment=alignment)
            self._ht[key] = b
            self._seq[b] = 0
        return b

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None, is_token_in_rank=None,
                 num_tokens_per_expert=None, topk_idx=None, topk_weights=None, expert_alignment: int = 1,
                 num_worst_tokens: int = 0, config=None, previous_event=None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False):
        """(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle,
        event). x: [N, H] bf16, or (x [N, H] float8_e4m3fn, scales [N, H / 128] float32). With
        `handle`: the same routing again (the backward of combine)."""
        fp8 = isinstance(x, tuple)
        xs, scales = (x[0], x[1]) if fp8 else (x, None)
        if handle is not None:
            h: _Handle = handle
            if h.seq != self._seq[h.buf]:
                raise ValueError("dispatch: the handle is not of this buffer's last dispatch (tilewire keeps one routing per shape)")
            r = h.buf.dispatch(xs, h.topk_idx, h.topk_weights, x_scales=scales, reuse_layout=True)
            return (r.x, r.x_scales) if fp8 else r.x, None, None, None, None, EventOverlap()
        if topk_idx is None or topk_weights is None or num_tokens_per_expert is None:
            raise ValueError("dispatch: topk_idx, topk_weights and num_tokens_per_expert are needed without a handle")
        buf = self._ht_buffer(xs.shape[1], topk_idx.shape[1], num_tokens_per_expert.shape[0], fp8, expert_alignment)
        worst = num_worst_tokens > 0  # DeepEP's graph mode: worst-case-sized outputs, no host sync
        r = buf.dispatch(xs, topk_idx, topk_weights, x_scales=scales, exact=not worst)
        self._seq[buf] += 1
        h = _Handle(buf, self._seq[buf], xs.shape[0], topk_idx, topk_weights)
        recv_idx = r.topk_idx.long()
        if worst:
            import torch
            if num_worst_tokens > r.x.shape[0]:
                raise ValueError(f"dispatch: num_worst_tokens {num_worst_tokens} is beyond the buffer's {r.x.shape[0]} rows")
            n = num_worst_tokens
            past = torch.arange(n, device=recv_idx.device) >= r.num_recv  # rows past the count: ids -1 (no host sync)
            recv_idx = recv_idx[:n].masked_fill(past[:, None], -1)
            recv_x = (r.x[:n], r.x_scales[:n]) if fp8 else r.x[:n]
            return recv_x, recv_idx, r.topk_weights[:n], [], h, EventOverlap()
        recv_x = (r.x, r.x_scales) if fp8 else r.x
        return recv_x, recv_idx, r.topk_weights, r.tokens_per_expert.tolist(), h, EventOverlap()

    def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None,
                async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """(combined_x [N, H] bf16, None, event): every rank's row of each token summed in rank
        order in fp32, rounded once."""
        if topk_weights is not None or bias is not None:
            raise NotImplementedError("combine: topk_weights and bias are not implemented by tilewire's front")
        h: _Handle = handle
        if h.seq != self._seq[h.buf]:
            raise ValueError("combine: the handle is not of this buffer's last dispatch (tilewire keeps one routing per shape)")
        return h.buf.combine(x), None, EventOverlap()

    # ------------------------------------------------------------------ low latency
    def _ll_buffer(self, max_tokens: int, hidden: int, topk: int, experts: int, fp8: bool) -> list:
        key = (max_tokens, hidden, topk, experts, fp8)
        e = self._ll.get(key)
        if e is None:
            e = [EpBuffer(self._comm, max_tokens, hidden, topk, experts, payload="fp8" if fp8 else "bfloat16",
                          low_latency=True), None]
            self._ll[key] = e
        return e

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        pass  # nothing to clean: flags are tagged with the call's epoch

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank: int, num_experts: int,
                             cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None,
                             use_fp8: bool = True, round_scale: bool = False, use_ue8m0: bool = False,
                             async_finish: bool = False, return_recv_hook: bool = False, use_nvfp4: bool = False,
                             x_global_scale=None):
        """(recv_x, recv_count [L] int32, handle, event, hook). recv_x: [L, R x maxT, H] bf16, or
        (fp8 [L, R x maxT, H], scales [L, R x maxT, H / 128] float32) with use_fp8. With
        return_recv_hook the send is launched and hook() receives (the tensors are the buffer's,
        at fixed addresses: they hold the rows once hook() ran); the first call of a shape
        receives at once."""
        if round_scale or use_ue8m0 or use_nvfp4:
            raise NotImplementedError("low_latency_dispatch: round_scale / use_ue8m0 / use_nvfp4 are not implemented "
                                      "(fp8 e4m3 with float32 scales per 128 columns is)")
        entry = self._ll_buffer(num_max_dispatch_tokens_per_rank, x.shape[1], topk_idx.shape[1], num_experts, use_fp8)
        buf = entry[0]
        buf.dispatch_send(x, topk_idx)

        def receive():
            r = buf.dispatch_recv()
            entry[1] = r
            if cumulative_local_expert_recv_stats is not None:
                cumulative_local_expert_recv_stats.add_(r.count)
            return r

        def hook() -> None:
            receive()

        if return_recv_hook and entry[1] is not None:
            r = entry[1]
        else:
            r, hook = receive(), (lambda: None)
        recv_x = (r.x, r.x_scales) if use_fp8 else r.x
        return recv_x, r.count, _Handle(buf, 0, x.shape[0], topk_idx, None), EventOverlap(), hook

    def get_next_low_latency_combine_buffer(self, handle):
        """[L, R x maxT, H] bf16: the expert outputs written here are combined without a copy."""
        for buf, views in self._ll.values():
            if buf is handle.buf and views is not None:
                return views.y
        raise ValueError("get_next_low_latency_combine_buffer: no low-latency dispatch was received on this handle's buffer")

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt: bool = False, zero_copy: bool = False,
                            async_finish: bool = False, return_recv_hook: bool = False, out=None):
        """(combined_x [N, H] bf16, event, hook): out[t] = sum_j topk_weights[t][j] x(t, j), fp32 in
        slot order, rounded once. x: [L, R x maxT, H] bf16 in the dispatch's row order (the combine
        buffer itself when zero_copy). With return_recv_hook, hook() writes combined_x."""
        import torch
        if use_logfmt:
            raise NotImplementedError("low_latency_combine: use_logfmt is not implemented")
        buf: EpBuffer = handle.buf
        buf.combine_send(x)
        if out is None:
            out = torch.empty((handle.num_tokens, buf.hidden), dtype=torch.bfloat16, device=x.device)
        def hook() -> None:
            buf.combine_recv(topk_weights, out)

        if return_recv_hook:
            return out, EventOverlap(), hook
        hook()
        return out, EventOverlap(), (lambda: None)
