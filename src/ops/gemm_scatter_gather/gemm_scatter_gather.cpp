// tw::gemm_reducescatter and tw::allgather_gemm (tilewire/ops/gemm_scatter_gather.hpp): the
// checks, the workspace layout and the sequential path; gemm_reducescatter's fused path is the
// fused all-reduce's relay or owner kernel on the shards (reducescatter_fused.cpp, on the
// fused-GEMM engine), at M <= 256 the plain GEMM and a reduce kernel (reducescatter_decode.cu);
// allgather_gemm's is the GEMM pulling the shards from the peers' workspaces, at M <= 256 a
// gather kernel and the plain GEMM (allgather_fused.cu).
//
// Workspace (one rank; same layout and offset on every rank):
//   gemm_reducescatter   [0, P S N e)       the partial A_r B_r, padded to P S rows (the rows past M
//                                           are never read into an output)
//                        [.., + S N e)      the shard's sum when this rank holds fewer than S rows
//                                           (copied into C_shard afterwards)
//   allgather_gemm       [0, P S K e)       the gathered A (rows past M never read by the GEMM)
//                        [.., + S K e)      this rank's shard padded to S rows when it holds fewer;
//                                           the fused path's P arrival flags (fused.hpp)
// Reuse across calls is the collectives' own rule: reduce_scatter's exit barrier ends every
// peer's reads of this rank's partial before the call ends here; all_gather's entry barrier
// starts every peer's stores into the gathered A only after this rank's stream finished the
// last GEMM that read it.
#include "tilewire/ops/gemm_scatter_gather.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "../../runtime/op_entry.hpp"
#include "../fused_gemm/cost_model.hpp"
#include "../gemm/scratch.hpp"
#include "../gemm/team_gemm.hpp"
#include "../gemm_allreduce/plan.hpp"
#include "../sm90.hpp"
#include "fused.hpp"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace {

constexpr int kTileRows = 128;  // the GEMM's tile height: shards are whole tiles
constexpr size_t kAlign = 256;
size_t up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

Status fail(const char* op, const std::string& why) { return Status{false, std::string(op) + ": " + why}; }

bool built_dtype(DType d) { return d == DType::kBFloat16 || d == DType::kFloat16; }

// kAuto's test: the fused path where the cost model (src/ops/fused_gemm/cost_model.hpp) predicts
// it faster than the sequential path on H200 NVLink by its margin, for this call's local GEMM
// (M x N x K: the reduce-scatter's A_r B_r, the all-gather's gathered A times B_r), on 2 to 8
// ranks (the model's range); its GEMM time is the model's estimate, the fused kernel's overhead
// the one measured (default_overhead). Every rank decides alike: the same arguments.
bool model_prefers_fused(fused_gemm::FusedOp op, int M, int N, int K, DType dtype, int P) {
  if (P < 2 || P > 8) return false;
  const fused_gemm::Shape s{M, N, K, (int)dtype_size(dtype)};
  try {
    const double t = fused_gemm::estimate_gemm_us(s.M, s.N, s.K, s.dtype_bytes);
    return fused_gemm::prefers_fused(fused_gemm::predict(op, s, P, t, fused_gemm::default_overhead(op, s, P)));
  } catch (const Error&) {
    return false;  // a shape the model does not cover: the sequential path
  }
}

Status check_common(const char* op, int M, int rank, int P, DType dtype, const void* ws, const TpConfig& cfg) {
  if (P < 1 || rank < 0 || rank >= P) return fail(op, "rank " + std::to_string(rank) + " of " + std::to_string(P));
  if (M <= 0) return fail(op, "M = " + std::to_string(M) + " (must be > 0)");
  if (!built_dtype(dtype))
    return fail(op, std::string("dtype ") + dtype_name(dtype) + " is not built (bfloat16 or float16, A, B and C alike)");
  if (cfg.reserved_sms < 0) return fail(op, "reserved_sms " + std::to_string(cfg.reserved_sms) + " < 0");
  if (ws == nullptr) return fail(op, "workspace is null");
  if (reinterpret_cast<uintptr_t>(ws) % 16 != 0) return fail(op, "workspace is not 16-byte aligned");
  return Status{};
}

