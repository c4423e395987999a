// The emulated GIN backend's proxy (gin_emu.hpp says what it promises and why it is built so).
#include "gin_emu.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kConsumedStride = 8;  // uint64 words: one cache line per rank
constexpr size_t kMaxBatch = 1024;                // puts moved per turn of the proxy
constexpr size_t kMaxBatchBytes = size_t{64} << 20;  // and bytes (a turn also delivers signals)

// One op taken off a ring, until it is delivered.
struct Pending {
  int rank = 0;
  uint64_t seq = 0;  // the rank's op number (its ring slot's claim)
  GinEmuOp op{};
  Clock::time_point ready;  // chaos: not before
  bool landed = false;      // its data is in the peer's window
  Clock::time_point signal_at;
};

}  // namespace

GinEmuChaos GinEmuChaos::from_env() {
  GinEmuChaos c;
  c.seed = (uint64_t)env::get_int("TILEWIRE_GIN_EMU_SEED");
  c.delay_us = std::max<int64_t>(0, env::get_int("TILEWIRE_GIN_EMU_DELAY_US"));
  c.reorder = std::max<int64_t>(1, env::get_int("TILEWIRE_GIN_EMU_REORDER"));
  c.late_signal_us = std::max<int64_t>(0, env::get_int("TILEWIRE_GIN_EMU_LATE_SIGNAL_US"));
  c.slow_flush_us = std::max<int64_t>(0, env::get_int("TILEWIRE_GIN_EMU_SLOW_FLUSH_US"));
  return c;
}

GinEmu::GinEmu(int device, int nranks, int signal_count, const GinEmuChaos& chaos)
    : device_(device), nranks_(nranks), signal_count_(std::max(1, signal_count)), chaos_(chaos) {
  TW_CUDA_CHECK(cudaSetDevice(device));
  const auto host = [](size_t bytes) {
    void* p = nullptr;
    TW_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, bytes);
    return p;
  };
  rings_ = static_cast<GinEmuOp*>(host(sizeof(GinEmuOp) * kRingSlots * nranks));
  signals_ = static_cast<uint64_t*>(host(sizeof(uint64_t) * (size_t)signal_count_ * nranks));
  consumed_ = static_cast<uint64_t*>(host(sizeof(uint64_t) * kConsumedStride * nranks));
  TW_CUDA_CHECK(cudaMalloc(&tails_, sizeof(unsigned long long) * nranks));
  cudaStream_t s = nullptr;
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cudaError_t e = cudaMemsetAsync(tails_, 0, sizeof(unsigned long long) * nranks, s);
  const cudaError_t e2 = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  TW_CUDA_CHECK(e);
  TW_CUDA_CHECK(e2);
  proxy_ = std::thread([this] { run(); });
}

GinEmu::~GinEmu() {
  stop_ = true;
  if (proxy_.joinable()) proxy_.join();
  cudaSetDevice(device_);
  cudaFreeHost(rings_);
  cudaFreeHost(signals_);
  cudaFreeHost(consumed_);
  cudaFree(tails_);
}

GinEmuView GinEmu::view(int rank) const {
  GinEmuView v;
  const auto dev = [](void* h) {
    void* d = nullptr;
    TW_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    return d;
  };
  v.ring = static_cast<GinEmuOp*>(dev(rings_ + (size_t)rank * kRingSlots));
  v.tail = tails_ + rank;
  v.signals = static_cast<const uint64_t*>(dev(signals_ + (size_t)rank * signal_count_));
  v.consumed = static_cast<const uint64_t*>(dev(consumed_ + (size_t)rank * kConsumedStride));
  v.ring_slots = kRingSlots;
  return v;
}

