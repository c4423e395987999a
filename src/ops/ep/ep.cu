// EpBuffer (tilewire/ops/ep.hpp): the window, the device state, and the launches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../../runtime/op_entry.hpp"
#include "state.cuh"
#include "tilewire/ops/ep.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {


namespace {

// Collective, before anything is made: every rank's EpConfig fields that shape the protocol (the
// window's geometry, the grids, the payload) are equal, or every rank throws kInvalidArgument
// naming the first field that differs. The local checks that follow then give every rank the
// same verdict (they read only agreed values).
void agree_on_config(Comm& comm, const EpConfig& c, int sms) {
  const char* pay[] = {ep_payload_name(EpPayload::kBFloat16), ep_payload_name(EpPayload::kFp8E4M3)};
  const char* mode[] = {"high throughput", "low latency"};
  struct Field {
    const char* name;
    int64_t value;
    const char* const* names;  // enum names, or null
  };
  const Field f[] = {{"max_tokens_per_rank", c.max_tokens_per_rank, nullptr},
                     {"hidden", c.hidden, nullptr},
                     {"topk", c.topk, nullptr},
                     {"num_experts", c.num_experts, nullptr},
                     {"payload", c.payload == EpPayload::kBFloat16 ? 0 : 1, pay},
                     {"mode", c.mode == EpMode::kHighThroughput ? 0 : 1, mode},
                     {"expert_major_rows", c.expert_major_rows, nullptr},
                     {"combine_slots", c.combine_slots ? 1 : 0, nullptr},
                     {"num_sms", sms, nullptr}};
  constexpr int n = sizeof(f) / sizeof(f[0]);
  const int P = comm.nranks();
  int64_t mine[n];
  for (int i = 0; i < n; ++i) mine[i] = f[i].value;
  std::vector<int64_t> all((size_t)n * P);
  comm.allgather_host(mine, all.data(), sizeof(mine));
  const auto show = [&](int i, int64_t v) { return f[i].names ? std::string(f[i].names[v]) : std::to_string(v); };
  for (int q = 1; q < P; ++q)
    for (int i = 0; i < n; ++i)
      TW_REQUIRE(all[(size_t)q * n + i] == all[i], kInvalidArgument,
                 std::string("EpBuffer: EpConfig::") + f[i].name + " differs across ranks: rank 0 has " + show(i, all[i]) +
                     ", rank " + std::to_string(q) + " has " + show(i, all[(size_t)q * n + i]) +
                     (i == n - 1 ? " (num_sms 0: high throughput min(24, the SM budget), low latency the SM budget)" : "") +
                     "; every rank makes the buffer with the same config");
}

}  // namespace