// [p, p + bytes) and [q, q + qbytes) share a byte.
bool overlap(const void* p, size_t bytes, const void* q, size_t qbytes) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return p && q && bytes && qbytes && a < b + qbytes && b < a + bytes;
}

std::string at(const Comm& comm, const void* p, size_t bytes, const char* what) {
  const WindowRef w = comm.find_window(p, bytes, what);
  return "window " + std::to_string(w.ordinal) + " offset " + std::to_string(w.offset);
}

}  // namespace

namespace tp_impl {

AgFusedLayout ag_fused_layout(int M, int K, DType dtype, int P) {
  AgFusedLayout l;
  const size_t S = (size_t)shard_rows(M, P), e = dtype_size(dtype);
  const int units = (int)(S / kTileRows);
  for (int d = std::min(units, kMaxChunks); d > 1; --d)
    if (units % d == 0 && S / d * K * e >= (size_t(1) << 20)) {
      l.chunks = d;
      break;
    }
  l.flags_off = up((size_t)P * S * K * e);
  l.total = l.flags_off + up((size_t)P * l.chunks * 8);
  return l;
}

int ag_push_ctas(int S, int K, DType dtype, bool virtual_team, int max_blocks) {
  const size_t bytes = (size_t)S * K * dtype_size(dtype);
  const int g = (int)std::clamp<size_t>(bytes >> 20, 1, 16);
#ifdef TILEWIRE_BENCH_KERNELS
  // Measurement only: the push's CTAs on a virtual team (its bandwidth sets the fused call's time
  // there: docs/fused_gemm.md, "Where the time went").
  static const int forced = (int)env::get_int("TILEWIRE_AG_PUSH_CTAS");
  if (virtual_team && forced > 0) return std::max(1, std::min({forced, 16, max_blocks}));
#endif
  return std::max(1, std::min({g, virtual_team ? 2 : g, max_blocks}));
}

}  // namespace tp_impl

int shard_rows(int M, int P) {
  if (M <= 0 || P <= 0) return 0;
  const int per = (M + P - 1) / P;
  return (per + kTileRows - 1) / kTileRows * kTileRows;
}

int shard_rows_of(int M, int P, int r) {
  const long long S = shard_rows(M, P), lo = S * r, hi = std::min<long long>(M, S * (r + 1));
  return hi > lo ? (int)(hi - lo) : 0;
}

size_t gemm_reducescatter_workspace_size(int M, int N, DType dtype, int P) {
  const size_t S = (size_t)shard_rows(M, P), e = dtype_size(dtype);
  const size_t sequential = up((size_t)P * S * N * e) + up(S * N * e);
  if (M <= 0 || N <= 0 || P <= 0) return sequential;
  // The fused path's flags and staging on the tile it runs (the size does not depend on the raster).
  const size_t fused = gemm_allreduce_impl::make_scatter_layout(M, N, P, gemm_impl::Raster::kAlongM, 2, (int)S,
                                                                gemm_allreduce_impl::scatter_tile_is_decode(M))
                           .total;
  // The relay kernel's (bf16 on a rotated walk: a slot per tile); the same size for every dtype, so
  // that the size depends only on the shape.
  const int units = gemm_impl::ceil_div(gemm_impl::ceil_div(M, gemm_allreduce_impl::kBlkM), 2) *
                    gemm_impl::ceil_div(N, gemm_allreduce_impl::kBlkN);
  const size_t relay = gemm_allreduce_impl::make_relay_layout(M, N, gemm_impl::Raster::kAlongN, units, P, (int)S, 0, 0,
                                                              gemm_allreduce_impl::relay_slots_padded())
                           .total;
  return std::max({sequential, fused, relay});
}

