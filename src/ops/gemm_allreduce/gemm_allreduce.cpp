// tw::gemm_allreduce(): checks (plan.cpp + communicator + device), the path (fused or sequential),
// residency, then the instantiated kernel of the chosen algorithm (launch.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <string>

#include "../gemm/launch.hpp"
#include "../gemm/plan.hpp"
#include "../gemm/scratch.hpp"
#include "../gemm/team_gemm.hpp"
#include "launch.hpp"
#include "plan.hpp"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace {

using gemm_allreduce_impl::Layout;

Status fail(std::string why) { return Status{false, "gemm_allreduce: " + std::move(why)}; }

struct DeviceInfo {
  int num_sms = 0;    // this rank's SM budget (Comm::sm_count(): agreed by every rank)
  int clusters = 0;   // co-resident clusters of the fused kernel within that budget
  int blk_n = gemm_impl::kBlkN;          // that kernel's tile: kBlkM x blk_n,
  int cluster_m = gemm_impl::kClusterM;  // in clusters of cluster_m CTAs along M
};

// The fused kernel of `algo` (resolved), B layout `b` and dtype: its residency query and its
// launch. check_args() has refused the pairs not built (exchange with B [K, N]; fp16 is built for
// the owner algorithm only: gemm_allreduce resolves fp16 to kOwner and refuses kRelay and
// kExchange, gemm_reducescatter's fused path is the owner algorithm).
// decode: the owner kernel on the decode tile (owner_tile_is_decode, scatter_tile_is_decode).
int max_active_clusters(GemmAllReduceAlgo algo, BLayout b, DType dtype, bool decode) {
  namespace impl = gemm_allreduce_impl;
  const bool kn = b == BLayout::kKN;
  if (decode) {
    if (dtype == DType::kFloat16)
      return kn ? impl::max_active_clusters_f16_kn_decode() : impl::max_active_clusters_f16_nk_decode();
    return kn ? impl::max_active_clusters_bf16_kn_decode() : impl::max_active_clusters_bf16_nk_decode();
  }
  if (dtype == DType::kFloat16) return kn ? impl::max_active_clusters_f16_kn() : impl::max_active_clusters_f16_nk();
  if (algo == GemmAllReduceAlgo::kExchange) return impl::max_active_clusters_bf16_nk_exchange();
  if (algo == GemmAllReduceAlgo::kRelay)
    return kn ? impl::max_active_clusters_bf16_kn_relay() : impl::max_active_clusters_bf16_nk_relay();
  return kn ? impl::max_active_clusters_bf16_kn() : impl::max_active_clusters_bf16_nk();
}
// The dtype is p.gemm.dtype (A, B and C), the one device_info() was asked about; the tile is
// p.lay's (the owner kernel checks it).
void launch(GemmAllReduceAlgo algo, BLayout b, const gemm_allreduce_impl::LaunchParams& p, cudaStream_t stream) {
  namespace impl = gemm_allreduce_impl;
  const bool kn = b == BLayout::kKN;
  if (p.lay.blk_n == impl::kDecodeBlkN && p.gemm.dtype == DType::kFloat16)
    kn ? impl::launch_f16_kn_decode(p, stream) : impl::launch_f16_nk_decode(p, stream);
  else if (p.lay.blk_n == impl::kDecodeBlkN)
    kn ? impl::launch_bf16_kn_decode(p, stream) : impl::launch_bf16_nk_decode(p, stream);
  else if (p.gemm.dtype == DType::kFloat16) kn ? impl::launch_f16_kn(p, stream) : impl::launch_f16_nk(p, stream);
  else if (algo == GemmAllReduceAlgo::kExchange) impl::launch_bf16_nk_exchange(p, stream);
  else if (algo == GemmAllReduceAlgo::kRelay) kn ? impl::launch_bf16_kn_relay(p, stream) : impl::launch_bf16_nk_relay(p, stream);
  else kn ? impl::launch_bf16_kn(p, stream) : impl::launch_bf16_nk(p, stream);
}