void GinEmu::drain(int64_t timeout_ms) {
  // The team's kernels that matter here have ended, so every op they posted is published in a
  // ring: the first turn of the proxy that starts after this request takes them all and notes
  // each rank's op count then; the request is done once every op below those counts has landed,
  // signalled and read its source (later ops, of kernels still running, do not hold it up). No
  // CUDA call: a copy or a synchronization here could wait behind a peer's kernel that waits
  // for this rank.
  const uint64_t k = drain_requests_.fetch_add(1) + 1;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(1, timeout_ms));
  while (quiet_after_.load() < k) {
    {
      std::lock_guard<std::mutex> lk(err_mu_);
      TW_REQUIRE(error_.empty(), kState, "emulated GIN: " + error_);
    }
    TW_REQUIRE(Clock::now() < deadline, kTimeout,
               "emulated GIN: ops still undelivered " + std::to_string(timeout_ms) + " ms after the team's kernels ended");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void GinEmu::run() {
  std::mt19937_64 rng(chaos_.seed);
  const auto uniform_us = [&](int64_t hi) {
    return std::chrono::microseconds(hi > 0 ? (int64_t)(rng() % (uint64_t)(hi + 1)) : 0);
  };
  std::vector<uint64_t> head(nranks_, 0);  // next op number to take, per rank
  std::vector<Pending> pending;            // taken, not yet delivered (data and signal)
  // Per rank: op numbers whose source is not yet read (or read too recently: slow flush), and
  // per (rank, peer): puts whose data has not landed (a signal waits for the earlier ones).
  std::vector<std::map<uint64_t, Clock::time_point>> unread(nranks_);
  std::map<std::pair<int, int>, std::set<uint64_t>> in_flight;
  // Moves a batch of puts' data, in the batch's order. Both ends are pinned host memory mapped
  // into the device at the same address (every window of a team in nodes but the control
  // window): a memcpy, no CUDA call, so no delivery can wait behind a rank's kernel or copy.
  const auto move = [&](const std::vector<Pending*>& batch) {
    for (const Pending* p : batch)
      std::memcpy(reinterpret_cast<char*>(p->op.dst), reinterpret_cast<const char*>(p->op.src), p->op.bytes);
    std::atomic_thread_fence(std::memory_order_release);
  };
  uint64_t drain_seen = 0;                   // the last drain request a turn has noted
  std::vector<uint64_t> drain_mark(nranks_);  // per rank: the ops it must see delivered
  while (!stop_.load()) {
    const uint64_t drain_request = drain_requests_.load();
    bool progress = false;
    const Clock::time_point now = Clock::now();
    // 1. Take every published op, in each rank's order.
    for (int r = 0; r < nranks_; ++r) {
      while (true) {
        GinEmuOp* slot = rings_ + (size_t)r * kRingSlots + head[r] % kRingSlots;
        const uint64_t seq = reinterpret_cast<std::atomic<uint64_t>*>(&slot->seq)->load(std::memory_order_acquire);
        if (seq != head[r] + 1) break;
        Pending p;
        p.rank = r;
        p.seq = head[r];
        std::memcpy(&p.op, slot, sizeof(GinEmuOp));
        reinterpret_cast<std::atomic<uint64_t>*>(&slot->seq)->store(0, std::memory_order_release);  // the slot is free
        p.ready = now + uniform_us(chaos_.delay_us);
        if (p.op.bytes > 0) {
          unread[r].emplace(p.seq, Clock::time_point::max());
          in_flight[{r, p.op.peer}].insert(p.seq);
        }
        pending.push_back(p);
        ++head[r];
        progress = true;
      }
    }
    // 2. Deliver a batch of puts' data: each drawn from the oldest `reorder` ready ones left.
    std::vector<size_t> ready;
    for (size_t i = 0; i < pending.size() && ready.size() < kMaxBatch + (size_t)chaos_.reorder; ++i)
      if (!pending[i].landed && pending[i].op.bytes > 0 && pending[i].ready <= now) ready.push_back(i);
    std::vector<Pending*> batch;
    size_t bytes = 0;
    while (!ready.empty() && batch.size() < kMaxBatch && bytes < kMaxBatchBytes) {
      const size_t j = rng() % std::min<size_t>(ready.size(), (size_t)chaos_.reorder);
      batch.push_back(&pending[ready[j]]);
      bytes += batch.back()->op.bytes;
      ready.erase(ready.begin() + (ptrdiff_t)j);
    }
    if (!batch.empty()) {
      move(batch);
      const Clock::time_point t = Clock::now();
      for (Pending* p : batch) {
        unread[p->rank][p->seq] = t + uniform_us(chaos_.slow_flush_us);
        in_flight[{p->rank, p->op.peer}].erase(p->seq);
        p->landed = true;
        p->signal_at = t + uniform_us(chaos_.late_signal_us);
      }
      progress = true;
    }
    // 3. Signals whose data, and every earlier put to the same peer, landed; then the ops done.
    for (Pending& p : pending) {
      if (p.op.bytes == 0 && !p.landed) {  // a signal alone: "lands" once ready
        if (p.ready > now) continue;
        p.landed = true;
        p.signal_at = now + uniform_us(chaos_.late_signal_us);
      }
      if (!p.landed || p.op.signal < 0 || p.signal_at > now) continue;
      const std::set<uint64_t>& earlier = in_flight[{p.rank, p.op.peer}];
      if (!earlier.empty() && *earlier.begin() < p.seq) continue;
      if (p.op.peer < 0 || p.op.peer >= nranks_ || p.op.signal >= signal_count_) {
        std::lock_guard<std::mutex> lk(err_mu_);
        error_ = "rank " + std::to_string(p.rank) + " signalled rank " + std::to_string(p.op.peer) + "'s signal " +
                 std::to_string(p.op.signal) + " (the team has " + std::to_string(nranks_) + " ranks and " +
                 std::to_string(signal_count_) + " signals)";
        return;
      }
      auto* sig = reinterpret_cast<std::atomic<uint64_t>*>(signals_ + (size_t)p.op.peer * signal_count_ + p.op.signal);
      sig->fetch_add(p.op.value, std::memory_order_release);
      p.op.signal = -1;  // applied
      progress = true;
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return p.landed && p.op.signal < 0; }),
                  pending.end());
    // 4. Flush: every op below the first whose source is unread (or read too recently).
    for (int r = 0; r < nranks_; ++r) {
      auto& u = unread[r];
      while (!u.empty() && u.begin()->second <= now) u.erase(u.begin());
      const uint64_t mark = u.empty() ? head[r] : u.begin()->first;
      reinterpret_cast<std::atomic<uint64_t>*>(consumed_ + (size_t)r * kConsumedStride)->store(mark, std::memory_order_release);
    }
    // 5. Drain: the ops taken when the request was first seen are all done.
    if (drain_request > drain_seen) {
      drain_seen = drain_request;
      drain_mark = head;
    }
    if (drain_seen > quiet_after_.load()) {
      bool done = true;
      for (const Pending& p : pending) done = done && p.seq >= drain_mark[p.rank];
      for (int r = 0; r < nranks_ && done; ++r) done = unread[r].empty() || unread[r].begin()->first >= drain_mark[r];
      if (done) quiet_after_.store(drain_seen);
    }
    bool quiet = pending.empty();
    for (int r = 0; r < nranks_ && quiet; ++r) quiet = unread[r].empty();
    if (!progress) std::this_thread::sleep_for(std::chrono::microseconds(quiet ? 50 : 5));
  }
}

}  // namespace tw