size_t allgather_gemm_workspace_size(int M, int K, DType dtype, int P) {
  const size_t S = (size_t)shard_rows(M, P), e = dtype_size(dtype);
  return up((size_t)P * S * K * e) + up(S * K * e);
}

// ------------------------------------------------------------------------ reduce-scatter
Status check_gemm_reducescatter_args(const GemmReduceScatterArgs& a, int rank, int P, const TpConfig& cfg) {
  const char* op = "gemm_reducescatter";
  if (Status s = check_common(op, a.M, rank, P, a.dtype, a.workspace, cfg); !s) return s;
  const int rows = shard_rows_of(a.M, P, rank);
  // The GEMM's view: the partial, all P S rows of it (M rows computed), into the workspace.
  GemmArgs g{a.A, a.B, a.workspace, a.M, a.N, a.K_local, a.dtype, a.b_layout};
  if (Status s = can_implement(g); !s) return fail(op, s.reason);
  if (rows > 0 && a.C_shard == nullptr) return fail(op, "C_shard is null (rank " + std::to_string(rank) + " holds " +
                                                            std::to_string(rows) + " rows)");
  if (rows > 0 && reinterpret_cast<uintptr_t>(a.C_shard) % 16 != 0) return fail(op, "C_shard is not 16-byte aligned");
  const size_t e = dtype_size(a.dtype), ws = gemm_reducescatter_workspace_size(a.M, a.N, a.dtype, P);
  const size_t c_bytes = (size_t)rows * a.N * e;
  for (auto [p, bytes, what] : {std::tuple{a.A, (size_t)a.M * a.K_local * e, "A"},
                                std::tuple{a.B, (size_t)a.N * a.K_local * e, "B"}})
    if (overlap(a.workspace, ws, p, bytes) || overlap(a.C_shard, c_bytes, p, bytes))
      return fail(op, std::string(what) + " overlaps the workspace or C_shard");
  if (overlap(a.workspace, ws, a.C_shard, c_bytes)) return fail(op, "C_shard overlaps the workspace");
  return Status{};
}

namespace {
// The path a reduce-scatter runs: cfg.path, kAuto resolved (model_prefers_fused, where the fused
// kernel can run here).
TpPath path_for(const Comm& comm, const GemmReduceScatterArgs& a, const TpConfig& cfg) {
  if (cfg.path != TpPath::kAuto) return cfg.path;
  const int P = comm.nranks();
  const bool fuse = model_prefers_fused(fused_gemm::FusedOp::kGemmReduceScatter, a.M, a.N, a.K_local, a.dtype, P) &&
                    gemm_allreduce_impl::scatter_can_fuse(comm, a.b_layout, a.dtype, a.M, shard_rows(a.M, P)).ok;
  return fuse ? TpPath::kFused : TpPath::kSequential;
}
}  // namespace

Status can_implement(const Comm& comm, const GemmReduceScatterArgs& a, const TpConfig& cfg) {
  const char* op = "gemm_reducescatter";
  if (Status s = check_gemm_reducescatter_args(a, comm.rank(), comm.nranks(), cfg); !s) return s;
  if (!comm.all_lsa())
    return fail(op, "every rank must be in the LSA team (" + std::to_string(comm.lsa_size()) + " of " +
                        std::to_string(comm.nranks()) + "): its reduce-scatter is LSA only");
  if (cfg.path == TpPath::kFused)
    if (Status s = gemm_allreduce_impl::scatter_can_fuse(comm, a.b_layout, a.dtype, a.M, shard_rows(a.M, comm.nranks())); !s)
      return s;  // its reason names the op
  try {
    (void)comm.find_window(a.workspace, gemm_reducescatter_workspace_size(a.M, a.N, a.dtype, comm.nranks()), "workspace");
  } catch (const Error& e) {
    return fail(op, e.what());
  }
  return Status{};
}