// sm_90 and the residency of the kernel of `algo` (resolved), B layout `b`, `dtype` and tile
// (decode: the owner kernel's decode tile) on the current device, or why not.
Status device_info(const Comm& comm, GemmAllReduceAlgo algo, BLayout b, DType dtype, bool decode, DeviceInfo* out) {
  int dev = 0, major = 0, minor = 0;
  out->num_sms = comm.sm_count();
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return fail("cannot query the current CUDA device");
  }
  if (major != 9 || minor != 0)
    return fail("device " + std::to_string(dev) + " is sm_" + std::to_string(major * 10 + minor) +
                "; the fused kernel is built for sm_90a (Hopper) only");
  // The occupancy query (cudaFuncSetAttribute + cudaOccupancyMaxActiveClusters) once per device
  // and kernel: it runs on every call otherwise (twice: can_implement, then the launch), and the
  // host time matters for small fused calls enqueued back to back.
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int, bool>, int> cache;
  const int cluster_m = decode ? gemm_allreduce_impl::kDecodeClusterM : gemm_impl::kClusterM;
  out->blk_n = decode ? gemm_allreduce_impl::kDecodeBlkN : gemm_impl::kBlkN;
  out->cluster_m = cluster_m;
  {
    std::lock_guard<std::mutex> lk(mu);
    const auto key = std::make_tuple(dev, int(algo), int(b), int(dtype), decode);
    auto it = cache.find(key);
    if (it == cache.end()) {
      try {
        it = cache.emplace(key, max_active_clusters(algo, b, dtype, decode)).first;
      } catch (const Error& e) {
        return fail(std::string("occupancy query failed: ") + e.what());
      }
    }
    // Ranks sharing the GPU (a virtual team) share its clusters too: all their grids must be
    // resident at once, since their CTAs wait for each other.
    out->clusters = std::min(it->second / comm.ranks_per_device(), out->num_sms / cluster_m);
  }
  if (out->clusters < 1)
    return fail("the kernel cannot be resident within this rank's SM budget (" + std::to_string(out->num_sms) +
                " SMs, " + std::to_string(comm.ranks_per_device()) + " rank(s) on the GPU: 0 clusters of " +
                std::to_string(cluster_m) +
                " CTAs fit); its persistent CTAs wait for each other, so it refuses to run rather than deadlock");
  return Status{};
}

Status window_of(const Comm& comm, const void* p, size_t bytes, const char* what, WindowRef* out) {
  try {
    *out = comm.find_window(p, bytes, what);
  } catch (const Error& e) {
    return fail(e.what());
  }
  return Status{};
}

// SMs the GEMM leaves idle so that every persistent cluster is resident: at least what the caller
// reserved, more when fewer clusters fit than the SM count suggests.
int resident_reserved_sms(int num_sms, int reserved, int clusters, int cluster_m) {
  const int want = (num_sms - reserved) / cluster_m;
  const int use = std::min(want, clusters);
  return num_sms - use * cluster_m;
}

// The launch's SMs, raster and tile schedule (p.gemm and p.gemm_cfg set): the reserved SMs
// grown until every persistent cluster is resident, and exactly the schedule RotatedScheduler
// builds from hw_info.sm_count = num_sms - reserved_sms, on d's tile (kBlkM x d.blk_n in clusters
// of d.cluster_m).
void fill_schedule(gemm_allreduce_impl::LaunchParams& p, const DeviceInfo& d, int reserved_sms) {
  p.gemm_cfg.reserved_sms = resident_reserved_sms(d.num_sms, reserved_sms, d.clusters, d.cluster_m);
  p.num_sms = d.num_sms;
  p.raster = gemm_impl::resolve_raster(p.gemm, p.gemm_cfg, gemm_impl::kBlkM, d.blk_n);
  p.sched = gemm_impl::make_schedule(p.gemm.M, p.gemm.N, gemm_impl::kBlkM, d.blk_n, d.cluster_m,
                                     p.raster, p.gemm_cfg.swizzle, p.gemm_cfg.rank, p.gemm_cfg.nranks,
                                     d.num_sms - p.gemm_cfg.reserved_sms, 0);
}