EpBuffer::EpBuffer(Comm& comm, const EpConfig& cfg) : comm_(comm), cfg_(cfg) {
  comm.require_usable("EpBuffer");
  agree_on_config(comm, cfg, cfg.num_sms > 0 ? cfg.num_sms : ep_default_sms(cfg, comm.sm_count()));
  const Status s = check_ep_config(cfg, comm.nranks(), comm.sm_count());
  TW_REQUIRE(s.ok, kInvalidArgument, s.reason);
  // Peers outside the LSA team (other nodes) are reached with GIN puts and signals in both modes
  // (run here under the emulated GIN of virtual nodes; NCCL's own GIN needs a NIC, or NCCL's
  // socket GIN, README).
  const bool gin = !comm.all_lsa();
  TW_REQUIRE(!gin || comm.gin_available(), kUnsupported,
             "EpBuffer: " + std::to_string(comm.nranks() - comm.lsa_size()) +
                 " ranks are outside this rank's LSA team and need GIN, which this communicator lacks (no GIN-capable "
                 "NIC, or CommConfig::want_gin false)");
  TW_REQUIRE(comm.nranks() <= ops::ep::kMaxRanks, kUnsupported,
             "EpBuffer: " + std::to_string(comm.nranks()) + " ranks; the kernels are built for at most " +
                 std::to_string(ops::ep::kMaxRanks));
  sms_ = cfg.num_sms > 0 ? cfg.num_sms : ep_default_sms(cfg, comm.sm_count());
  st_ = std::make_unique<State>();
  State& st = *st_;
  {
    // The verdict lives in device memory: every kernel reads it, and a host-mapped word would
    // cost each reading thread a PCIe round trip. check() copies it back.
    StreamGuard init;
    st.status_dev = ep_zalloc<ops::ep::Status>(1, init.s);
    TW_CUDA_CHECK(cudaStreamSynchronize(init.s));
  }
  if (cfg.mode == EpMode::kLowLatency) {
    init_low_latency();  // ll.cu
    comm.barrier();      // every rank's flags are zero before any peer writes into them
    return;
  }
  const int P = comm.nranks(), N = cfg.max_tokens_per_rank;
  st.g = ops::ep::geometry(cfg, P, comm.rank(), sms_, gin);
  st.win = comm.alloc_window(st.g.total);
  StreamGuard init;
  const cudaStream_t s0 = init.s;
  st.r.in_rank = ep_zalloc<uint8_t>((size_t)N * P, s0);
  st.r.send_slot = ep_zalloc<int>((size_t)N * P, s0);
  st.r.tokens_per_rank = ep_zalloc<int>(P, s0);
  st.r.tokens_per_expert = ep_zalloc<int>(cfg.num_experts, s0);
  st.depochs = ep_zalloc<ops::ep::Epoch>(sms_, s0);
  st.cepochs = ep_zalloc<ops::ep::Epoch>(sms_, s0);
  st.sepochs = ep_zalloc<ops::ep::Epoch>(sms_, s0);
  st.rank_over = ep_zalloc<int>(P, s0);
  st.num_recv = ep_zalloc<int>(1, s0);
  st.recv_per_expert = ep_zalloc<int>(st.g.L, s0);
  st.recv_base = ep_zalloc<int>(P, s0);
  st.local_bytes = (size_t)N * P * 5 + 4 * ((size_t)P * 3 + cfg.num_experts + st.g.L + 1) + 3 * sizeof(ops::ep::Epoch) * (size_t)sms_;
  // The flags and counts start at 0 on every rank before any peer writes into them.
  TW_CUDA_CHECK(cudaMemsetAsync(st.win.data(), 0, st.g.off_rsrc, s0));
  if (gin) {  // GIN counters are cumulative and shared with earlier owners: waits count from here
    st.g.sig = comm.reserve_signals(4 * P, "EpBuffer");
    st.sig0 = ep_zalloc<uint64_t>(4 * (size_t)P, s0);
    ops::ep::read_signals<<<1, 128, 0, s0>>>(comm.dev_ctx(), st.g.sig, 4 * P, st.sig0);
    TW_CUDA_CHECK(cudaGetLastError());
  }
  comm.sync(s0);
  comm.barrier();
}

EpBuffer::~EpBuffer() {
  if (!st_) return;
  State& st = *st_;
  for (void* p : {(void*)st.r.in_rank, (void*)st.r.send_slot, (void*)st.r.tokens_per_rank, (void*)st.r.tokens_per_expert,
                  (void*)st.depochs, (void*)st.cepochs, (void*)st.sepochs, (void*)st.rank_over, (void*)st.num_recv,
                  (void*)st.recv_per_expert, (void*)st.recv_base})
    cudaFree(p);
  cudaFree(st.status_dev);
  if (st.sig0) {
    cudaFree(st.sig0);
    comm_.release_signals(st.g.sig);
  }
  if (ll_) {
    const ops::ep::ll::Local& l = ll_->s;
    for (void* p : {(void*)l.pos, (void*)l.cnt, (void*)l.epochs, (void*)l.route, (void*)l.rcount, (void*)l.sig0,
                    (void*)l.gin_total})
      cudaFree(p);
    if (ll_->g.gin) comm_.release_signals(ll_->g.sig);
  }
}

size_t EpBuffer::bytes() const { return ll_ ? ll_->g.total + ll_->local_bytes : st_->g.total + st_->local_bytes; }

EpLayoutView EpBuffer::layout_view() const {
  return EpLayoutView{st_->r.num_tokens, st_->r.tokens_per_rank, st_->r.tokens_per_expert, st_->r.in_rank,
                      st_->r.send_slot};
}