void gemm_reducescatter(Comm& comm, const GemmReduceScatterArgs& a, const TpConfig& cfg, cudaStream_t stream) {
  const char* op = "gemm_reducescatter";
  const int P = comm.nranks(), S = shard_rows(a.M, P), rows = shard_rows_of(a.M, P, comm.rank());
  const size_t e = dtype_size(a.dtype), part_bytes = up((size_t)P * S * a.N * e);
  TpPath path = TpPath::kSequential;
  const auto check = [&] {
    if (Status s = can_implement(comm, a, cfg); !s) return s;
    path = path_for(comm, a, cfg);  // on checked arguments
    return Status{};
  };
  const OpEntry entry(comm, op, stream, check, [&] {
    const auto num = [](long long v) { return std::to_string(v); };
    comm.agree_on_call(op, {{"M", num(a.M)},
                            {"N", num(a.N)},
                            {"K_local", num(a.K_local)},
                            {"dtype", dtype_name(a.dtype)},
                            {"B layout", blayout_name(a.b_layout)},
                            {"path", tp_path_name(path)},
                            {"workspace", at(comm, a.workspace, part_bytes, "workspace")}});
  });
  // One rank has nothing to communicate: the fused path is the GEMM alone (below), unless traced
  // (the trace shows the fused kernel's tiles).
  if (path == TpPath::kFused && P > 1 && gemm_allreduce_impl::scatter_tile_is_decode(a.M)) {
    tp_impl::fused_reducescatter_decode(comm, a, cfg, stream);
    return;
  }
  if (path == TpPath::kFused && (P > 1 || cfg.trace.on())) {
    // A rank that holds no rows owns no tile: the hook never stores through its C.
    void* c = rows > 0 ? a.C_shard : a.workspace;
    gemm_allreduce_impl::fused_reducescatter(comm, GemmArgs{a.A, a.B, c, a.M, a.N, a.K_local, a.dtype, a.b_layout}, S,
                                             cfg.reserved_sms, a.workspace, cfg.trace, stream);
    return;
  }
  if (P == 1) {  // the sum of one partial: the GEMM straight into C_shard (all M rows), the workspace untouched
    gemm_impl::team_gemm(comm, GemmArgs{a.A, a.B, a.C_shard, a.M, a.N, a.K_local, a.dtype, a.b_layout},
                         cfg.reserved_sms, stream);
    return;
  }
  gemm_allreduce_impl::note_sequential_use(comm, a.workspace, part_bytes, stream);  // the partial covers the flags
  char* partial = static_cast<char*>(a.workspace);
  gemm_impl::team_gemm(comm, GemmArgs{a.A, a.B, partial, a.M, a.N, a.K_local, a.dtype, a.b_layout}, cfg.reserved_sms,
                       stream);
  // A rank with fewer than S rows takes its shard's sum into the workspace, then its rows.
  void* recv = rows == S ? a.C_shard : partial + part_bytes;
  reduce_scatter(comm, partial, recv, (size_t)S * a.N, a.dtype, stream);
  if (rows < S && rows > 0)
    TW_CUDA_CHECK(cudaMemcpyAsync(a.C_shard, recv, (size_t)rows * a.N * e, cudaMemcpyDeviceToDevice, stream));
}