// The owner kernel's measurement knobs (measurement build only; no effect otherwise): the plain
// t % P owners and the final wait polled by every thread, each to show what the default saves.
void apply_owner_knobs([[maybe_unused]] gemm_allreduce_impl::LaunchParams& p) {
#ifdef TILEWIRE_BENCH_KERNELS
  static const bool owner_plain = env::get_bool("TILEWIRE_OWNER_PLAIN");
  static const bool final_poll_all = env::get_bool("TILEWIRE_OWNER_FINAL_POLL_ALL");
  p.lay.spread = !owner_plain;
  p.final_poll_all = final_poll_all;
#endif
}

// The relay kernel's knobs (TILEWIRE_RELAY_*), read once like the other kernel knobs: not per call.
void apply_relay_knobs(gemm_allreduce_impl::LaunchParams& p) {
  static const int consumer_rows = std::clamp((int)env::get_int("TILEWIRE_RELAY_CONSUMER_ROWS"), 0, gemm_impl::kBlkM);
  static const int poll_ns = std::clamp((int)env::get_int("TILEWIRE_RELAY_POLL_NS"), 0, 100000);
#ifdef TILEWIRE_BENCH_KERNELS
  static const bool no_push = env::get_bool("TILEWIRE_RELAY_NO_PUSH");  // measurement build only: C is wrong
#else
  constexpr bool no_push = false;
#endif
  static const bool pull = env::get_bool("TILEWIRE_RELAY_PULL");
  p.relay_consumer_rows = consumer_rows;
  p.relay_poll_ns = poll_ns;
  static const int comm_inflight = [] {
    const long long v = env::get_int("TILEWIRE_RELAY_COMM_INFLIGHT");
    return v == 2 || v == 8 ? (int)v : 4;
  }();
  p.relay_comm_inflight = comm_inflight;
  static const int pace_pct = std::clamp((int)env::get_int("TILEWIRE_RELAY_PACE_PCT"), 0, 100);
  p.relay_pace_pct = pace_pct;
  p.relay_no_push = no_push;
  p.relay_pull = pull;
}

// What a workspace last held, per rank (the host's record: every rank makes the same calls, so
// every rank's record says the same). A fused call whose layout differs from the record — or
// after the sequential path wrote its partial into the workspace, or on the workspace's first
// use, or first in a CUDA-graph capture (a replay starts from whatever the last replay left) —
// re-initializes the flags first (reinit.cu). Keyed by the window's allocation serial (never
// reused); the workspace's offset in the window is part of what it held, so calls that move the
// workspace within one window re-initialize too (another offset's data may cover these flags).
constexpr uint64_t kHeldSequential = 1;  // the sequential path's partial, not flags
struct WorkspaceRecord {
  uint64_t held = 0;               // layout signature of the last fused call, or kHeldSequential
  size_t offset = 0;               // where in the window the workspace was
  bool header_ok = false;          // its header at `offset` was initialized (by a re-initialization)
  unsigned long long capture = 0;  // the capture that recorded it (0: none)
};
std::mutex ws_mu;
std::map<uint64_t, WorkspaceRecord> ws_records;

uint64_t layout_signature(const Layout& l) {
  const uint64_t v[] = {2 + (uint64_t)l.exchange + 2 * (uint64_t)l.relay, (uint64_t)l.split, (uint64_t)l.P, (uint64_t)l.shard_tm,
                        (uint64_t)l.tiles_m, (uint64_t)l.tiles_n, (uint64_t)l.blk_n, (uint64_t)l.raster, (uint64_t)l.partial_bytes, (uint64_t)l.spread,
                        l.arrive_off, l.done_off, l.staging_off, l.peer_done_off, l.total};
  uint64_t h = 1469598103934665603ull;
  for (uint64_t x : v)
    for (int b = 0; b < 8; ++b) h = (h ^ ((x >> (8 * b)) & 0xFF)) * 1099511628211ull;
  return h < 2 ? h + 2 : h;  // 0 and 1 mean "nothing" and "sequential"
}

