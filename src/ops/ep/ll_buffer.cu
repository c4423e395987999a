// The low-latency EP mode's host side (tilewire/ops/ep.hpp, EpMode::kLowLatency): the buffer's
// creation and the four calls, each a launch of the kernels in ll.cu (the protocol is described
// there).
#include <algorithm>
#include <mutex>
#include <string>

#include "../../runtime/op_entry.hpp"
#include "../../runtime/pdl_launch.hpp"
#include "state.cuh"
#include "tilewire/ops/ep.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

// ------------------------------------------------------------------------------ host
namespace {
// Every kernel of this mode with programmatic dependent launch (runtime/pdl_launch.hpp): a
// decode step is five short kernels in a row, and each begins with griddepcontrol.wait.
void launch_ll(const Comm& comm, void (*kernel)(ops::ep::ll::Params), int grid, int block, size_t smem,
               cudaStream_t stream, const ops::ep::ll::Params& p) {
  launch_pdl(comm, kernel, dim3(grid), dim3(block), smem, stream, p);
}
}  // namespace

void EpBuffer::init_low_latency() {
  ll_ = std::make_unique<LowLatency>();
  LowLatency& ll = *ll_;
  const int P = comm_.nranks();
  const bool gin = !comm_.all_lsa();
  const bool tma = !gin && env::get_bool("TILEWIRE_EP_LL_TMA");  // read before any collective step
  ll.early = !comm_.is_virtual() && comm_.tuning().pdl && env::get_bool("TILEWIRE_EP_LL_EARLY");
  ll.g = ops::ep::ll::geometry(cfg_, P, comm_.rank(), sms_, gin);
  ll.win = comm_.alloc_window(ll.g.total);
  StreamGuard init;
  const cudaStream_t s0 = init.s;
  ops::ep::ll::Local& s = ll.s;
  const ops::ep::ll::Geo& g = ll.g;
  s.pos = ep_zalloc<int>((size_t)g.max_tokens * g.topk, s0);
  s.cnt = ep_zalloc<int>(g.E, s0);
  s.epochs = ep_zalloc<ops::ep::Epoch>(4 * (size_t)g.G, s0);
  s.route = ep_zalloc<int2>((size_t)g.max_tokens * g.topk, s0);
  s.rcount = ep_zalloc<int>(g.L, s0);
  ll.local_bytes = (size_t)g.max_tokens * g.topk * 12 + (size_t)g.E * 4 + 4 * sizeof(ops::ep::Epoch) * (size_t)g.G + 4 * (size_t)g.L;
  TW_CUDA_CHECK(cudaMemsetAsync(ll.win.data(), 0, g.off_meta, s0));  // slots and flags start at 0
  // The send computes the layout in shared memory (layout_smem: up to 160 KiB), beside its
  // static arrays. The default allowance is 48 KiB less those, and the attribute belongs to
  // the kernel (every buffer of the process): raised to this buffer's need, never lowered.
  {
    static std::mutex mu;
    const std::lock_guard<std::mutex> lk(mu);
    const size_t smem = ops::ep::ll::layout_smem(g.E, g.max_tokens, g.topk);
    cudaFuncAttributes fa{};
    TW_CUDA_CHECK(cudaFuncGetAttributes(&fa, ops::ep::ll::send));
    if (smem > (size_t)fa.maxDynamicSharedSizeBytes)
      TW_CUDA_CHECK(cudaFuncSetAttribute(ops::ep::ll::send, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    // send_tma holds the layout and its CTA's rows: it may take the device's whole opt-in shared
    // memory less its static arrays; dispatch_send runs it only where a call fits.
    if (tma) {
      int optin = 0;
      TW_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, comm_.device()));
      cudaFuncAttributes ta{};
      TW_CUDA_CHECK(cudaFuncGetAttributes(&ta, ops::ep::ll::send_tma));
      ll.tma_smem_max = (size_t)std::max(0, optin - (int)ta.sharedSizeBytes);
      if (ll.tma_smem_max > (size_t)ta.maxDynamicSharedSizeBytes)
        TW_CUDA_CHECK(cudaFuncSetAttribute(ops::ep::ll::send_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ll.tma_smem_max));
    }
  }
  if (gin) {  // GIN counters are cumulative and shared with earlier owners: waits count from here
    ll.g.sig = comm_.reserve_signals(6 * P, "EpBuffer (low latency)");
    uint64_t* sig0 = ep_zalloc<uint64_t>(6 * (size_t)P, s0);
    ops::ep::read_signals<<<1, 128, 0, s0>>>(comm_.dev_ctx(), ll.g.sig, 6 * P, sig0);
    TW_CUDA_CHECK(cudaGetLastError());
    s.sig0 = sig0;
    s.gin_total = ep_zalloc<uint64_t>(4 * (size_t)P, s0);
    ll.local_bytes += 80 * (size_t)P;
  }
  comm_.sync(s0);
}

