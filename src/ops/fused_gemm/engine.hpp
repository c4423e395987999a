// src/ops/fused_gemm/engine.hpp — the fused-GEMM engine's host side, shared by the fused paths of
// gemm_allreduce (gemm_allreduce.cpp) and gemm_reducescatter (reducescatter_fused.cpp): which
// kernel a call runs, whether it is resident, its schedule, the workspace records, and the launch.
//
//   find_kernel      (algorithm, dtype, B layout, tile) -> the instantiated kernel: its residency
//                    query and its launch (the table in engine.cpp; null where none is built)
//   residency        sm_90 and the kernel's co-resident clusters within the rank's SM budget
//   fill_schedule    the launch's reserved SMs (grown until every persistent cluster is resident),
//                    raster and tile schedule
//   must_reinit ...  what each workspace last held (the records), so that a call whose flags the
//                    last use cannot vouch for re-initializes them first (reinit.cu)
//   launch           re-initialization where the record says so, then the kernel; a failure
//                    forgets the record and turns a device fault into the error
//
// Every rank makes the same calls with the same arguments, so every rank's host decides alike.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "../gemm_allreduce/launch.hpp"
#include "../gemm_allreduce/plan.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/runtime/comm.hpp"

namespace tw::fused_gemm {

using gemm_allreduce_impl::LaunchParams;
using gemm_allreduce_impl::Layout;

// A fused kernel: the algorithm (resolved: kOwner, kRelay or kExchange), A's, B's and C's dtype,
// B's layout, and the tile (decode: the owner kernel's 128 x 64 tile without clusters).
struct KernelKey {
  GemmAllReduceAlgo algo = GemmAllReduceAlgo::kOwner;
  DType dtype = DType::kBFloat16;
  BLayout b = BLayout::kNK;
  bool decode = false;
};

struct Kernel {
  KernelKey key;
  const char* name;                // for messages
  int (*max_active_clusters)();    // cudaOccupancyMaxActiveClusters on the current device (0: it does not fit)
  void (*launch)(const LaunchParams&, cudaStream_t);
};

// The kernel built for `k`, or null. fp16 and the decode tile exist for the owner algorithm only.
const Kernel* find_kernel(const KernelKey& k);

// What the rank's SM budget holds of a kernel.
struct Residency {
  int num_sms = 0;    // this rank's SM budget (Comm::sm_count(): agreed by every rank)
  int clusters = 0;   // co-resident clusters of the kernel within that budget
  int blk_n = 0;      // the kernel's tile: gemm_impl::kBlkM x blk_n,
  int cluster_m = 0;  // in clusters of cluster_m CTAs along M
};

// sm_90 and the residency of kernel `k` on the current device (its occupancy queried once per
// device and kernel), or why not, the reason prefixed with `op`.
Status residency(const Comm& comm, const KernelKey& k, const char* op, Residency* out);

// The launch's SMs, raster and tile schedule (p.gemm and p.gemm_cfg set): the reserved SMs grown
// until every persistent cluster is resident, and exactly the schedule RotatedScheduler builds
// from hw_info.sm_count = num_sms - reserved_sms, on r's tile.
void fill_schedule(LaunchParams& p, const Residency& r, int reserved_sms);

// The kernels' knobs, read when the communicator was made (engine.cpp's need): the owner
// kernel's measurement knobs (measurement build only) and the relay's TILEWIRE_RELAY_*.
void apply_owner_knobs(const Comm& comm, LaunchParams& p);
void apply_relay_knobs(const Comm& comm, LaunchParams& p);

// Workspace records. What a workspace last held, per rank: the layout signature of the last
// fused call, or kHeldSequential after a sequential path wrote its data over it.
inline constexpr uint64_t kHeldSequential = 1;
uint64_t layout_signature(const Layout& l);
// Records that the workspace now holds `held`; returns whether its flags must be re-initialized
// before a fused call, and in *first_use whether its header must be too. `reinits`: the caller
// runs the re-initialization when told to (the fused path); the sequential path only records.
bool must_reinit(const WindowRef& w, uint64_t held, cudaStream_t stream, bool reinits, bool* first_use);
// After a failed call: the next one re-initializes, whatever this one left.
void forget(const WindowRef& w);

// What Comm::launched calls the two launches (string literals: nothing is built per call).
struct LaunchNames {
  const char* reinit;
  const char* launch;
};
// Re-initializes the workspace `ws` (p.hook.ws, p.hook.lay) where its record says so, then launches `k`
// with p. On a failure the record is forgotten and a device fault recorded by this communicator
// becomes the error.
void launch(Comm& comm, const Kernel& k, const LaunchParams& p, const WindowRef& ws, const LaunchNames& names,
            cudaStream_t stream);

}  // namespace tw::fused_gemm