// The capture `stream` is recording into, or 0.
unsigned long long capture_id(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  TW_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &st, &id));
  return st == cudaStreamCaptureStatusActive ? id : 0;
}

// Records that the workspace now holds `held`; returns whether its flags must be re-initialized
// before a fused call, and in *first_use whether its header must be too (never initialized at
// this offset). `reinits`: the caller runs the re-initialization when told to (the fused path);
// the sequential path only records what it leaves.
bool must_reinit(const WindowRef& w, uint64_t held, cudaStream_t stream, bool reinits, bool* first_use) {
  const unsigned long long cap = capture_id(stream);
  std::lock_guard<std::mutex> lk(ws_mu);
  auto [it, fresh] = ws_records.try_emplace(w.serial);
  WorkspaceRecord& r = it->second;
  // The sequential path's partial covers the header too (the call counter the fused kernels
  // derive their tags from): after it, a fused call re-initializes the header with the flags.
  if (fresh || r.offset != w.offset || r.held == kHeldSequential) r.header_ok = false;
  *first_use = !r.header_ok;
  const bool reinit = !r.header_ok || r.held != held || (cap != 0 && r.capture != cap);
  if (reinits && reinit) r.header_ok = true;
  r.held = held;
  r.offset = w.offset;
  r.capture = cap;
  return reinit;
}

// After a failed call: the next one re-initializes, whatever this one left.
void forget(const WindowRef& w) {
  std::lock_guard<std::mutex> lk(ws_mu);
  ws_records.erase(w.serial);
}

// The call record TILEWIRE_CHECK_CALLS compares across ranks (Comm::agree_on_call): everything
// that shapes the kernel's protocol, the windows and offsets of C and the workspace among it.
void agree_on_call(Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, bool fused) {
  if (!comm.checks_calls()) return;
  const auto at = [&](const void* p, size_t bytes, const char* what) {
    const WindowRef w = comm.find_window(p, bytes, what);
    return "window " + std::to_string(w.ordinal) + " offset " + std::to_string(w.offset);
  };
  const GemmAllReduceAlgo algo = gemm_allreduce_impl::resolve_algo(comm.lsa_size(), cfg, a.b_layout, a.dtype, a.M);
  const auto num = [](long long v) { return std::to_string(v); };
  comm.agree_on_call("gemm_allreduce",
                     {{"M", num(a.M)},
                      {"N", num(a.N)},
                      {"K_local", num(a.K_local)},
                      {"dtype", dtype_name(a.dtype)},
                      {"B layout", a.b_layout == BLayout::kNK ? "NK" : "KN"},
                      {"path", fused ? "fused" : "sequential"},
                      {"algorithm", num((int)algo)},
                      {"partials", cfg.partials == PartialPrecision::kFloat32 ? "fp32" : "2-byte (C's dtype)"},
                      {"raster", num((int)cfg.raster)},
                      {"swizzle", num(cfg.swizzle)},
                      {"reserved_sms", num(cfg.reserved_sms)},
                      {"C", at(a.C, (size_t)a.M * a.N * dtype_size(a.dtype), "C")},
                      {"workspace", at(a.workspace, workspace_size(a, comm.lsa_size(), cfg), "workspace")}});
}

}  // namespace

bool gemm_allreduce_has_untraced_kernels() {
#ifdef TILEWIRE_BENCH_KERNELS
  return true;
#else
  return false;
#endif
}