void EpBuffer::layout(const void* topk_idx, EpIndex type, int num_tokens, cudaStream_t stream) {
  const auto check = [&] {
    TW_REQUIRE(cfg_.mode == EpMode::kHighThroughput, kInvalidArgument,
               std::string("EpBuffer::layout") + ": the buffer was made for the low-latency mode (dispatch_send / dispatch_recv)");
    TW_REQUIRE(num_tokens >= 0 && num_tokens <= cfg_.max_tokens_per_rank, kInvalidArgument,
               "EpBuffer::layout: " + std::to_string(num_tokens) + " tokens; the buffer holds at most " +
                   std::to_string(cfg_.max_tokens_per_rank) + " per rank (EpConfig::max_tokens_per_rank)");
    TW_REQUIRE(num_tokens == 0 || topk_idx != nullptr, kInvalidArgument, "EpBuffer::layout: topk_idx is null");
    TW_REQUIRE(reinterpret_cast<uintptr_t>(topk_idx) % (type == EpIndex::kInt64 ? 8 : 4) == 0, kInvalidArgument,
               "EpBuffer::layout: topk_idx is not aligned to its element size");
    return Status{};
  };
  State& st = *st_;
  const int P = comm_.nranks();
  // Ordered: the routing may still be read by the last call. Not compared across ranks: each
  // rank routes its own tokens.
  const OpEntry entry(comm_, "EpBuffer::layout", stream, check, [] {});
  st.r.num_tokens = num_tokens;
  TW_CUDA_CHECK(cudaMemsetAsync(st.r.tokens_per_expert, 0, sizeof(int) * cfg_.num_experts, stream));
  // A new routing starts with a clean verdict (check() reports this layout's, not an old one's).
  TW_CUDA_CHECK(cudaMemsetAsync(st.status_dev, 0, sizeof(ops::ep::Status), stream));
  if (num_tokens > 0) {
    const int grid = std::min((num_tokens + 255) / 256, 1024);
    ops::ep::layout_count<<<grid, 256, 0, stream>>>(topk_idx, type == EpIndex::kInt64, num_tokens, cfg_.topk,
                                                    cfg_.num_experts, st.g.L, P, st.r, comm_.rank(), st.status_dev);
    TW_CUDA_CHECK(cudaGetLastError());
  }
  ops::ep::layout_scan<<<P, 1024, 0, stream>>>(st.r, P);
  TW_CUDA_CHECK(cudaGetLastError());
  st.have_layout = true;
  st.layout_changed = true;
}

EpRecv EpBuffer::dispatch(const EpDispatchArgs& a, cudaStream_t stream) {
  return dispatch_impl(a, nullptr, nullptr, stream);
}

EpRecv EpBuffer::dispatch(const EpDispatchArgs& a, const EpExpertMajor& em, cudaStream_t stream) {
  return dispatch_impl(a, &em, nullptr, stream);
}

EpRecv EpBuffer::dispatch(const EpDispatchArgs& a, const EpExpertPlaces& ex, cudaStream_t stream) {
  return dispatch_impl(a, nullptr, &ex, stream);
}

