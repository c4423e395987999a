// measure_clock_offsets: signal ping-pong between rank 0 and each peer, one thread per GPU.
//
//   rank 0                         rank q (q = 1 .. P-1, one after the other, `rounds` each)
//   t0 = globaltimer
//   signal(q, S, +1)  ----------->  wait own S >= base_q + r + 1
//                                   t1 = globaltimer
//   wait own S >= base_0 + k  <----  signal(0, S, +1)
//   t2 = globaltimer
//
// S = clock_sync_signal(comm). Counters only grow, so each rank first reads its own S (`base`),
// then a host barrier makes sure nobody signals before every base is read. The stamps land in
// a zeroed table of (P x rounds x 3) + P (timer ticks) uint64; a host sum gives every rank the
// whole table, and clock_sync_from_stamps (trace.cpp) does the arithmetic.
#include <cuda_runtime.h>

#include <string>

#include "../runtime/op_entry.hpp"
#include "../runtime/stream_guard.hpp"
#include "tilewire/device/signal.cuh"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/trace/trace.hpp"

namespace tw::trace {
namespace {

constexpr int kTickSamples = 64;                     // timer steps observed to find the tick
constexpr uint64_t kTickBudgetNs = 20ull * 1000000;  // give up looking after 20 ms (then tick = 0)
constexpr int kMaxRounds = 4096;

// One thread: this rank's own counter S now (relaxed: nothing to order), and the smallest step
// of %globaltimer seen over kTickSamples changes.
__global__ void clock_probe(const __grid_constant__ DevCtx ctx, int sig, uint64_t* base, uint64_t* tick) {
  *base = dev::read_signal(ctx, sig, cuda::memory_order_relaxed);
  const uint64_t start = ptx::globaltimer();
  uint64_t prev = start, best = ~0ull;
  int seen = 0;
#pragma unroll 1
  while (seen < kTickSamples) {
    const uint64_t t = ptx::globaltimer();
    if (t != prev) {
      best = t - prev < best ? t - prev : best;
      prev = t;
      ++seen;
    }
    if (t - start > kTickBudgetNs) break;
  }
  *tick = seen > 0 ? best : 0;
}

// One thread per rank. Signals are relaxed both ways: they carry no data, and a release fence
// on one side only would bias the midpoint. Every wait is bounded (TILEWIRE_TIMEOUT_MS).
__global__ void clock_pingpong(const __grid_constant__ DevCtx ctx, int sig, uint64_t base, int rounds,
                               uint64_t* stamps) {
  const dev::Thread one{};
  constexpr auto relaxed = cuda::memory_order_relaxed;
  if (ctx.rank == 0) {
    uint64_t expect = base;
#pragma unroll 1
    for (int q = 1; q < ctx.nranks; ++q) {
#pragma unroll 1
      for (int r = 0; r < rounds; ++r) {
        const uint64_t t0 = ptx::globaltimer();
        dev::signal(one, ctx, q, sig, 1, dev::SignalOp::kAdd, relaxed);
        dev::wait_signal(one, ctx, sig, ++expect, relaxed, "clock_sync.reply");
        const uint64_t t2 = ptx::globaltimer();
        uint64_t* s = stamps + ((size_t)q * rounds + r) * 3;
        s[0] = t0;
        s[2] = t2;
      }
    }
  } else {
#pragma unroll 1
    for (int r = 0; r < rounds; ++r) {
      dev::wait_signal(one, ctx, sig, base + (uint64_t)r + 1, relaxed, "clock_sync.ping");
      const uint64_t t1 = ptx::globaltimer();
      dev::signal(one, ctx, 0, sig, 1, dev::SignalOp::kAdd, relaxed);
      stamps[((size_t)ctx.rank * rounds + r) * 3 + 1] = t1;
    }
  }
}

struct DeviceBuffer {
  uint64_t* p = nullptr;
  explicit DeviceBuffer(size_t n) { TW_CUDA_CHECK(cudaMalloc(&p, n * sizeof(uint64_t))); }
  ~DeviceBuffer() { cudaFree(p); }
};

}  // namespace

int clock_sync_signal(const Comm& comm) { return comm.dev_ctx().signal_count - 1; }

ClockSync measure_clock_offsets(Comm& comm, int rounds) {
  const char* op = "measure_clock_offsets";
  const auto check = [&] {
    if (rounds >= 1 && rounds <= kMaxRounds) return Status{};
    return Status{false, std::string(op) + ": rounds must be in [1, " + std::to_string(kMaxRounds) + "], got " +
                             std::to_string(rounds)};
  };
  comm.require_usable(op);  // before the stream is made: an unusable communicator says so first
  StreamGuard stream;
  // Ordered after this communicator's calls on other streams; every rank runs the same rounds.
  const OpEntry entry(comm, op, stream.s, check, [&] { comm.agree_on_call(op, {{"rounds", std::to_string(rounds)}}); });
  const int P = comm.nranks();
  const DevCtx& ctx = comm.dev_ctx();
  const int sig = clock_sync_signal(comm);
  const size_t table = (size_t)P * rounds * 3;
  const size_t n = table + P;

  std::vector<uint64_t> host(n);
  {                              // the device buffer lives in this scope (see below)
    DeviceBuffer stamps(n + 1);  // + 1: this rank's base
    uint64_t* base_d = stamps.p + n;
    TW_CUDA_CHECK(cudaMemsetAsync(stamps.p, 0, n * sizeof(uint64_t), stream.s));
    clock_probe<<<1, 1, 0, stream.s>>>(ctx, sig, base_d, stamps.p + table + comm.rank());
    comm.check_launch("clock_probe");
    uint64_t base = 0;
    TW_CUDA_CHECK(cudaMemcpyAsync(&base, base_d, sizeof(base), cudaMemcpyDeviceToHost, stream.s));
    comm.sync(stream.s);

    if (P > 1) {
      comm.barrier();  // every rank has read its base: from here on, signals on S are this call's
      clock_pingpong<<<1, 1, 0, stream.s>>>(ctx, sig, base, rounds, stamps.p);
      comm.check_launch("clock_pingpong");
      comm.launched("clock_pingpong");
      comm.sync(stream.s);  // a timed-out wait becomes kTimeout with its diagnostic here
    }
    TW_CUDA_CHECK(cudaMemcpyAsync(host.data(), stamps.p, n * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream.s));
    comm.sync(stream.s);
  }
  // The stamps are freed above, before the host collective below lets any rank return:
  // cudaFree waits for the whole device, so on a virtual team a rank still freeing after its
  // peers returned waited for whatever they launched next, and a fused kernel spinning for this
  // rank's tiles then waited for it in turn (a traced `bench gemm-allreduce` at 4 virtual ranks
  // timed out so). Test: Trace.PeersLaunchRightAfterClockSync.
  comm.allreduce_host(host.data(), n, HostReduce::kSum);  // each rank wrote only its own stamps
  return clock_sync_from_stamps(P, rounds, host);
}

}  // namespace tw::trace