// A refused low-latency call; the message is built only when it is (these checks run per call).
#define TW_EP_REFUSE_UNLESS(ok, op, why) TW_REQUIRE(ok, kInvalidArgument, std::string("EpBuffer::") + (op) + ": " + (why))

// The low-latency state, after the check every call of the mode makes (inside its OpEntry's checks,
// after the communicator's).
EpBuffer::LowLatency& EpBuffer::low_latency(const char* op) {
  TW_EP_REFUSE_UNLESS(ll_ != nullptr, op, "the buffer was made for the high-throughput mode (EpConfig::mode)");
  return *ll_;
}

void EpBuffer::dispatch_send(const EpLowLatencyArgs& a, cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("dispatch_send");
    TW_EP_REFUSE_UNLESS(ll.step != LowLatency::Step::kSent, "dispatch_send", "the last dispatch_send was not received yet (dispatch_recv)");
    TW_EP_REFUSE_UNLESS(ll.step != LowLatency::Step::kCombineSent, "dispatch_send", "the last combine_send was not received yet (combine_recv)");
    TW_EP_REFUSE_UNLESS(a.num_tokens >= 0 && a.num_tokens <= cfg_.max_tokens_per_rank, "dispatch_send",
              std::to_string(a.num_tokens) + " tokens; the buffer holds at most " + std::to_string(cfg_.max_tokens_per_rank) +
                  " per rank (EpConfig::max_tokens_per_rank)");
    TW_EP_REFUSE_UNLESS(a.num_tokens == 0 || (a.x != nullptr && reinterpret_cast<uintptr_t>(a.x) % 16 == 0), "dispatch_send",
              "x is null or not 16-byte aligned");
    TW_EP_REFUSE_UNLESS(a.num_tokens == 0 || a.topk_idx != nullptr, "dispatch_send", "topk_idx is null");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::dispatch_send", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::dispatch_send", {{"mode", "low latency"}}); });
  LowLatency& ll = *ll_;
  ll.s.num_tokens = a.num_tokens;
  ll.s.status = st_->status_dev;
  ops::ep::ll::Params p = ll_->params(comm_, st_->ring);
  p.x = static_cast<const char*>(a.x);
  p.topk_idx = a.topk_idx;
  p.idx64 = a.index_type == EpIndex::kInt64;
  p.fp8 = cfg_.payload == EpPayload::kFp8E4M3;
  // The copy engine's send where the call fits: an all-LSA team (tma_smem_max is 0 otherwise), at
  // most kTmaTokens tokens per CTA, the rows and the layout in shared memory, and fp8 rows whose
  // scales are whole 16-byte bulk copies (hidden a multiple of 512).
  const size_t tma_smem = ops::ep::ll::tma_send_smem(cfg_.num_experts, a.num_tokens, cfg_.topk, sms_, cfg_.hidden, p.fp8);
  if (a.num_tokens > 0 && (a.num_tokens + sms_ - 1) / sms_ <= ops::ep::ll::kTmaTokens &&
      (!p.fp8 || cfg_.hidden % 512 == 0) && tma_smem <= ll.tma_smem_max) {
    launch_ll(comm_, ops::ep::ll::send_tma, sms_, ops::ep::kThreads, tma_smem, stream, p);
  } else {
    // Warps per pair: as many as leave every CTA's warps busy (a power of two, at most 16), so a
    // lane has at most two rounds of loads per row; whole rows when GIN puts them.
    p.parts = 1;
    const int pairs_per_cta = std::max(1, (a.num_tokens * cfg_.topk + sms_ - 1) / sms_);
    while (!ll.g.gin && p.parts < ops::ep::kWarps && 2 * p.parts * pairs_per_cta <= ops::ep::kWarps) p.parts *= 2;
    launch_ll(comm_, ops::ep::ll::send, sms_, ops::ep::kThreads,
              ops::ep::ll::layout_smem(cfg_.num_experts, a.num_tokens, cfg_.topk), stream, p);
  }
  // The send waits for every rank's counts: Comm::launched's rule (on a virtual team every rank
  // enqueues it before any rank enqueues more, which a shared hardware queue would hold behind it).
  comm_.check_launch("ep low-latency send launch");
  comm_.launched("ep low-latency send");
  ll.step = LowLatency::Step::kSent;
}