EpRecv EpBuffer::dispatch_impl(const EpDispatchArgs& a, const EpExpertMajor* em, const EpExpertPlaces* ex,
                               cudaStream_t stream) {
  State& st = *st_;
  const char* op = "EpBuffer::dispatch";
  const auto check = [&] {
    if (ex) {
      TW_REQUIRE(cfg_.expert_major_rows > 0, kInvalidArgument,
                 std::string(op) + ": EpExpertPlaces needs a buffer made with EpConfig::expert_major_rows > 0");
      TW_REQUIRE(comm_.all_lsa(), kInvalidArgument,
                 std::string(op) + ": EpExpertPlaces needs every peer in the LSA team (this buffer has GIN peers)");
      const char* null = !ex->counts ? "counts" : !ex->offsets ? "offsets" : !ex->overflow ? "overflow"
                         : (!ex->send_pos && a.num_tokens > 0) ? "send_pos" : nullptr;
      TW_REQUIRE(null == nullptr, kInvalidArgument, std::string(op) + ": EpExpertPlaces::" + (null ? null : "") + " is null");
    }
    if (em) {
      TW_REQUIRE(comm_.all_lsa(), kInvalidArgument,
                 std::string(op) + ": the expert-major receive needs every peer in the LSA team (this buffer has GIN peers)");
      TW_REQUIRE(cfg_.payload == EpPayload::kBFloat16, kInvalidArgument,
                 std::string(op) + ": the expert-major receive is built for bf16 rows");
      TW_REQUIRE(em->max_rows >= 0, kInvalidArgument, std::string(op) + ": EpExpertMajor::max_rows is negative");
      const char* null = !em->counts ? "counts" : !em->offsets ? "offsets" : !em->bounds ? "bounds" : !em->perm ? "perm"
                         : !em->pos_of ? "pos_of" : !em->overflow ? "overflow" : !em->layout_flag ? "layout_flag"
                         : !em->ready ? "ready" : (!em->xg && em->max_rows > 0) ? "xg" : nullptr;
      TW_REQUIRE(null == nullptr, kInvalidArgument, std::string(op) + ": EpExpertMajor::" + (null ? null : "") + " is null");
      TW_REQUIRE(reinterpret_cast<uintptr_t>(em->xg) % 16 == 0, kInvalidArgument,
                 std::string(op) + ": EpExpertMajor::xg is not 16-byte aligned");
    }
    TW_REQUIRE(cfg_.mode == EpMode::kHighThroughput, kInvalidArgument,
               std::string(op) + ": the buffer was made for the low-latency mode (dispatch_send / dispatch_recv)");
    TW_REQUIRE(a.payload == cfg_.payload, kInvalidArgument,
               std::string(op) + ": the payload is " + ep_payload_name(a.payload) + " but the buffer was made for " +
                   ep_payload_name(cfg_.payload));
    TW_REQUIRE(a.num_tokens >= 0 && a.num_tokens <= cfg_.max_tokens_per_rank, kInvalidArgument,
               std::string(op) + ": " + std::to_string(a.num_tokens) + " tokens; the buffer holds at most " +
                   std::to_string(cfg_.max_tokens_per_rank) + " per rank (EpConfig::max_tokens_per_rank)");
    if (a.num_tokens > 0) {
      TW_REQUIRE(a.x != nullptr && reinterpret_cast<uintptr_t>(a.x) % 16 == 0, kInvalidArgument,
                 std::string(op) + ": x is null or not 16-byte aligned");
      TW_REQUIRE(a.topk_weights != nullptr, kInvalidArgument, std::string(op) + ": topk_weights is null");
      TW_REQUIRE(cfg_.payload != EpPayload::kFp8E4M3 || a.x_scales != nullptr, kInvalidArgument,
                 std::string(op) + ": fp8 rows need x_scales [N, hidden / 128]");
    }
    TW_REQUIRE(a.num_tokens == 0 || a.topk_idx != nullptr, kInvalidArgument, std::string(op) + ": topk_idx is null");
    TW_REQUIRE(!a.reuse_layout || (st.have_layout && st.r.num_tokens == a.num_tokens), kInvalidArgument,
               std::string(op) + ": reuse_layout, but the last layout was not of " + std::to_string(a.num_tokens) + " tokens");
    return Status{};
  };
  const bool idx64 = a.index_type == EpIndex::kInt64;
  // Ordered before layout() rewrites the routing a previous call reads.
  const OpEntry entry(comm_, op, stream, check, [&] {
    // Every rank places or none does: a placing rank waits for every rank's CTAs to say they run.
    comm_.agree_on_call(op, {{"payload", ep_payload_name(a.payload)},
                             {"expert_major", em ? "yes" : ex ? "places" : "no"}});
  });
  if (!a.reuse_layout) layout(a.topk_idx, a.index_type, a.num_tokens, stream);
  ops::ep::DispatchParams p{};
  static_cast<ops::ep::Common&>(p) = st.common(comm_);
  p.r = st.r;
  p.x = static_cast<const char*>(a.x);
  p.x_scales = a.x_scales;
  p.topk_idx = a.topk_idx;
  p.idx64 = idx64;
  p.topk_weights = a.topk_weights;
  p.epochs = st.depochs;
  p.num_recv = st.num_recv;
  p.recv_per_expert = st.recv_per_expert;
  p.recv_base = st.recv_base;
  p.alignment = cfg_.expert_alignment;
  p.status = st.status_dev;
  p.ring = st.ring;
  size_t smem = 0;
  if (em) {
    // xg is never null on the device: a rank with max_rows 0 still gets a valid (unused) address.
    p.place = ops::ep::Place{em->xg ? static_cast<char*>(em->xg) : static_cast<char*>(st.win.data()), em->max_rows,
                             em->counts, em->offsets, em->bounds, em->perm, em->pos_of, em->overflow, em->layout_flag,
                             em->ready};
    smem = ops::ep::place_smem_bytes(st.g.L);
  }
  if (ex) {
    // send_pos is never null on the device (a rank with no tokens reads none of it).
    p.direct = ops::ep::Direct{ex->send_pos ? ex->send_pos : st.r.send_slot, ex->counts, ex->offsets, ex->overflow,
                               st.rank_over};
    smem = ops::ep::direct_smem_bytes(st.g.E, st.g.P);
  }
  ops::ep::dispatch<<<sms_, ops::ep::kThreads, smem, stream>>>(p);
  comm_.check_launch("ep dispatch launch");
  comm_.launched("ep dispatch");
  st.dispatched = true;
  st.layout_changed = false;
  st.direct = ex != nullptr;
  const ops::ep::Geometry& g = st.g;
  char* base = static_cast<char*>(st.win.data());
  EpRecv r;
  r.x = base + g.off_rx;
  r.x_scales = g.scale_bytes ? reinterpret_cast<float*>(base + g.off_rscale) : nullptr;
  r.topk_idx = reinterpret_cast<int32_t*>(base + g.off_ridx);
  r.topk_weights = reinterpret_cast<float*>(base + g.off_rw);
  r.src_rank = reinterpret_cast<int32_t*>(base + g.off_rsrc);
  r.src_token = reinterpret_cast<int32_t*>(base + g.off_rtok);
  r.num_recv = st.num_recv;
  r.tokens_per_expert = st.recv_per_expert;
  r.capacity = g.capacity;
  if (g.xrows > 0) {
    r.expert_x = base + g.off_xg;
    r.expert_pos = reinterpret_cast<int*>(base + g.off_xpos);
  }
  return r;
}