// ------------------------------------------------------------------------ all-gather
Status check_allgather_gemm_args(const AllGatherGemmArgs& a, int rank, int P, const TpConfig& cfg) {
  const char* op = "allgather_gemm";
  if (Status s = check_common(op, a.M, rank, P, a.dtype, a.workspace, cfg); !s) return s;
  const int rows = shard_rows_of(a.M, P, rank);
  GemmArgs g{a.workspace, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout};
  if (Status s = can_implement(g); !s) return fail(op, s.reason);
  if (rows > 0 && a.A_shard == nullptr) return fail(op, "A_shard is null (rank " + std::to_string(rank) + " holds " +
                                                            std::to_string(rows) + " rows)");
  if (rows > 0 && reinterpret_cast<uintptr_t>(a.A_shard) % 16 != 0) return fail(op, "A_shard is not 16-byte aligned");
  if (a.A_gathered != nullptr && reinterpret_cast<uintptr_t>(a.A_gathered) % 16 != 0)
    return fail(op, "A_gathered is not 16-byte aligned");
  const size_t e = dtype_size(a.dtype), ws = allgather_gemm_workspace_size(a.M, a.K, a.dtype, P);
  const size_t c_bytes = (size_t)a.M * a.N_local * e, ag_bytes = (size_t)a.M * a.K * e;
  for (auto [p, bytes, what] : {std::tuple{(const void*)a.C, c_bytes, "C"},
                                std::tuple{(const void*)a.A_gathered, ag_bytes, "A_gathered"}}) {
    if (overlap(a.workspace, ws, p, bytes)) return fail(op, std::string(what) + " overlaps the workspace");
    if (overlap(a.A_shard, (size_t)rows * a.K * e, p, bytes) || overlap(a.B, (size_t)a.N_local * a.K * e, p, bytes))
      return fail(op, std::string(what) + " overlaps A_shard or B");
  }
  if (overlap(a.C, c_bytes, a.A_gathered, ag_bytes)) return fail(op, "C overlaps A_gathered");
  return Status{};
}

namespace {
// Whether the all-gather's fused path can run here: its GEMM is the sm_90a hook kernel, whose TMA
// loads read the peers' copies of the workspace (16-byte aligned offsets and LSA stride).
Status ag_fused_usable(const Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg) {
  const char* op = "allgather_gemm";
  int sms = 0;
  if (Status s = ops::sm90_device(op, "the fused path's GEMM", nullptr, &sms); !s) return s;
  const int free_sms = comm.sm_count() - cfg.reserved_sms;
  if (free_sms < 2)
    return fail(op, "the fused path's GEMM needs at least 2 SMs; " + std::to_string(comm.sm_count()) + " SMs, " +
                        std::to_string(cfg.reserved_sms) + " reserved leave " + std::to_string(free_sms));
  WindowRef w;
  try {
    w = comm.find_window(a.workspace, allgather_gemm_workspace_size(a.M, a.K, a.dtype, comm.nranks()), "workspace");
  } catch (const Error&) {
    return Status{};  // can_implement reports the workspace
  }
  // Holds wherever the workspace pointer is 16-byte aligned (checked above): NCCL's LSA strides
  // are 4 GiB multiples and a virtual team's 256-byte multiples. Checked for any other backend.
  if (!tp_impl::ag_pull_aligned(w))
    return fail(op, "workspace: the fused path's GEMM loads every rank's copy of it with TMA, which needs 16-byte "
                    "alignment; its offset in the window is " + std::to_string(w.offset) + " and the window's copies are " +
                        std::to_string(w.win.lsa_stride) + " bytes apart (window sizes and offsets multiples of 16 fix it)");
  return Status{};
}

// The path an all-gather + GEMM runs: cfg.path, kAuto resolved (model_prefers_fused, where the
// fused path can run here).
TpPath path_for(const Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg) {
  if (cfg.path != TpPath::kAuto) return cfg.path;
  const bool fuse = model_prefers_fused(fused_gemm::FusedOp::kAllGatherGemm, a.M, a.N_local, a.K, a.dtype, comm.nranks()) &&
                    ag_fused_usable(comm, a, cfg).ok;
  return fuse ? TpPath::kFused : TpPath::kSequential;
}
}  // namespace

