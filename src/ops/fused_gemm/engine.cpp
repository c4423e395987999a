// The fused-GEMM engine's host side (engine.hpp): the kernel table, residency, the schedule, the
// workspace records and the launch.
#include "engine.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "../gemm/plan.hpp"
#include "../sm90.hpp"
#include "../../runtime/needs.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::fused_gemm {
namespace {

namespace impl = gemm_allreduce_impl;
using Algo = GemmAllReduceAlgo;
constexpr DType kBf16 = DType::kBFloat16, kF16 = DType::kFloat16;
constexpr BLayout kNK = BLayout::kNK, kKN = BLayout::kKN;

// Every fused kernel this build instantiates (one translation unit each, ../gemm_allreduce/launch.hpp).
const Kernel kKernels[] = {
    {{Algo::kOwner, kBf16, kNK, false}, "owner bf16 B[N,K]", impl::max_active_clusters_bf16_nk, impl::launch_bf16_nk},
    {{Algo::kOwner, kBf16, kKN, false}, "owner bf16 B[K,N]", impl::max_active_clusters_bf16_kn, impl::launch_bf16_kn},
    {{Algo::kOwner, kF16, kNK, false}, "owner fp16 B[N,K]", impl::max_active_clusters_f16_nk, impl::launch_f16_nk},
    {{Algo::kOwner, kF16, kKN, false}, "owner fp16 B[K,N]", impl::max_active_clusters_f16_kn, impl::launch_f16_kn},
    {{Algo::kOwner, kBf16, kNK, true}, "owner bf16 B[N,K] decode", impl::max_active_clusters_bf16_nk_decode,
     impl::launch_bf16_nk_decode},
    {{Algo::kOwner, kBf16, kKN, true}, "owner bf16 B[K,N] decode", impl::max_active_clusters_bf16_kn_decode,
     impl::launch_bf16_kn_decode},
    {{Algo::kOwner, kF16, kNK, true}, "owner fp16 B[N,K] decode", impl::max_active_clusters_f16_nk_decode,
     impl::launch_f16_nk_decode},
    {{Algo::kOwner, kF16, kKN, true}, "owner fp16 B[K,N] decode", impl::max_active_clusters_f16_kn_decode,
     impl::launch_f16_kn_decode},
    {{Algo::kExchange, kBf16, kNK, false}, "exchange bf16 B[N,K]", impl::max_active_clusters_bf16_nk_exchange,
     impl::launch_bf16_nk_exchange},
    {{Algo::kRelay, kBf16, kNK, false}, "relay bf16 B[N,K]", impl::max_active_clusters_bf16_nk_relay,
     impl::launch_bf16_nk_relay},
    {{Algo::kRelay, kBf16, kKN, false}, "relay bf16 B[K,N]", impl::max_active_clusters_bf16_kn_relay,
     impl::launch_bf16_kn_relay},
};

bool same(const KernelKey& a, const KernelKey& b) {
  return a.algo == b.algo && a.dtype == b.dtype && a.b == b.b && a.decode == b.decode;
}

Status fail(const char* op, const std::string& why) { return Status{false, std::string(op) + ": " + why}; }

// What a workspace last held, per rank (the host's record: every rank makes the same calls, so
// every rank's record says the same). A fused call whose layout differs from the record — or
// after the sequential path wrote its partial into the workspace, or on the workspace's first
// use, or first in a CUDA-graph capture (a replay starts from whatever the last replay left) —
// re-initializes the flags first (reinit.cu). Keyed by the window's allocation serial (never
// reused); the workspace's offset in the window is part of what it held, so calls that move the
// workspace within one window re-initialize too (another offset's data may cover these flags).
struct WorkspaceRecord {
  uint64_t held = 0;               // layout signature of the last fused call, or kHeldSequential
  size_t offset = 0;               // where in the window the workspace was
  bool header_ok = false;          // its header at `offset` was initialized (by a re-initialization)
  unsigned long long capture = 0;  // the capture that recorded it (0: none)
};
std::mutex ws_mu;
std::map<uint64_t, WorkspaceRecord> ws_records;

// The capture `stream` is recording into, or 0.
unsigned long long capture_id(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  TW_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &st, &id));
  return st == cudaStreamCaptureStatusActive ? id : 0;
}