void EpBuffer::combine(const void* y, const float* weights, void* out, cudaStream_t stream) {
  combine_impl("EpBuffer::combine", y, weights, nullptr, out, stream);
}

void EpBuffer::combine(const EpExpertRows& rows, void* out, cudaStream_t stream) {
  combine_impl("EpBuffer::combine(EpExpertRows)", nullptr, nullptr, &rows, out, stream);
}

void EpBuffer::combine_impl(const char* op, const void* y, const float* weights, const EpExpertRows* rows, void* out,
                            cudaStream_t stream) {
  State& st = *st_;
  const auto check = [&] {
    TW_REQUIRE(cfg_.mode == EpMode::kHighThroughput, kInvalidArgument,
               std::string(op) + ": the buffer was made for the low-latency mode (dispatch_send / dispatch_recv)");
    TW_REQUIRE(st.dispatched, kInvalidArgument, std::string(op) + ": no dispatch yet (combine returns a dispatch's rows)");
    TW_REQUIRE(!st.layout_changed, kInvalidArgument,
               std::string(op) + ": layout() ran after the last dispatch; combine needs that dispatch's routing");
    TW_REQUIRE(reinterpret_cast<uintptr_t>(y) % 16 == 0, kInvalidArgument, std::string(op) + ": y is not 16-byte aligned");
    if (rows != nullptr) {
      TW_REQUIRE(rows->yg != nullptr && reinterpret_cast<uintptr_t>(rows->yg) % 16 == 0, kInvalidArgument,
                 std::string(op) + ": rows.yg is null or not 16-byte aligned");
      TW_REQUIRE(rows->pos_of != nullptr, kInvalidArgument, std::string(op) + ": rows.pos_of is null");
      TW_REQUIRE(rows->weights != nullptr, kInvalidArgument, std::string(op) + ": rows.weights is null");
    }
    TW_REQUIRE(st.r.num_tokens == 0 || (out != nullptr && reinterpret_cast<uintptr_t>(out) % 16 == 0), kInvalidArgument,
               std::string(op) + ": out is null or not 16-byte aligned");
    return Status{};
  };
  // Not compared across ranks: whether a rank passes y and weights depends on its own rows.
  const OpEntry entry(comm_, op, stream, check, [&] { comm_.agree_on_call(op, {}); });
  ops::ep::CombineParams p{};
  static_cast<ops::ep::Common&>(p) = st.common(comm_);
  p.y = static_cast<const char*>(y);
  p.weights = weights;
  if (rows != nullptr) {
    p.yg = static_cast<const char*>(rows->yg);
    p.pos_of = rows->pos_of;
    p.pair_w = rows->weights;
  }
  p.status = st.status_dev;
  p.epochs = st.cepochs;
  p.num_recv = st.num_recv;
  p.recv_base = st.recv_base;
  p.ring = st.ring;
  ops::ep::combine_push<<<sms_, ops::ep::kThreads, 0, stream>>>(p);
  comm_.check_launch("ep combine launch");
  comm_.launched("ep combine");
  if (st.r.num_tokens > 0) {
    ops::ep::ReduceParams rp{};
    rp.win = st.win.dev();
    rp.lsa_rank = comm_.dev_ctx().lsa_rank;
    rp.g = st.g;
    rp.r = st.r;
    rp.out = static_cast<__nv_bfloat16*>(out);
    rp.status = st.status_dev;
    const size_t threads = (size_t)st.r.num_tokens * (cfg_.hidden / 8);
    const int grid = (int)std::min<size_t>((threads + 255) / 256, 4096);
    ops::ep::combine_reduce<<<grid, 256, 0, stream>>>(rp);
    TW_CUDA_CHECK(cudaGetLastError());
  }
}