Status can_implement(const Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg) {
  if (comm.aborted()) return fail("communicator was aborted; create a new one");
  int dev = -1;
  cudaGetDevice(&dev);
  if (dev != comm.device())
    return fail("current CUDA device is " + std::to_string(dev) + " but the communicator is on device " +
                std::to_string(comm.device()) + " (call cudaSetDevice first)");
  if (!comm.all_lsa())
    return fail("needs every rank load/store reachable (LSA team " + std::to_string(comm.lsa_size()) + " of " +
                std::to_string(comm.nranks()) + " ranks); no GIN path exists for the fused op");
  if (Status s = gemm_allreduce_impl::check_args(a, comm.lsa_size(), cfg); !s) return s;
  WindowRef w;
  if (Status s = window_of(comm, a.C, (size_t)a.M * a.N * dtype_size(a.dtype), "C", &w); !s) return s;
  const size_t ws = workspace_size(a, comm.lsa_size(), cfg);
  if (Status s = window_of(comm, a.workspace, ws, "workspace", &w); !s)
    return fail(s.reason + " (the workspace needs " + std::to_string(ws) + " bytes: workspace_size())");
  DeviceInfo d;
  const GemmAllReduceAlgo algo = gemm_allreduce_impl::resolve_algo(comm.lsa_size(), cfg, a.b_layout, a.dtype, a.M);
  const bool decode = gemm_allreduce_impl::owner_tile_is_decode(a, algo);
  if (Status s = device_info(comm, algo, a.b_layout, a.dtype, decode, &d); !s) return s;
  if (Status s = gemm_impl::check_sms(gemm_allreduce_impl::as_gemm_config(cfg), d.num_sms, gemm_impl::kClusterM); !s)
    return fail(s.reason);
  return Status{};
}