// SMs the GEMM leaves idle so that every persistent cluster is resident: at least what the caller
// reserved, more when fewer clusters fit than the SM count suggests.
int resident_reserved_sms(int num_sms, int reserved, int clusters, int cluster_m) {
  const int want = (num_sms - reserved) / cluster_m;
  const int use = std::min(want, clusters);
  return num_sms - use * cluster_m;
}

}  // namespace

const Kernel* find_kernel(const KernelKey& k) {
  for (const Kernel& e : kKernels)
    if (same(e.key, k)) return &e;
  return nullptr;
}

Status residency(const Comm& comm, const KernelKey& k, const char* op, Residency* out) {
  int dev = 0;
  out->num_sms = comm.sm_count();
  if (Status s = ops::sm90_device(op, "the fused kernel", &dev); !s) return s;
  const Kernel* kernel = find_kernel(k);
  if (kernel == nullptr)
    return fail(op, std::string("no fused kernel is built for this algorithm, dtype ") + dtype_name(k.dtype) +
                        ", B layout " + (k.b == BLayout::kNK ? "[N, K]" : "[K, N]") + (k.decode ? " on the decode tile" : ""));
  // The occupancy query (cudaFuncSetAttribute + cudaOccupancyMaxActiveClusters) once per device
  // and kernel: it runs on every call otherwise (twice: can_implement, then the launch), and the
  // host time matters for small fused calls enqueued back to back.
  static std::mutex mu;
  static std::map<std::pair<int, const Kernel*>, int> cache;
  const int cluster_m = k.decode ? impl::kDecodeClusterM : gemm_impl::kClusterM;
  out->blk_n = k.decode ? impl::kDecodeBlkN : gemm_impl::kBlkN;
  out->cluster_m = cluster_m;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = cache.find({dev, kernel});
    if (it == cache.end()) {
      try {
        it = cache.emplace(std::make_pair(dev, kernel), kernel->max_active_clusters()).first;
      } catch (const Error& e) {
        return fail(op, std::string("occupancy query failed: ") + e.what());
      }
    }
    // Ranks sharing the GPU (a virtual team) share its clusters too: all their grids must be
    // resident at once, since their CTAs wait for each other.
    out->clusters = std::min(it->second / comm.ranks_per_device(), out->num_sms / cluster_m);
  }
  if (out->clusters < 1)
    return fail(op, "the kernel cannot be resident within this rank's SM budget (" + std::to_string(out->num_sms) +
                        " SMs, " + std::to_string(comm.ranks_per_device()) + " rank(s) on the GPU: 0 clusters of " +
                        std::to_string(cluster_m) +
                        " CTAs fit); its persistent CTAs wait for each other, so it refuses to run rather than deadlock");
  return Status{};
}

void fill_schedule(LaunchParams& p, const Residency& r, int reserved_sms) {
  p.gemm_cfg.reserved_sms = resident_reserved_sms(r.num_sms, reserved_sms, r.clusters, r.cluster_m);
  p.num_sms = r.num_sms;
  p.raster = gemm_impl::resolve_raster(p.gemm, p.gemm_cfg, gemm_impl::kBlkM, r.blk_n);
  p.hook.sched = gemm_impl::make_schedule(p.gemm.M, p.gemm.N, gemm_impl::kBlkM, r.blk_n, r.cluster_m, p.raster,
                                          p.gemm_cfg.swizzle, p.gemm_cfg.rank, p.gemm_cfg.nranks,
                                     r.num_sms - p.gemm_cfg.reserved_sms, 0, p.gemm_cfg.walk_rounds,
                                          p.gemm_cfg.walk_chunk);
}