// Why a combine_slots step cannot run (shared by slot_targets and combine_slots).
static void require_slots(const char* op, const EpConfig& cfg, bool dispatched, bool direct, bool layout_changed) {
  TW_REQUIRE(cfg.mode == EpMode::kHighThroughput && cfg.combine_slots, kInvalidArgument,
             std::string(op) + ": the buffer was made without EpConfig::combine_slots");
  TW_REQUIRE(dispatched && direct, kInvalidArgument,
             std::string(op) + ": the last dispatch was not a dispatch(EpExpertPlaces) (the slot rows go back from its places)");
  TW_REQUIRE(!layout_changed, kInvalidArgument,
             std::string(op) + ": layout() ran after the last dispatch; the slot rows need that dispatch's routing");
}

void EpBuffer::slot_targets(void** targets, int max_rows, cudaStream_t stream) {
  State& st = *st_;
  const char* op = "EpBuffer::slot_targets";
  require_slots(op, cfg_, st.dispatched, st.direct, st.layout_changed);
  TW_REQUIRE(max_rows >= cfg_.expert_major_rows, kInvalidArgument,
             std::string(op) + ": max_rows " + std::to_string(max_rows) + " is below EpConfig::expert_major_rows " +
                 std::to_string(cfg_.expert_major_rows) + " (a target per place)");
  TW_REQUIRE(targets != nullptr && reinterpret_cast<uintptr_t>(targets) % 8 == 0, kInvalidArgument,
             std::string(op) + ": targets is null or not 8-byte aligned");
  // Stream order after the dispatch is enough: it reads what that dispatch wrote into this rank's
  // window (the rows' sources and places), and the next dispatch is ordered after this stream.
  ops::ep::SlotParams p{};
  static_cast<ops::ep::Common&>(p) = st.common(comm_);
  p.targets = targets;
  p.max_rows = max_rows;
  p.num_recv = st.num_recv;
  const int grid = (int)std::min<long long>(((long long)st.g.capacity * st.g.topk + 255) / 256, 1024);
  ops::ep::slot_targets<<<grid, 256, 0, stream>>>(p);
  TW_CUDA_CHECK(cudaGetLastError());
}