Status can_implement(const Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg) {
  const char* op = "allgather_gemm";
  if (Status s = check_allgather_gemm_args(a, comm.rank(), comm.nranks(), cfg); !s) return s;
  if (!comm.all_lsa())
    return fail(op, "every rank must be in the LSA team (" + std::to_string(comm.lsa_size()) + " of " +
                        std::to_string(comm.nranks()) + "): its all-gather is LSA only");
  if (cfg.path == TpPath::kFused)
    if (Status s = ag_fused_usable(comm, a, cfg); !s) return s;
  try {
    (void)comm.find_window(a.workspace, allgather_gemm_workspace_size(a.M, a.K, a.dtype, comm.nranks()), "workspace");
  } catch (const Error& e) {
    return fail(op, e.what());
  }
  return Status{};
}

void allgather_gemm(Comm& comm, const AllGatherGemmArgs& a, const TpConfig& cfg, cudaStream_t stream) {
  const char* op = "allgather_gemm";
  const int P = comm.nranks(), S = shard_rows(a.M, P), rows = shard_rows_of(a.M, P, comm.rank());
  const size_t e = dtype_size(a.dtype), gathered_bytes = up((size_t)P * S * a.K * e);
  TpPath path = TpPath::kSequential;
  const auto check = [&] {
    if (Status s = can_implement(comm, a, cfg); !s) return s;
    path = path_for(comm, a, cfg);  // on checked arguments
    return Status{};
  };
  const OpEntry entry(comm, op, stream, check, [&] {
    const auto num = [](long long v) { return std::to_string(v); };
    comm.agree_on_call(op, {{"M", num(a.M)},
                            {"N_local", num(a.N_local)},
                            {"K", num(a.K)},
                            {"dtype", dtype_name(a.dtype)},
                            {"B layout", blayout_name(a.b_layout)},
                            {"path", tp_path_name(path)},
                            {"workspace", at(comm, a.workspace, gathered_bytes, "workspace")}});
  });
  gemm_allreduce_impl::note_sequential_use(comm, a.workspace, gathered_bytes, stream);  // a fused call after it re-initializes
  // One rank has nothing to gather: the fused path is the GEMM on the shard (below), unless traced.
  if (path == TpPath::kFused && (P > 1 || cfg.trace.on())) {
    tp_impl::fused_allgather_gemm(comm, a, cfg, stream);
    return;
  }
  if (P == 1) {  // the gathered A is the shard: the GEMM reads it where it is, A_gathered copied beside it
    tp_impl::gemm_with_copy_beside(comm, a.A_gathered, a.A_shard, (size_t)a.M * a.K * e, stream, [&] {
      gemm_impl::team_gemm(comm, GemmArgs{a.A_shard, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout},
                           cfg.reserved_sms, stream);
    });
    return;
  }
  char* gathered = static_cast<char*>(a.workspace);
  // A rank with fewer than S rows sends its shard padded to S rows (the padding is never read),
  // from the stream's scratch: nothing is written into the workspace before all_gather's barrier,
  // since a peer's earlier fused call (another shape) may still be loading rows there.
  if (rows < S) {
    gemm_impl::ScratchLease pad = gemm_impl::lease_scratch(stream, (size_t)S * a.K * e);
    pad.overwritten();  // all_gather's send, not a stream-K GEMM's counters
    if (rows > 0)
      TW_CUDA_CHECK(cudaMemcpyAsync(pad.data(), a.A_shard, (size_t)rows * a.K * e, cudaMemcpyDeviceToDevice, stream));
    all_gather(comm, pad.data(), gathered, (size_t)S * a.K, a.dtype, stream);
  } else {
    all_gather(comm, a.A_shard, gathered, (size_t)S * a.K, a.dtype, stream);
  }
  gemm_impl::team_gemm(comm, GemmArgs{gathered, a.B, a.C, a.M, a.N_local, a.K, a.dtype, a.b_layout}, cfg.reserved_sms,
                       stream);
  if (a.A_gathered != nullptr)
    TW_CUDA_CHECK(cudaMemcpyAsync(a.A_gathered, gathered, (size_t)a.M * a.K * e, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace tw