void gemm_allreduce(Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, cudaStream_t stream) {
  comm.require_usable("gemm_allreduce");
  const Status st = can_implement(comm, a, cfg);
  TW_REQUIRE(st.ok, kInvalidArgument, st.reason);
  TW_REQUIRE(!cfg.untraced_kernel || gemm_allreduce_has_untraced_kernels(), kUnsupported,
             "gemm_allreduce: untraced_kernel needs the measurement build (configure with -DTILEWIRE_BENCH_KERNELS=ON)");
  TW_REQUIRE(!(cfg.untraced_kernel && cfg.trace.on()), kInvalidArgument,
             "gemm_allreduce: untraced_kernel and a trace ring together (the untraced kernel records nothing)");
  const bool fused = cfg.path == GemmAllReducePath::kFused ||
                     (cfg.path == GemmAllReducePath::kAuto &&
                      gemm_allreduce_prefers_fused(a.M, a.N, a.K_local, comm.lsa_size()));
  agree_on_call(comm, a, cfg, fused);
  const Comm::CallOrder order(comm, stream);  // before the sequential GEMM writes the workspace
  if (fused && comm.lsa_size() == 1 && cfg.algo == GemmAllReduceAlgo::kAuto && !cfg.trace.on()) {
    // One rank: the sum of one partial. The fused path is the GEMM alone, straight into C; an
    // explicit algorithm or a trace runs that fused kernel (its tiles are what they show).
    gemm_impl::team_gemm(comm, gemm_allreduce_impl::as_gemm_args(a), cfg.reserved_sms, stream);
    return;
  }
  if (!fused) {
    // Sequential: the partial (cuBLASLt, else tw::gemm), then tw::allreduce into C: out of place
    // from the workspace's staging area (the two-shot push kernel needs it) when
    // sequential_from_staging() says it is safe, else in place in C. The workspace header (the
    // fused kernels' call counter) is never touched.
    GemmArgs g = gemm_allreduce_impl::as_gemm_args(a);
    const gemm_allreduce_impl::Layout lay = gemm_allreduce_impl::layout_for(a, comm.lsa_size(), cfg);
    const size_t c_bytes = (size_t)a.M * a.N * dtype_size(a.dtype);
    if (gemm_allreduce_impl::sequential_from_staging(lay, c_bytes, oneshot_max_bytes(comm))) {
      g.C = static_cast<char*>(a.workspace) + lay.staging_off;
      bool first = false;  // the next fused call on this workspace re-initializes its flags
      (void)must_reinit(comm.find_window(a.workspace, lay.total, "workspace"), kHeldSequential, stream, false, &first);
    }
    gemm_impl::team_gemm(comm, g, cfg.reserved_sms, stream);
    AllReduceArgs ar;
    ar.send = g.C;
    ar.recv = a.C;
    ar.count = (size_t)a.M * a.N;
    ar.dtype = a.dtype;
    allreduce(comm, ar, stream);
    return;
  }
  DeviceInfo d;
  const GemmAllReduceAlgo algo = gemm_allreduce_impl::resolve_algo(comm.lsa_size(), cfg, a.b_layout, a.dtype, a.M);
  const bool relay = algo == GemmAllReduceAlgo::kRelay;
  const bool decode = gemm_allreduce_impl::owner_tile_is_decode(a, algo);
  const Status ds = device_info(comm, algo, a.b_layout, a.dtype, decode, &d);  // fp16: the fp16 owner kernel's residency
  TW_REQUIRE(ds.ok, kUnsupported, ds.reason);

  gemm_allreduce_impl::LaunchParams p;
  p.gemm = gemm_allreduce_impl::as_gemm_args(a);
  // Relay: rank r walks from unit order index r * floor(units / P) (LSA rank == rank: all-LSA).
  p.gemm_cfg = relay ? gemm_allreduce_impl::as_gemm_config(cfg, comm.dev_ctx().lsa_rank, comm.lsa_size())
                     : gemm_allreduce_impl::as_gemm_config(cfg);
  fill_schedule(p, d, cfg.reserved_sms);
  p.lay = gemm_allreduce_impl::layout_for(a, comm.lsa_size(), cfg);
  apply_owner_knobs(p);
  p.final_ctas = gemm_allreduce_impl::final_wait_ctas(p.sched);
  p.ctx = comm.dev_ctx();
  const WindowRef wc = comm.find_window(a.C, (size_t)a.M * a.N * dtype_size(a.dtype), "C");
  const WindowRef ww = comm.find_window(a.workspace, p.lay.total, "workspace");
  p.c_win = wc.win, p.c_off = wc.offset;
  p.ws_win = ww.win, p.ws_off = ww.offset;
  p.ws = a.workspace;
  bool first_use = false;
  if (must_reinit(ww, layout_signature(p.lay), stream, true, &first_use)) {
    try {
      gemm_allreduce_impl::launch_reinit(p.ctx, static_cast<char*>(a.workspace), p.lay, first_use, stream);
      comm.launched("gemm_allreduce reinit");
    } catch (...) {
      forget(ww);
      comm.check_fault();
      throw;
    }
  }
  apply_relay_knobs(p);
  p.untraced = cfg.untraced_kernel;
  p.ring = cfg.trace;
  p.ring.rank = (uint16_t)comm.rank();
  try {
    launch(algo, a.b_layout, p, stream);
    comm.launched("gemm_allreduce launch");
  } catch (...) {
    forget(ww);
    comm.check_fault();
    throw;
  }
}