void EpBuffer::combine_slots(const void* topk_idx, EpIndex type, const float* topk_weights, void* out,
                             cudaStream_t stream) {
  State& st = *st_;
  const char* op = "EpBuffer::combine_slots";
  const int N = st.r.num_tokens;
  const auto check = [&] {
    require_slots(op, cfg_, st.dispatched, st.direct, st.layout_changed);
    if (N > 0) {
      const char* null = !topk_idx ? "topk_idx" : !topk_weights ? "topk_weights" : !out ? "out" : nullptr;
      TW_REQUIRE(null == nullptr, kInvalidArgument,
                 std::string(op) + ": " + (null ? null : "") + " is null with the last dispatch's " + std::to_string(N) +
                     " tokens");
      TW_REQUIRE(reinterpret_cast<uintptr_t>(out) % 16 == 0, kInvalidArgument, std::string(op) + ": out is not 16-byte aligned");
      TW_REQUIRE(reinterpret_cast<uintptr_t>(topk_idx) % (type == EpIndex::kInt64 ? 8 : 4) == 0, kInvalidArgument,
                 std::string(op) + ": topk_idx is not aligned to its element size");
    }
    return Status{};
  };
  const OpEntry entry(comm_, op, stream, check, [&] { comm_.agree_on_call(op, {}); });
  ops::ep::SlotParams p{};
  static_cast<ops::ep::Common&>(p) = st.common(comm_);
  p.epochs = st.sepochs;
  p.topk_idx = topk_idx;
  p.idx64 = type == EpIndex::kInt64;
  p.topk_weights = topk_weights;
  p.rank_over = st.rank_over;
  p.num_tokens = N;
  p.out = static_cast<__nv_bfloat16*>(out);
  p.status = st.status_dev;
  ops::ep::slots_done<<<sms_, ops::ep::kThreads, 0, stream>>>(p);
  comm_.check_launch("ep combine_slots launch");
  comm_.launched("ep combine_slots");
  if (N > 0) {
    const size_t threads = (size_t)N * (cfg_.hidden / 8);
    const int grid = (int)std::min<size_t>((threads + 255) / 256, 4096);
    ops::ep::slots_reduce<<<grid, 256, 0, stream>>>(p);
    TW_CUDA_CHECK(cudaGetLastError());
  }
}

void EpBuffer::set_trace(const trace::Ring& ring) {
  st_->ring = ring;
  st_->ring.rank = (uint16_t)comm_.rank();
}

// num_recv and check read what the last call wrote: they take their place in the call order
// (Comm::CallOrder), so that a read on another stream waits for that call.
int EpBuffer::num_recv(cudaStream_t stream) {
  TW_REQUIRE(cfg_.mode == EpMode::kHighThroughput, kInvalidArgument,
             "EpBuffer::num_recv: a low-latency buffer has no row count; its rows per expert are "
             "EpLowLatencyRecv::count (dispatch_recv)");
  comm_.require_usable("EpBuffer::num_recv");
  int n = 0;
  {
    const Comm::CallOrder order(comm_, stream);
    TW_CUDA_CHECK(cudaMemcpyAsync(&n, st_->num_recv, sizeof(int), cudaMemcpyDeviceToHost, stream));
    comm_.sync(stream);
  }
  return n;
}

void EpBuffer::check(cudaStream_t stream) {
  comm_.require_usable("EpBuffer::check");
  // A peer's verdict on its routing travels with its counts, which dispatch_recv receives: before
  // it, check() could only speak for this rank, so it refuses on every rank alike.
  TW_REQUIRE(!ll_ || ll_->step != LowLatency::Step::kSent, kInvalidArgument,
             "EpBuffer::check: a low-latency dispatch is checked after its dispatch_recv (every rank's verdict "
             "arrives with its counts)");
  ops::ep::Status host{};
  {
    const Comm::CallOrder order(comm_, stream);
    TW_CUDA_CHECK(cudaMemcpyAsync(&host, st_->status_dev, sizeof(host), cudaMemcpyDeviceToHost, stream));
    comm_.sync(stream);
  }
  const ops::ep::Status* s = &host;
  if (s->code == 1)
    throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
                "EpBuffer: topk_idx[" + std::to_string(s->token) + "][" + std::to_string(s->slot) + "] = " +
                    std::to_string(s->value) + " on rank " + std::to_string(s->rank) + " is outside [-1, " +
                    std::to_string(cfg_.num_experts) + "); the dispatch wrote nothing on any rank");
  if (s->code == ops::ep::kStatusDuplicate)
    throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
                "EpBuffer: topk_idx[" + std::to_string(s->token) + "][" + std::to_string(s->slot) + "] = " +
                    std::to_string(s->value) + " on rank " + std::to_string(s->rank) +
                    " repeats an expert of that token's row (the low-latency mode needs distinct experts per token); "
                    "the dispatch wrote nothing on any rank");
  if (s->no_y_rows > 0)
    throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
                "EpBuffer::combine: y is null, but this rank received " + std::to_string(s->no_y_rows) +
                    " rows; zero rows went back to their sources (y may be null only on a rank that received none)");
  if (s->code == 2)
    throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
                "EpBuffer: rank " + std::to_string(s->rank) +
                    "'s topk_idx was refused (an expert id out of range, or in the low-latency mode an expert repeated "
                    "in a token's row: check() on that rank says which); the dispatch wrote nothing on any rank");
}

}  // namespace tw
