// tw::MoE (tilewire/ops/moe.hpp): the FFN's buffers and its one call, the EP calls and the grouped
// GEMMs in sequence with the kernels between them (kernels.cu). The steps are ordered by `stream`
// alone; the EP calls order themselves across the communicator's calls (docs/architecture.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "../../runtime/stream_guard.hpp"
#include "../gemm/team_gemm.hpp"
#include "../grouped_gemm/launch.hpp"  // grouped_gemm_gated
#include "../sm90.hpp"
#include "kernels.hpp"
#include "tilewire/ops/moe.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

namespace {

Status fail(std::string why) { return Status{false, "moe: " + std::move(why)}; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// An allocation that fails names the buffer and its size (out of memory is not sticky: the
// thread's last error is cleared, so this rank's next launch check does not see it).
template <class T>
T* alloc(const char* what, size_t n, size_t* bytes) {
  void* p = nullptr;
  const size_t b = std::max<size_t>(n, 1) * sizeof(T);
  const cudaError_t e = cudaMalloc(&p, b);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw_error(Errc::kCuda, __FILE__, __LINE__,
                std::string("moe: out of device memory for its buffer ") + what + " (" + std::to_string(b) +
                    " bytes) on this rank; lower max_tokens_per_rank or MoeConfig::max_expert_rows");
  }
  TW_CUDA_CHECK(e);
  *bytes += b;
  return static_cast<T*>(p);
}

}  // namespace

Status check_moe_config(const MoeConfig& c, int nranks, int sm_budget) {
  if (c.ep.combine_slots)  // before the EP's checks, which would ask for expert_major_rows
    return fail("ep.combine_slots is the MoE's to set (MoeConfig::slot_combine); leave it false");
  const Status ep = check_ep_config(c.ep, nranks, sm_budget);
  if (!ep.ok) return fail(ep.reason);
  if (c.ep.payload != EpPayload::kBFloat16)
    return fail("payload fp8 is not built for the FFN (its grouped GEMMs take bf16 rows); use bf16");
  if (c.ffn <= 0 || c.ffn % 8 != 0)
    return fail("ffn " + std::to_string(c.ffn) + " must be a positive multiple of 8 (16-byte rows of bf16)");
  if (c.ep.hidden % 8 != 0) return fail("hidden " + std::to_string(c.ep.hidden) + " must be a multiple of 8");
  if (c.gate_up != MoeGateUp::kGateThenUp && c.gate_up != MoeGateUp::kInterleaved8)
    return fail("gate_up " + std::to_string(int(c.gate_up)) + " is not a MoeGateUp");
  if (c.max_expert_rows < 0)
    return fail("max_expert_rows " + std::to_string(c.max_expert_rows) + " is negative (0: the worst case)");
  // The overlap's dispatch CTAs (a whole SM each: their registers) and the GEMM's preparation,
  // which waits for them, must all fit in the rank's share of the GPU: num_sms <= budget - 1.
  if (c.overlap && c.ep.mode == EpMode::kHighThroughput && c.ep.num_sms > sm_budget - 1)
    return fail("overlap with ep.num_sms " + std::to_string(c.ep.num_sms) + " needs an SM budget of at least " +
                std::to_string(c.ep.num_sms + 1) + " (this rank's is " + std::to_string(sm_budget) +
                "): the dispatch's CTAs and the GEMM's preparation must be resident at once");
  if (c.overlap && c.ep.mode == EpMode::kHighThroughput && sm_budget < 2)
    return fail("overlap needs an SM budget of at least 2 (this rank's is " + std::to_string(sm_budget) + ")");
  if (c.direct_dispatch && c.overlap && c.ep.mode == EpMode::kHighThroughput)
    return fail("direct_dispatch and overlap are two ways to lay the receive out per expert; set one of them");
  if (c.slot_combine && c.ep.mode == EpMode::kHighThroughput && !c.direct_dispatch)
    return fail("slot_combine needs direct_dispatch (its rows go back from the places the dispatch stores into)");
  if (c.slot_combine && c.ep.mode == EpMode::kHighThroughput && c.gemm.tile == GroupedTile::k64x256pp)
    return fail("slot_combine's down GEMM (GroupedEpilogue::kRowTargets) is built for the 64x128pp and 128x256coop "
                "tiles, not gemm.tile 64x256pp");
  if (c.ep.expert_major_rows != 0)
    return fail("ep.expert_major_rows " + std::to_string(c.ep.expert_major_rows) +
                " is the MoE's to set (MoeConfig::direct_dispatch, max_expert_rows); leave it 0");
  if (c.gemm.rows_hint < 0 || c.gemm.reserved_sms < 0)
    return fail("gemm config rows_hint " + std::to_string(c.gemm.rows_hint) + " / reserved_sms " +
                std::to_string(c.gemm.reserved_sms) + " must not be negative");
  return Status{};
}