EpLowLatencyRecv EpBuffer::dispatch_recv(cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("dispatch_recv");
    TW_EP_REFUSE_UNLESS(ll.step == LowLatency::Step::kSent, "dispatch_recv", "no dispatch_send to receive");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::dispatch_recv", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::dispatch_recv", {}); });
  LowLatency& ll = *ll_;
  ops::ep::ll::Params p = ll_->params(comm_, st_->ring);
  // One CTA: the receive waits for the flags and counts each expert's rows; it moves nothing.
  launch_ll(comm_, ops::ep::ll::recv, 1, ops::ep::kThreads, 0, stream, p);
  if (ll.g.gin) launch_ll(comm_, ops::ep::ll::gin_advance, 1, 64, 0, stream, p);
  comm_.check_launch("ep low-latency receive launch");
  comm_.launched("ep low-latency receive");
  ll.step = LowLatency::Step::kReceived;
  EpLowLatencyRecv r;
  char* base = static_cast<char*>(ll.win.data());
  r.x = base + ll.g.off_rows;
  r.x_scales = ll.g.nsc ? reinterpret_cast<float*>(base + ll.g.off_scales) : nullptr;
  r.y = base + ll.g.off_y;
  r.count = ll.s.rcount;
  r.src_rank = reinterpret_cast<int32_t*>(base + ll.g.meta(0, 0));
  r.src_token = reinterpret_cast<int32_t*>(base + ll.g.meta(1, 0));
  r.capacity = ll.g.cap;
  return r;
}

void EpBuffer::combine_send(const void* y, cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("combine_send");
    TW_EP_REFUSE_UNLESS(ll.step == LowLatency::Step::kReceived, "combine_send", "combine_send follows a dispatch_recv");
    TW_EP_REFUSE_UNLESS(y != nullptr && reinterpret_cast<uintptr_t>(y) % 16 == 0, "combine_send", "y is null or not 16-byte aligned");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::combine_send", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::combine_send", {}); });
  LowLatency& ll = *ll_;
  ops::ep::ll::Params p = ll_->params(comm_, st_->ring);
  // y already in the combine block (the expert wrote it there): nothing to copy.
  p.y = y == static_cast<const char*>(ll.win.data()) + ll.g.off_y ? nullptr : static_cast<const char*>(y);
  if (p.y == nullptr && !ll.g.gin) launch_ll(comm_, ops::ep::ll::combine_release, 1, ops::ep::kThreads, 0, stream, p);
  else launch_ll(comm_, ops::ep::ll::combine_send, sms_, ops::ep::kThreads, 0, stream, p);
  ll.step = LowLatency::Step::kCombineSent;
}

void EpBuffer::combine_recv(const float* topk_weights, void* out, cudaStream_t stream) {
  const auto check = [&] {
    LowLatency& ll = low_latency("combine_recv");
    TW_EP_REFUSE_UNLESS(ll.step == LowLatency::Step::kCombineSent, "combine_recv", "no combine_send to receive");
    TW_EP_REFUSE_UNLESS(ll.s.num_tokens == 0 || (topk_weights != nullptr && out != nullptr &&
                                       reinterpret_cast<uintptr_t>(out) % 16 == 0),
              "combine_recv", "topk_weights or out is null, or out is not 16-byte aligned");
    return Status{};
  };
  const OpEntry entry(comm_, "EpBuffer::combine_recv", stream, check,
                      [&] { comm_.agree_on_call("EpBuffer::combine_recv", {}); });
  LowLatency& ll = *ll_;
  ops::ep::ll::Params p = ll_->params(comm_, st_->ring);
  p.weights = topk_weights;
  p.out = static_cast<__nv_bfloat16*>(out);
  launch_ll(comm_, ops::ep::ll::combine_recv, sms_, ops::ep::kThreads, 0, stream, p);
  if (ll.g.gin) launch_ll(comm_, ops::ep::ll::gin_advance_combine, 1, 64, 0, stream, p);
  comm_.check_launch("ep low-latency combine launch");
  comm_.launched("ep low-latency combine");
  ll.step = LowLatency::Step::kIdle;
}

}  // namespace tw
