// src/runtime/gin_emu.hpp — the emulated GIN backend of a virtual team in nodes
// (CommConfig::ranks_per_node): GPU-initiated networking between ranks of different virtual
// nodes, on one GPU and without a NIC, with the weakest ordering NCCL 2.28.9's ncclGin promises.
//
// What it emulates (nccl_device/gin.h), and nothing more:
//   put          bytes from this rank's window into a peer's, delivered later, in any order with
//                respect to the rank's other puts (TILEWIRE_GIN_EMU_REORDER, _DELAY_US);
//   put + signal the signal (an add) becomes visible at the peer only after the data of this put
//                and of every earlier put of the same rank to the same peer has landed, and then
//                possibly later still (TILEWIRE_GIN_EMU_LATE_SIGNAL_US);
//   signal       an add alone, under the same rule;
//   flush        every op the rank posted before has read its source (the source may be
//                reused), possibly long before the data lands (TILEWIRE_GIN_EMU_SLOW_FLUSH_US).
// A rank reads its GIN signals beside its LSA ones (dev::read_signal adds both).
//
// The delivery engine is one host proxy thread per team, like NCCL's own GIN proxy: it polls
// every rank's ring (host-mapped, written by the device) and moves the puts it has taken in
// batches with memcpy. Every window of the team but the control window lives in pinned host
// memory mapped into the device at the same address (Comm::alloc_window), so the proxy makes
// no CUDA call once running, and neither does drain(). Why: the ranks' kernels hold their SMs
// while they wait for the data, so a copy kernel or a proxy kernel could wait behind the very
// kernels waiting for it. Copy engines need no SM, but while the proxy copied with
// cudaMemcpyAsync on its own stream, GIN traffic stalled for the whole device bound at the start
// of some EP tests and bench ep's low-latency mode at 4 x 2 never finished; the likely cause is
// that streams share the device's CUDA_DEVICE_MAX_CONNECTIONS hardware queues round robin, so a
// proxy copy can queue behind a rank's work that waits for a spinning kernel. Under
// compute-sanitizer such copies always waited. The control window's
// signals and barriers take system-scope atomics, which mapped host memory does not: it stays
// in device memory. Kernels reach host-memory windows over PCIe: the emulation is for
// correctness, its times say nothing of a NIC.
// Its chaos comes from one generator seeded with TILEWIRE_GIN_EMU_SEED; the choices it makes
// are reproducible for the same arrival order of ops, which the GPU's timing sets.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "tilewire/device/context.hpp"

namespace tw {

struct GinEmuChaos {
  uint64_t seed = 1;
  int64_t delay_us = 0;        // each op waits a uniform [0, delay_us] after it is posted
  int64_t reorder = 8;         // the next op is drawn from the oldest `reorder` ready ones (<= 1: in order)
  int64_t late_signal_us = 0;  // a signal waits a uniform [0, late_signal_us] after its data landed
  int64_t slow_flush_us = 0;   // a source counts as read a uniform [0, slow_flush_us] after it was
  static GinEmuChaos from_env();
};

class GinEmu {
 public:
  static constexpr uint32_t kRingSlots = 4096;

  GinEmu(int device, int nranks, int signal_count, const GinEmuChaos& chaos);
  ~GinEmu();  // stops the proxy (the team's kernels have ended)
  GinEmu(const GinEmu&) = delete;
  GinEmu& operator=(const GinEmu&) = delete;

  GinEmuView view(int rank) const;
  // Blocks until every op posted before the call has been delivered (data and signals) and has
  // read its source: called where the kernels that matter have ended and memory they put into or
  // from is about to be freed (ops posted later do not hold it up). Throws kTimeout
  // after `timeout_ms`, or kState with the proxy's error.
  void drain(int64_t timeout_ms);

 private:
  void run();
  const int device_, nranks_, signal_count_;
  const GinEmuChaos chaos_;
  GinEmuOp* rings_ = nullptr;          // host, mapped: nranks x kRingSlots
  uint64_t* signals_ = nullptr;        // host, mapped: nranks x signal_count
  uint64_t* consumed_ = nullptr;       // host, mapped: nranks (a cache line apart)
  unsigned long long* tails_ = nullptr;  // device: nranks
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> drain_requests_{0};  // drain() calls so far
  std::atomic<uint64_t> quiet_after_{0};     // the last drain request whose ops are all done
  mutable std::mutex err_mu_;
  std::string error_;
  std::thread proxy_;
};

}  // namespace tw