// The plain t % P owners and the final wait polled by every thread, each to show what the
// default saves (measurement build only; no effect otherwise).
namespace {
// The kernels' knobs, read when a communicator is made (its need: src/runtime/needs.hpp), so
// that every call on it uses the same values and no call parses the environment. The
// environment is agreed by every rank then (agreement.hpp).
struct Knobs {
  gemm_allreduce_impl::OwnerKnobs owner;  // hook_params.hpp
  gemm_allreduce_impl::RelayKnobs relay;
};

NeedRequest knobs_need(const CommShape&) {
  auto k = std::make_shared<Knobs>();
#ifdef TILEWIRE_BENCH_KERNELS
  k->owner.plain = env::get_bool("TILEWIRE_OWNER_PLAIN");
  k->owner.final_poll_all = env::get_bool("TILEWIRE_OWNER_FINAL_POLL_ALL");
  k->relay.no_push = env::get_bool("TILEWIRE_RELAY_NO_PUSH");
  k->relay.padded_slots = env::get_bool("TILEWIRE_RELAY_PADDED_SLOTS");  // the layouts' slots are padded here
#endif
  k->relay.consumer_rows = std::clamp((int)env::get_int("TILEWIRE_RELAY_CONSUMER_ROWS"), 0, gemm_impl::kBlkM);
  k->relay.poll_ns = std::clamp((int)env::get_int("TILEWIRE_RELAY_POLL_NS"), 0, 100000);
  k->relay.pull = env::get_bool("TILEWIRE_RELAY_PULL");
  k->relay.bulk_push = env::get_bool("TILEWIRE_RELAY_BULK_PUSH");
  const long long inflight = env::get_int("TILEWIRE_RELAY_COMM_INFLIGHT");
  k->relay.comm_inflight = inflight == 2 || inflight == 8 ? (int)inflight : 4;
  k->relay.pace_pct = std::clamp((int)env::get_int("TILEWIRE_RELAY_PACE_PCT"), 0, 100);
  k->relay.l2_evict_first = env::get_bool("TILEWIRE_RELAY_L2_EVICT_FIRST");
  k->relay.rounds = std::clamp((int)env::get_int("TILEWIRE_RELAY_ROUNDS"), 0, 64);
  k->relay.waves = std::clamp((int)env::get_int("TILEWIRE_RELAY_WAVES"), 0, 64);
  NeedRequest r;
  r.record = std::move(k);
  return r;
}

const int kKnobsNeed = register_need("fused GEMM", knobs_need);

const Knobs& knobs(const Comm& comm) { return *static_cast<const Knobs*>(need_grant(comm, kKnobsNeed).record.get()); }
}  // namespace

void apply_owner_knobs(const Comm& comm, LaunchParams& p) {
  const Knobs& k = knobs(comm);
  if (k.owner.plain) p.hook.lay.spread = false;
  p.owner = k.owner;
}

void apply_relay_knobs(const Comm& comm, LaunchParams& p) {
  const Knobs& k = knobs(comm);
  p.relay = k.relay;
}

uint64_t layout_signature(const Layout& l) {
  const uint64_t v[] = {2 + (uint64_t)l.algo,
                        (uint64_t)l.split,
                        (uint64_t)l.P,
                        (uint64_t)l.shard_tm,
                        (uint64_t)l.tiles_m,
                        (uint64_t)l.tiles_n,
                        (uint64_t)l.blk_n,
                        (uint64_t)l.raster,
                        (uint64_t)l.partial_bytes,
                        (uint64_t)l.spread,
                        l.arrive_off,
                        l.done_off,
                        l.staging_off,
                        l.peer_done_off,
                        l.total};
  uint64_t h = 1469598103934665603ull;
  for (uint64_t x : v)
    for (int b = 0; b < 8; ++b) h = (h ^ ((x >> (8 * b)) & 0xFF)) * 1099511628211ull;
  return h < 2 ? h + 2 : h;  // 0 and 1 mean "nothing" and "sequential"
}

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

void forget(const WindowRef& w) {
  std::lock_guard<std::mutex> lk(ws_mu);
  ws_records.erase(w.serial);
}

void launch(Comm& comm, const Kernel& k, const LaunchParams& p, const WindowRef& ws, const LaunchNames& names,
            cudaStream_t stream) {
  try {
    bool first_use = false;
    if (must_reinit(ws, layout_signature(p.hook.lay), stream, true, &first_use)) {
      impl::launch_reinit(p.hook.ctx, p.hook.ws, p.hook.lay, first_use, stream);
      comm.launched(names.reinit);
    }
    k.launch(p, stream);
    comm.launched(names.launch);
  } catch (...) {
    forget(ws);
    comm.check_fault();
    throw;
  }
}

}  // namespace tw::fused_gemm