// Device memory of one MoE. rows: the expert rows this rank can hold (moe.hpp, "Memory").
struct MoE::Buffers {
  int rows = 0;       // R
  int capacity = 0;   // high throughput: rows the receive can hold (P x max_tokens)
  void* h = nullptr;    // [R, 2F] gate-up output (MoeGateUp::kGateThenUp only)
  void* act = nullptr;  // [R, F]
  // High throughput only:
  void* xg = nullptr;   // [R, H] received rows in expert-major order
  void* yg = nullptr;   // [R, H] the down GEMM's output, same order
  void* y = nullptr;    // [capacity, H] per received row, its experts' weighted sum (not with fused_combine)
  ops::moe::PlaceScratch place;  // [place_chunks x L] each
  int* counts = nullptr;   // [L] the GEMMs' (0 after an overflow)
  int* offsets = nullptr;  // [L]
  int* overflow = nullptr; // [1] pairs received beyond rows, or 0
  int* perm = nullptr;     // [R]
  int* pos_of = nullptr;   // [capacity x topk]
  // Overlap (high throughput): the sources' first places per expert [L][P + 1]; flags [1 + P]:
  // the layout's, then ready per source (EpExpertMajor); the gate-up GEMM's stream and the
  // events that fork it from the caller's stream and join it back.
  int* bounds = nullptr;
  uint64_t* flags = nullptr;
  // Direct dispatch: this rank's own entries placed over all E experts (EpExpertPlaces::send_pos)
  // and that placement's scratch and counts; xg and pos_of are then the EP window's.
  ops::moe::PlaceScratch own;  // [place_chunks(max_tokens x topk) x E] each
  int* own_pos = nullptr;      // [max_tokens x topk]
  int* own_counts = nullptr;   // [E]
  int* own_offsets = nullptr;  // [E]
  void** targets = nullptr;    // slot_combine: [R] each place's row in its token's rank (EpBuffer::slot_targets)
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  size_t bytes = 0;

  ~Buffers() {
    for (void* p : {h, act, xg, yg, y, (void*)place.chunk_counts, (void*)place.chunk_base, (void*)counts,
                    (void*)offsets, (void*)overflow, (void*)perm, (void*)pos_of, (void*)bounds, (void*)flags,
                    (void*)own.chunk_counts, (void*)own.chunk_base, (void*)own_pos, (void*)own_counts,
                    (void*)own_offsets, (void*)targets})
      if (p) cudaFree(p);
    if (fork) cudaEventDestroy(fork);
    if (join) cudaEventDestroy(join);
    if (side) cudaStreamDestroy(side);
  }
};

