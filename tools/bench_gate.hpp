// tools/bench_gate.hpp — how the rank threads of a bench (one process, one thread per GPU,
// tw::Comm::run_local) start each timed region together, and meet on the host without NCCL.
//
//   every rank, per repeat:   gate.hold(stream, gen)     one-thread kernel: the stream waits for the flag
//                             ev0; the whole repeat; ev1 enqueued behind it
//                             barrier.arrive_and_wait()  every rank has enqueued everything
//   rank 0:                   gate.open(gen)             one host store: all GPUs start together
//
// so host-thread launch skew stays out of every variant's time alike. The barrier is a host
// rendezvous, never comm.barrier(): that is an NCCL collective, which NCCL orders behind the
// collectives already queued behind the gates, which wait for the barrier: a deadlock.
//
// (tools/bench_allreduce.cu still has its own copy of the gate; it can switch to this one.)
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace tw::cli {

// Rendezvous of `n` rank threads. Bounded: a wait longer than `timeout` throws tw::Error(kTimeout)
// (a peer stuck or gone). Breakable: a rank that fails calls break_all() before it unwinds, and
// every waiting or later arrival throws tw::Error(kState) instead of waiting for it forever.
class HostBarrier {
 public:
  explicit HostBarrier(int n, std::chrono::seconds timeout = std::chrono::seconds(300));
  void arrive_and_wait(const char* where);  // `where` names the meeting point in the error message
  void break_all() noexcept;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  const std::chrono::seconds timeout_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

// One pinned, host-mapped, portable flag for the process (every rank thread uses the same one).
// Generations only grow: hold(s, g) lets the stream pass once the flag has reached g.
class StartGate {
 public:
  StartGate();  // needs a CUDA context (any device): cudaHostAlloc
  ~StartGate();
  StartGate(const StartGate&) = delete;
  StartGate& operator=(const StartGate&) = delete;

  // Enqueue on `stream` a 1-thread kernel that spins until the flag reaches `gen`. Bounded: after
  // ~10 s it lets the stream go and records `gen` as expired (that repeat's times then include
  // the skew; nothing hangs).
  void hold(cudaStream_t stream, uint32_t gen) const;
  void open(uint32_t gen) const;  // host: raise the flag to `gen`
  // After the stream passed hold(gen): whether some rank's gate for `gen` gave up waiting.
  bool expired(uint32_t gen) const { return flag_[1] == gen; }

 private:
  volatile uint32_t* flag_ = nullptr;  // [0]: the open generation; [1]: the last expired one
};

}  // namespace tw::cli