// ------------------------------------------------- gemm_reducescatter's fused path and records
namespace gemm_allreduce_impl {

void note_sequential_use(Comm& comm, void* workspace, size_t bytes, cudaStream_t stream) {
  bool first = false;
  (void)must_reinit(comm.find_window(workspace, bytes, "workspace"), kHeldSequential, stream, false, &first);
}

// gemm_reducescatter's fused kernel: the relay (scatter_uses_relay), else the owner kernel; the
// measurement build runs the owner kernel wherever TILEWIRE_RS_OWNER is set, to compare the two.
GemmAllReduceAlgo scatter_algo(int M, int P, int shard_rows, DType dtype) {
#ifdef TILEWIRE_BENCH_KERNELS
  static const bool owner = env::get_bool("TILEWIRE_RS_OWNER");
  if (owner) return GemmAllReduceAlgo::kOwner;
#endif
  return scatter_uses_relay(M, P, shard_rows, dtype) ? GemmAllReduceAlgo::kRelay : GemmAllReduceAlgo::kOwner;
}

Status scatter_can_fuse(const Comm& comm, BLayout b, DType dtype, int M, int shard_rows) {
  DeviceInfo d;
  const GemmAllReduceAlgo algo = scatter_algo(M, comm.lsa_size(), shard_rows, dtype);
  return device_info(comm, algo, b, dtype, algo == GemmAllReduceAlgo::kOwner && scatter_tile_is_decode(M), &d);
}

// The relay on the shards (make_relay_layout with shard_rows: each shard one segment of the walk,
// its owner last) or the owner algorithm with tiles owned by shard (make_scatter_layout): the same
// launches as gemm_allreduce's, C the rank's shard (local memory), no C window.
void fused_reducescatter(Comm& comm, const GemmArgs& g, int shard_rows, int reserved_sms, void* workspace,
                         const trace::Ring& ring, cudaStream_t stream) {
  DeviceInfo d;
  const int P = comm.lsa_size();
  const GemmAllReduceAlgo algo = scatter_algo(g.M, P, shard_rows, g.dtype);
  const bool relay = algo == GemmAllReduceAlgo::kRelay;
  const bool decode = !relay && scatter_tile_is_decode(g.M);
  const Status ds = device_info(comm, algo, g.b_layout, g.dtype, decode, &d);
  TW_REQUIRE(ds.ok, kUnsupported, ds.reason);
  GemmAllReduceConfig cfg;
  cfg.reserved_sms = reserved_sms;
  LaunchParams p;
  p.gemm = g;
  p.gemm_cfg = as_gemm_config(cfg);
  if (scatter_rotates(g.M, P, shard_rows, d.cluster_m)) {
    // Rank r walks shard r + 1's tiles first and its own last (rows along N, one unit row after
    // another): every CTA pushes partials before it waits as an owner, and at each step the
    // ranks push to different owners. plan.hpp, scatter_rotates, says why it is deadlock free.
    p.gemm_cfg.raster = GemmRaster::kAlongN;
    p.gemm_cfg.swizzle = 1;
    p.gemm_cfg.rank = (comm.dev_ctx().lsa_rank + 1) % P;
    p.gemm_cfg.nranks = P;
  }
  fill_schedule(p, d, cfg.reserved_sms);
  // Relay: rank r's walk starts at shard r + 1 (the rotation above), the layout's walk_shift.
  p.lay = relay ? make_relay_layout(g.M, g.N, p.raster, p.sched.units(), P, shard_rows)
                : make_scatter_layout(g.M, g.N, P, p.raster, 2, shard_rows, decode);
  apply_owner_knobs(p);
  if (relay) apply_relay_knobs(p);
  p.final_ctas = final_wait_ctas(p.sched);
  p.ctx = comm.dev_ctx();
  const WindowRef ww = comm.find_window(workspace, p.lay.total, "workspace");
  p.ws_win = ww.win, p.ws_off = ww.offset;
  p.c_win = ww.win, p.c_off = 0;  // unused: finals stay on their owner
  p.ws = workspace;
  p.ring = ring;
  p.ring.rank = (uint16_t)comm.rank();
  bool first_use = false;
  try {
    if (must_reinit(ww, layout_signature(p.lay), stream, true, &first_use)) {
      launch_reinit(p.ctx, static_cast<char*>(workspace), p.lay, first_use, stream);
      comm.launched("gemm_reducescatter reinit");
    }
    launch(algo, g.b_layout, p, stream);
    comm.launched("gemm_reducescatter launch");
  } catch (...) {
    forget(ww);
    comm.check_fault();
    throw;
  }
}

}  // namespace gemm_allreduce_impl

}  // namespace tw