MoE::MoE(Comm& comm, const MoeConfig& cfg) : comm_(comm), cfg_(cfg) {
  const Status s = check_moe_config(cfg, comm.nranks(), comm.sm_count());
  TW_REQUIRE(s.ok, kInvalidArgument, s.reason);
  const int P = comm.nranks(), L = cfg.ep.num_experts / P, H = cfg.ep.hidden, F = cfg.ffn, k = cfg.ep.topk;
  local_experts_ = L;
  // Everything the GEMMs would refuse in forward(), refused here, before any collective step.
  int sms = 0;
  const Status dev = ops::sm90_device("moe", "tilewire's grouped GEMM", nullptr, &sms);
  TW_REQUIRE(dev.ok, kUnsupported, dev.reason);
  gemm_ = cfg.gemm;
  // The GEMMs run on this rank's SM budget: on a virtual team every rank's GEMM shares the GPU.
  gemm_.reserved_sms += gemm_impl::sms_outside_budget(comm);
  TW_REQUIRE(gemm_.reserved_sms <= sms - 2, kInvalidArgument,
             "moe: gemm.reserved_sms " + std::to_string(cfg.gemm.reserved_sms) + " leaves " +
                 std::to_string(sms - gemm_.reserved_sms) + " of this rank's SMs to the GEMMs; they need at least 2");
  if (gemm_.rows_hint == 0)
    gemm_.rows_hint = std::max(1, int((long long)P * cfg.ep.max_tokens_per_rank * k / cfg.ep.num_experts));
  const bool ht = cfg.ep.mode == EpMode::kHighThroughput;
  const long long capacity = (long long)P * cfg.ep.max_tokens_per_rank;
  const long long rows = !ht ? (long long)L * capacity : cfg.max_expert_rows > 0 ? cfg.max_expert_rows : capacity * k;
  const auto check_rows = [&] {
    TW_REQUIRE(rows <= (1ll << 30), kInvalidArgument,
               "moe: " + std::to_string(rows) + " expert rows per rank (experts x capacity) is too many; lower "
               "max_tokens_per_rank");
  };
  const bool direct = ht && cfg.direct_dispatch;
  const bool slots = direct && cfg.slot_combine;
  {  // every rank overlaps or none does (a placing dispatch waits for every rank's CTAs); the same
     // for the direct dispatch, whose senders place rows in every rank's area of `rows` rows, and
     // for the slot combine, whose down GEMMs store into every rank's slot rows
    constexpr int n = 4;
    const long long mine[n] = {cfg.overlap ? 1 : 0, direct ? 1 : 0, direct ? rows : 0, slots ? 1 : 0};
    const char* what[n] = {"overlap", "direct_dispatch", "max_expert_rows (with direct_dispatch: the rows of every "
                           "rank's area, 0 meaning capacity x topk)", "slot_combine"};
    std::vector<long long> all(size_t(P) * n, 0);
    comm.allgather_host(mine, all.data(), sizeof(mine));
    for (int q = 0; q < P; ++q)
      for (int i = 0; i < n; ++i)
        TW_REQUIRE(all[size_t(q) * n + i] == mine[i], kInvalidArgument,
                   std::string("moe: MoeConfig::") + what[i] + " differs across ranks: rank " + std::to_string(comm.rank()) +
                       " has " + std::to_string(mine[i]) + ", rank " + std::to_string(q) + " has " +
                       std::to_string(all[size_t(q) * n + i]) + "; every rank makes the MoE with the same config");
  }
  if (direct) check_rows();  // after the agreement: every rank has these rows, so every rank throws
  if (direct)
    TW_REQUIRE(comm_.all_lsa(), kInvalidArgument,
               "moe: direct_dispatch needs every peer in the LSA team (this communicator has GIN peers); set "
               "MoeConfig::direct_dispatch false");
  EpConfig ep = cfg.ep;  // with the overlap, the dispatch leaves an SM of the budget (check_moe_config)
  if (direct) ep.expert_major_rows = int(rows);  // the expert-major rows live in the window
  ep.combine_slots = slots;                      // and with slot_combine the rows that come back
  if (cfg.overlap && ep.mode == EpMode::kHighThroughput && ep.num_sms == 0)
    ep.num_sms = std::min(ep_default_sms(ep, comm.sm_count()), comm.sm_count() - 1);
  ep_ = std::make_unique<EpBuffer>(comm, ep);
  // The buffers come after the EpBuffer's collectives, so the ranks leave here together: every
  // rank's allocations are done (or every rank throws) before any rank returns. Otherwise a rank
  // could start a forward, whose dispatch spins until every peer arrives, while a peer still
  // allocates; on a virtual team (one CUDA context) that peer's cudaMalloc may wait for the
  // device (CUDA's implicit synchronization), so the peer never arrives.
  std::exception_ptr failed;
  try {  // this rank's buffers (moe.hpp, "Memory")
    buf_ = std::make_unique<Buffers>();
    Buffers& b = *buf_;
    check_rows();  // in here: a rank that throws still joins the agreement below
    b.rows = int(rows), b.capacity = int(capacity);
    if (cfg.gate_up == MoeGateUp::kGateThenUp) b.h = alloc<uint16_t>("h", size_t(rows) * 2 * F, &b.bytes);
    b.act = alloc<uint16_t>("act", size_t(rows) * F, &b.bytes);
    if (cfg.ep.mode == EpMode::kHighThroughput) {
      if (!direct) b.xg = alloc<uint16_t>("xg", size_t(rows) * H, &b.bytes);
      if (slots) {
        b.targets = alloc<void*>("targets", size_t(rows), &b.bytes);
      } else {
        b.yg = alloc<uint16_t>("yg", size_t(rows) * H, &b.bytes);
        if (!cfg.fused_combine) b.y = alloc<uint16_t>("y", size_t(capacity) * H, &b.bytes);  // the scatter's
      }
      if (direct) {
        const int E = cfg.ep.num_experts;
        const long long own = (long long)cfg.ep.max_tokens_per_rank * k;
        const size_t own_ints = size_t(ops::moe::place_chunks(own)) * E;
        b.own.chunk_counts = alloc<int>("own_chunk_counts", own_ints, &b.bytes);
        b.own.chunk_base = alloc<int>("own_chunk_base", own_ints, &b.bytes);
        b.own_pos = alloc<int>("own_pos", size_t(own), &b.bytes);
        b.own_counts = alloc<int>("own_counts", E, &b.bytes);
        b.own_offsets = alloc<int>("own_offsets", E, &b.bytes);
      } else {
        const size_t chunk_ints = size_t(ops::moe::place_chunks(capacity * k)) * L;
        b.place.chunk_counts = alloc<int>("chunk_counts", chunk_ints, &b.bytes);
        b.place.chunk_base = alloc<int>("chunk_base", chunk_ints, &b.bytes);
      }
      b.counts = alloc<int>("counts", L, &b.bytes);
      b.overflow = alloc<int>("overflow", 1, &b.bytes);
      StreamGuard init;  // never the legacy default stream (stream_guard.hpp)
      TW_CUDA_CHECK(cudaMemsetAsync(b.overflow, 0, sizeof(int), init.s));
      TW_CUDA_CHECK(cudaStreamSynchronize(init.s));
      b.offsets = alloc<int>("offsets", L, &b.bytes);
      if (!direct) {
        b.perm = alloc<int>("perm", size_t(rows), &b.bytes);
        b.pos_of = alloc<int>("pos_of", size_t(capacity) * k, &b.bytes);
      }
      if (cfg.overlap) {
        TW_REQUIRE(comm_.all_lsa(), kInvalidArgument,
                   "moe: overlap needs every peer in the LSA team (this communicator has GIN peers); set "
                   "MoeConfig::overlap false");
        b.bounds = alloc<int>("bounds", size_t(L) * (P + 1), &b.bytes);
        b.flags = alloc<uint64_t>("flags", size_t(P) + 1, &b.bytes);
        TW_CUDA_CHECK(cudaStreamCreateWithFlags(&b.side, cudaStreamNonBlocking));
        TW_CUDA_CHECK(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
        TW_CUDA_CHECK(cudaEventCreateWithFlags(&b.join, cudaEventDisableTiming));
      }
    }
  } catch (...) {
    failed = std::current_exception();
  }
  std::vector<int> bad(size_t(P), 0);
  const int mine_bad = failed ? 1 : 0;
  comm.allgather_host(&mine_bad, bad.data(), sizeof(int));
  if (failed) std::rethrow_exception(failed);
  for (int q = 0; q < P; ++q)
    TW_REQUIRE(bad[size_t(q)] == 0, kState,
               "moe: rank " + std::to_string(q) + " could not make its buffers (its own error says why); no rank "
               "made the MoE");
}

MoE::~MoE() = default;

void interleave_gate_up(const void* w, void* out, int L, int F, int H, cudaStream_t stream) {
  TW_REQUIRE(L >= 0 && F >= 0 && H >= 0, kInvalidArgument,
             "interleave_gate_up: L " + std::to_string(L) + ", F " + std::to_string(F) + ", H " + std::to_string(H) +
                 " must not be negative");
  TW_REQUIRE(F % 8 == 0 && H % 8 == 0, kInvalidArgument,
             "interleave_gate_up: F " + std::to_string(F) + " and H " + std::to_string(H) + " must be multiples of 8");
  const size_t bytes = size_t(L) * 2 * F * H * 2;
  if (bytes == 0) return;
  TW_REQUIRE(w && out, kInvalidArgument, std::string("interleave_gate_up: ") + (w ? "out" : "w") + " is null");
  TW_REQUIRE(aligned16(w) && aligned16(out), kInvalidArgument,
             std::string("interleave_gate_up: ") + (aligned16(w) ? "out" : "w") + " is not 16-byte aligned");
  const auto a = reinterpret_cast<uintptr_t>(w), o = reinterpret_cast<uintptr_t>(out);
  TW_REQUIRE(a + bytes <= o || o + bytes <= a, kInvalidArgument,
             "interleave_gate_up: out overlaps w (the reorder is out of place)");
  ops::moe::interleave_gate_up(w, out, L, F, H, stream);
}

void MoE::check(cudaStream_t stream) {
  ep_->check(stream);  // synchronizes the stream
  if (!buf_->overflow) return;
  int over = 0;
  TW_CUDA_CHECK(cudaMemcpyAsync(&over, buf_->overflow, sizeof(int), cudaMemcpyDeviceToHost, stream));
  TW_CUDA_CHECK(cudaStreamSynchronize(stream));
  TW_REQUIRE(over == 0, kInvalidArgument,
             "moe: rank " + std::to_string(comm_.rank()) + " received " + std::to_string(over) +
                 " (row, expert) pairs, more than max_expert_rows " + std::to_string(buf_->rows) +
                 "; its experts computed nothing in that call (raise MoeConfig::max_expert_rows)");
}

size_t MoE::bytes() const { return ep_->bytes() + buf_->bytes; }

void MoE::forward(const MoeArgs& a, cudaStream_t stream) {
  const int H = cfg_.ep.hidden, F = cfg_.ffn, L = local_experts_, k = cfg_.ep.topk;
  const int N = a.num_tokens;
  TW_REQUIRE(N >= 0 && N <= cfg_.ep.max_tokens_per_rank, kInvalidArgument,
             "moe: num_tokens " + std::to_string(N) + " is outside [0, max_tokens_per_rank " +
                 std::to_string(cfg_.ep.max_tokens_per_rank) + "]");
  TW_REQUIRE(a.w_gate_up && a.w_down, kInvalidArgument,
             std::string("moe: ") + (a.w_gate_up ? "w_down" : "w_gate_up") + " is null ([L, 2F, H] / [L, H, F] bf16)");
  TW_REQUIRE(aligned16(a.w_gate_up) && aligned16(a.w_down), kInvalidArgument,
             "moe: the weights must be 16-byte aligned");
  if (N > 0) {
    TW_REQUIRE(a.x && a.topk_idx && a.topk_weights && a.out, kInvalidArgument,
               std::string("moe: ") + (!a.x ? "x" : !a.topk_idx ? "topk_idx" : !a.topk_weights ? "topk_weights" : "out") +
                   " is null with num_tokens " + std::to_string(N));
    TW_REQUIRE(aligned16(a.x) && aligned16(a.out), kInvalidArgument, "moe: x and out must be 16-byte aligned");
  }
  Buffers& b = *buf_;
  GroupedGemmArgs up, down;
  up.groups = down.groups = L;
  up.B = a.w_gate_up, up.N = 2 * F, up.K = H;
  down.B = a.w_down, down.N = H, down.K = F;
  // kInterleaved8: the gate-up GEMM writes the activation itself (GroupedEpilogue::kSwiGlu).
  const bool swiglu = cfg_.gate_up == MoeGateUp::kInterleaved8;
  up.C = swiglu ? b.act : b.h, down.A = b.act;
  up.epilogue = swiglu ? GroupedEpilogue::kSwiGlu : GroupedEpilogue::kStore;
  auto activation = [&](const int* counts, const int* offsets, int group_rows, int max_count) {
    if (!swiglu) ops::moe::silu_mul(b.h, counts, offsets, group_rows, L, F, max_count, b.act, stream);
  };

  if (cfg_.ep.mode == EpMode::kLowLatency) {
    ep_->dispatch_send(EpLowLatencyArgs{a.x, N, a.topk_idx, a.index_type}, stream);
    const EpLowLatencyRecv r = ep_->dispatch_recv(stream);
    // Expert l's rows: [l, 0 .. count[l]) of the receive block, the same rows of h, act and y.
    for (GroupedGemmArgs* g : {&up, &down}) {
      g->counts = r.count;
      g->rows = b.rows, g->group_rows = r.capacity;
    }
    up.A = r.x, down.C = r.y;
    grouped_gemm(up, gemm_, stream);
    activation(r.count, nullptr, r.capacity, r.capacity);
    grouped_gemm(down, gemm_, stream);
    ep_->combine_send(r.y, stream);
    ep_->combine_recv(a.topk_weights, a.out, stream);
    return;
  }

  EpDispatchArgs d;
  d.x = a.x, d.num_tokens = N, d.topk_idx = a.topk_idx, d.index_type = a.index_type, d.topk_weights = a.topk_weights;
  if (cfg_.overlap) {
    forward_overlapped(a, d, up, down, stream);
    return;
  }
  if (cfg_.direct_dispatch) {
    forward_direct(a, d, up, down, stream);
    return;
  }
  const EpRecv r = ep_->dispatch(d, stream);
  ops::moe::place_rows(r.topk_idx, r.num_recv, k, L, b.rows, (long long)b.capacity * k, b.place, b.counts, b.offsets,
                       b.perm, b.pos_of, b.overflow, stream);
  ops::moe::gather_rows(r.x, b.pos_of, r.num_recv, k, H, b.capacity, b.xg, stream);
  for (GroupedGemmArgs* g : {&up, &down}) {
    g->counts = b.counts, g->offsets = b.offsets;
    g->rows = b.rows;
  }
  up.A = b.xg, down.C = b.yg;
  grouped_gemm(up, gemm_, stream);
  activation(b.counts, b.offsets, 0, b.rows);
  grouped_gemm(down, gemm_, stream);
  combine_ht(a, r, b.pos_of, stream);
}

// High throughput, the direct dispatch: this rank's entries placed in its own expert-major order
// (send_pos), the dispatch storing each row at its first place in the receiver's area, then here
// the rows copied to their other places; the GEMMs read the area in the window.
void MoE::forward_direct(const MoeArgs& a, const EpDispatchArgs& d, GroupedGemmArgs& up, GroupedGemmArgs& down,
                         cudaStream_t stream) {
  const int H = cfg_.ep.hidden, L = local_experts_, k = cfg_.ep.topk, N = a.num_tokens;
  Buffers& b = *buf_;
  // The layout first, as its own call: it orders `stream` after the communicator's last call, so
  // the placement below cannot overwrite own_pos while an earlier call's dispatch still reads it.
  ep_->layout(a.topk_idx, a.index_type, N, stream);
  if (N > 0)
    ops::moe::place_own_rows(a.topk_idx, a.index_type == EpIndex::kInt64, N, k, cfg_.ep.num_experts, b.own,
                             b.own_counts, b.own_offsets, b.own_pos, stream);
  EpDispatchArgs dd = d;
  dd.reuse_layout = true;
  EpExpertPlaces ex;
  ex.send_pos = b.own_pos, ex.counts = b.counts, ex.offsets = b.offsets, ex.overflow = b.overflow;
  const EpRecv r = ep_->dispatch(dd, ex, stream);
  ops::moe::copy_to_places(r.expert_x, r.expert_pos, r.num_recv, k, H, b.capacity, stream);
  for (GroupedGemmArgs* g : {&up, &down}) {
    g->counts = b.counts, g->offsets = b.offsets;
    g->rows = b.rows;
  }
  up.A = r.expert_x, down.C = b.yg;
  if (b.targets) {  // slot_combine: each output row straight into its token's rank
    ep_->slot_targets(b.targets, b.rows, stream);
    down.C = b.targets, down.epilogue = GroupedEpilogue::kRowTargets;
  }
  grouped_gemm(up, gemm_, stream);
  if (up.epilogue == GroupedEpilogue::kStore)
    ops::moe::silu_mul(b.h, b.counts, b.offsets, 0, L, cfg_.ffn, b.rows, b.act, stream);
  grouped_gemm(down, gemm_, stream);
  if (b.targets) ep_->combine_slots(a.topk_idx, a.index_type, a.topk_weights, a.out, stream);
  else combine_ht(a, r, r.expert_pos, stream);
}

// High throughput with the overlap: the dispatch (placing the pairs source by source) on `stream`,
// and beside it, on the side stream forked before the dispatch, the gate-up GEMM, which waits on
// the device. Why it cannot hang:
//   * the GEMM's preparation (one CTA, spinning on one SM) waits for layout_flag, which the
//     dispatch raises only once every rank's dispatch CTAs are running; those CTAs take an SM
//     each (their registers), and num_sms <= budget - 1 (check_moe_config) leaves every rank's
//     preparation an SM of its own share, so all of them fit at once;
//   * so no GEMM CTA (a whole SM) can hold an SM a dispatch CTA still needs; the GEMM's tiles
//     wait only for those CTAs (ready), and they only for each other.
// Each rank's streams need hardware queues of their own (CUDA_DEVICE_MAX_CONNECTIONS at least the
// streams in use on the GPU), as for every fused op on a virtual team. The dispatch is enqueued
// first, so the checks that can throw have passed before anything waits on the device.
void MoE::forward_overlapped(const MoeArgs& a, const EpDispatchArgs& d, GroupedGemmArgs& up, GroupedGemmArgs& down,
                             cudaStream_t stream) {
  const int F = cfg_.ffn, L = local_experts_, P = comm_.nranks();
  Buffers& b = *buf_;
  // Zeroed before the dispatch and the GEMM that use them (the last call's GEMM, which read them,
  // joined `stream` before that call returned).
  TW_CUDA_CHECK(cudaMemsetAsync(b.flags, 0, sizeof(uint64_t) * (P + 1), stream));
  TW_CUDA_CHECK(cudaEventRecord(b.fork, stream));
  EpExpertMajor em;
  em.xg = b.xg, em.max_rows = b.rows, em.counts = b.counts, em.offsets = b.offsets, em.bounds = b.bounds;
  em.perm = b.perm, em.pos_of = b.pos_of, em.overflow = b.overflow, em.layout_flag = b.flags, em.ready = b.flags + 1;
  const EpRecv r = ep_->dispatch(d, em, stream);

  for (GroupedGemmArgs* g : {&up, &down}) {
    g->counts = b.counts, g->offsets = b.offsets;
    g->rows = b.rows;
  }
  up.A = b.xg, down.C = b.yg;
  grouped_impl::RowGate gate;
  gate.flags = b.flags + 1, gate.bounds = b.bounds, gate.sources = P;
  gate.want = uint64_t(ep_->num_sms()), gate.layout_flag = b.flags;
  gate.ctx = comm_.dev_ctx();
  gate.ring = trace_;
  {
    // The side stream joins `stream` on every way out, a throw included (a capture must end joined).
    struct Join {
      Buffers& b;
      cudaStream_t stream;
      ~Join() {
        cudaEventRecord(b.join, b.side);
        cudaStreamWaitEvent(stream, b.join, 0);
      }
    };
    TW_CUDA_CHECK(cudaStreamWaitEvent(b.side, b.fork, 0));
    const Join join{b, stream};
    grouped_impl::grouped_gemm_gated(up, gemm_, gate, b.side);
  }
  TW_CUDA_CHECK(cudaGetLastError());
  if (up.epilogue == GroupedEpilogue::kStore) ops::moe::silu_mul(b.h, b.counts, b.offsets, 0, L, F, b.rows, b.act, stream);
  grouped_gemm(down, gemm_, stream);
  combine_ht(a, r, b.pos_of, stream);
}

// The experts' rows back to their tokens: summed per received row by a scatter, then combined;
// or (fused_combine) summed by the combine as it sends them.
void MoE::combine_ht(const MoeArgs& a, const EpRecv& r, const int* pos_of, cudaStream_t stream) {
  Buffers& b = *buf_;
  if (cfg_.fused_combine) {
    ep_->combine(EpExpertRows{b.yg, pos_of, r.topk_weights}, a.out, stream);
    return;
  }
  ops::moe::scatter_rows(b.yg, pos_of, r.topk_weights, r.num_recv, cfg_.ep.topk, cfg_.ep.hidden, b.capacity, b.y,
                         stream);
  ep_->combine(b.y, nullptr, a.out, stream);
}

void MoE::set_trace(const trace::Ring& ring) {
  ep_->set_trace(ring);
  trace_ = ring;
  trace_.rank = uint16_t(comm_.rank());
}

}  // namespace tw
