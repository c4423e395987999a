// tests/gpu/timeout_test.cu — device waits end; they never hang.
//
// A wait that can never be satisfied must end within TILEWIRE_TIMEOUT_MS with a tw::Error
// (kTimeout) carrying the diagnostic (rank, block, thread, what, expected, seen). The wait traps
// its kernel, which leaves the CUDA context unusable, so every case runs in a child process: a
// GoogleTest death test in the "threadsafe" style (the child re-executes this binary and runs only
// this test). The child prints what happened to stderr and _exit()s with a code saying what it
// was; the parent matches code and message and bounds the elapsed time.
//
//   TimeoutDeathTest.UnsignalledWaitTimesOut   1 rank: wait_signal on a signal nobody sets
//   TimeoutDeathTest.LoneBarrierTimesOut       2+ ranks: rank 0 enters lsa_barrier, the others never do
//   TimeoutDeathTest.FusedPeerNeverJoins       2+ ranks: rank 0 runs gemm_allreduce, the others never
//                                              do: the wait for a peer's partial ends in the diagnostic
//   TimeoutDeathTest.FusedReduceScatterPeerNeverJoins  the same for gemm_reducescatter (both at M =
//                                              256: the decode paths, a GEMM and then the waiting kernel)
// The children run on the test team's backend (common.cuh): 2 GPUs, or the virtual team's P ranks
// on one GPU (TILEWIRE_TEST_VIRTUAL), where the ranks that never arrive are virtual.
//   TimeoutDeathTest.DestroyAfterTimeoutDoesNotHang  the bound from CommConfig::timeout_ms; after the
//                                              timeout the communicator is aborted, and its
//                                              destruction and the exit take seconds
//   TimeoutDeathTest.FailedRankEndsPeersWaits  2+ ranks: rank 0 throws on the host while its peers'
//                                              kernels wait for it: the aborted peers' waits end
//                                              at once, the team returns rank 0's error in seconds
//   TimeoutDeathTest.OneLaneWaitReturns        lane 0 alone waits (Thread group) on a signal that is
//                                              already satisfied while its warp's other lanes sit in
//                                              __syncthreads: it must return, not deadlock
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <thread>

#include "common.cuh"
#include "tilewire/device.cuh"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/ops/gemm_scatter_gather.hpp"

namespace {
using namespace tw_test;
namespace dev = tw::dev;

// How a child ended.
enum ChildExit {
  kCaughtTimeout = 3,
  kOtherError = 4,
  kWaitReturned = 5,
  kSetupFailed = 6,
  kDestroyedAfterTimeout = 7,
  kPeersEnded = 8,
  kHung = 9
};

__global__ void wait_unsignalled(const __grid_constant__ tw::DevCtx ctx, int sig) {
  dev::wait_signal(dev::Thread{}, ctx, sig, 1, cuda::memory_order_acquire, "test.never_signalled");
}
__global__ void lone_barrier(const __grid_constant__ tw::DevCtx ctx) {
  dev::lsa_barrier(dev::Cta{}, ctx, 0, cuda::memory_order_acq_rel, "test.lone_barrier");
}

// Rank 0 of a child: run `launch`, wait for `s`; exit kCaughtTimeout with the diagnostic on stderr
// when the wait timed out, kOtherError on another error, kWaitReturned (printing `if_returned`) when
// it ended. On a virtual team the timeout can surface from the op's own call (its launch
// rendezvous waits for the peers that never come, and ends on this rank's device fault).
[[noreturn]] void sync_and_exit(tw::Comm& comm, cudaStream_t s, const char* if_returned,
                                const std::function<void()>& launch) {
  try {
    launch();
    comm.sync(s);
  } catch (const tw::Error& e) {
    const bool timeout = e.code() == tw::Errc::kTimeout;
    std::fprintf(stderr, "%s (%s): %s\n", timeout ? "TIMEOUT" : "ERROR", tw::errc_name(e.code()), e.what());
    std::fflush(stderr);
    _exit(timeout ? kCaughtTimeout : kOtherError);
  }
  std::fprintf(stderr, "%s\n", if_returned);
  _exit(kWaitReturned);
}

// A child's team: `n` ranks, one per GPU 0..n-1, or the test team's virtual ranks on GPU 0.
void run_child_team(int n, const std::function<void(tw::Comm&)>& fn, const tw::CommConfig& cfg = {}) {
  if (virtual_ranks() > 0) {
    tw::Comm::run_virtual(0, std::max(n, virtual_ranks()), fn, cfg);
    return;
  }
  std::vector<int> devs(n);
  std::iota(devs.begin(), devs.end(), 0);
  tw::Comm::run_local(devs, fn, cfg);
}

// Child body: a communicator over `n` ranks with a 500 ms bound; rank 0 runs `launch` and syncs,
// the other ranks never take part (they sleep until rank 0 ends the process). Never returns.
[[noreturn]] void timeout_child(int n, const std::function<void(tw::Comm&, cudaStream_t)>& launch) {
  alarm(40);  // backstop: should the timeout itself fail, SIGALRM ends the child (and the test fails)
  setenv("TILEWIRE_TIMEOUT_MS", "500", 1);  // read when the communicator is made
  try {
    run_child_team(n, [&](tw::Comm& comm) {
      if (comm.rank() != 0) {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return;
      }
      Stream s;
      sync_and_exit(comm, s, "the wait returned", [&] { launch(comm, s); });
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
  }
  _exit(kSetupFailed);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "waited N ms" with N >= 500: the bound was honoured, not cut short.
#define TW_WAITED_500 "waited (5[0-9][0-9]|[6-9][0-9][0-9]|[0-9][0-9][0-9][0-9]+) ms"

TEST(TimeoutDeathTest, UnsignalledWaitTimesOut) {
  TW_SKIP_UNLESS_GPUS(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(timeout_child(1, [](tw::Comm& c, cudaStream_t s) { wait_unsignalled<<<1, 1, 0, s>>>(c.dev_ctx(), 7); }),
              ::testing::ExitedWithCode(kCaughtTimeout),
              "TIMEOUT.*rank 0 block 0 thread 0 " TW_WAITED_500 " in 'test.never_signalled' for >= 1, saw 0");
  EXPECT_LT(seconds_since(t0), 10.0) << "child start, NCCL init and a 500 ms timeout";
}

TEST(TimeoutDeathTest, LoneBarrierTimesOut) {
  TW_SKIP_UNLESS_RANKS(2);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(timeout_child(2, [](tw::Comm& c, cudaStream_t s) { lone_barrier<<<1, 128, 0, s>>>(c.dev_ctx()); }),
              ::testing::ExitedWithCode(kCaughtTimeout),
              "TIMEOUT.*rank 0 block 0 thread 0 " TW_WAITED_500 " in 'test.lone_barrier' for >= 1, saw 0");
  EXPECT_LT(seconds_since(t0), 10.0);
}

// ---------------------------------------------------------------- fused op, a peer that never joins
// Both ranks allocate the windows (collective) and zero the workspace; only rank 0 calls the op
// (gemm_allreduce, or gemm_reducescatter with `reduce_scatter`), kFused at M = 256: the decode
// path, the plain GEMM and then a kernel that waits on the peers. Rank 0 must end in that
// kernel's device-wait diagnostic, not in a host rendezvous held for the host bound.
[[noreturn]] void fused_lone_child(bool reduce_scatter) {
  alarm(40);
  setenv("TILEWIRE_TIMEOUT_MS", "500", 1);
  try {
    run_child_team(2, [&](tw::Comm& comm) {
      Stream s;
      const int M = 256, N = 512, K = 128, P = comm.nranks();
      DeviceBuffer A(M * K * 2), B(N * K * 2), C_shard(size_t(M) * N * 2);
      fill(A.data(), tw::DType::kBFloat16, M * K, Fill::kRandom, 5, comm.rank(), s);
      fill(B.data(), tw::DType::kBFloat16, N * K, Fill::kRandom, 6, comm.rank(), s);
      tw::Window C = comm.alloc_window(size_t(M) * N * 2);
      tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), M, N, K, tw::DType::kBFloat16, tw::BLayout::kNK, nullptr};
      tw::GemmReduceScatterArgs r{A.data(), B.data(), C_shard.data(), M, N, K, tw::DType::kBFloat16, tw::BLayout::kNK, nullptr};
      tw::Window ws = comm.alloc_window(reduce_scatter ? tw::gemm_reducescatter_workspace_size(M, N, tw::DType::kBFloat16, P)
                                                       : tw::workspace_size(a, P, {}));
      a.workspace = r.workspace = ws.data();
      TW_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), s));
      TW_CUDA_CHECK(cudaStreamSynchronize(s));
      comm.barrier();
      if (comm.rank() != 0) {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return;
      }
      if (reduce_scatter) {
        tw::TpConfig fused;
        fused.path = tw::TpPath::kFused;
        sync_and_exit(comm, s, "the fused op returned without its peer", [&] { tw::gemm_reducescatter(comm, r, fused, s); });
      }
      tw::GemmAllReduceConfig fused;
      fused.path = tw::GemmAllReducePath::kFused;
      sync_and_exit(comm, s, "the fused op returned without its peer", [&] { tw::gemm_allreduce(comm, a, fused, s); });
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
  }
  _exit(kSetupFailed);
}

// Rank 0 alone in `op`'s decode path: its device wait ends in the diagnostic within the bound.
void expect_lone_fused_times_out(bool reduce_scatter, const std::string& op) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(fused_lone_child(reduce_scatter), ::testing::ExitedWithCode(kCaughtTimeout),
              "TIMEOUT.*rank 0 block [0-9]+ thread [0-9]+ " TW_WAITED_500 " in '" + op + "\\.[a-z_]+' for >= 1, saw 0");
  EXPECT_LT(seconds_since(t0), 15.0);
}

TEST(TimeoutDeathTest, FusedPeerNeverJoins) {
  TW_SKIP_UNLESS_RANKS(2);
  TW_SKIP_UNLESS_SM90();
  expect_lone_fused_times_out(false, "gemm_allreduce");
}

TEST(TimeoutDeathTest, FusedReduceScatterPeerNeverJoins) {
  TW_SKIP_UNLESS_RANKS(2);
  TW_SKIP_UNLESS_SM90();
  expect_lone_fused_times_out(true, "gemm_reducescatter");
}

// ------------------------------------------------ after a timeout, teardown and exit never hang
// The bound from CommConfig::timeout_ms (no environment); rank 0's wait times out, the
// communicator is aborted by the fault, and destroying it (run_child_team returning) and exiting
// take seconds. The other ranks return at once: their teardown must not wait for rank 0.
[[noreturn]] void destroy_after_timeout_child() {
  alarm(40);
  unsetenv("TILEWIRE_TIMEOUT_MS");
  tw::CommConfig cfg;
  cfg.timeout_ms = 500;
  bool timed_out = false, aborted = false;
  try {
    run_child_team(1, [&](tw::Comm& comm) {
      if (comm.rank() != 0) return;
      Stream s;
      try {
        wait_unsignalled<<<1, 1, 0, s>>>(comm.dev_ctx(), 7);  // nothing queued behind it: no rendezvous
        comm.sync(s);
      } catch (const tw::Error& e) {
        timed_out = e.code() == tw::Errc::kTimeout;
        std::fprintf(stderr, "%s\n", e.what());
      }
      aborted = comm.aborted();
    }, cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "after the timeout: %s\n", e.what());
  }
  std::fprintf(stderr, "timed out %d, aborted %d, communicator destroyed\n", (int)timed_out, (int)aborted);
  _exit(timed_out && aborted ? kDestroyedAfterTimeout : kOtherError);
}

TEST(TimeoutDeathTest, DestroyAfterTimeoutDoesNotHang) {
  TW_SKIP_UNLESS_GPUS(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(destroy_after_timeout_child(), ::testing::ExitedWithCode(kDestroyedAfterTimeout),
              TW_WAITED_500 " in 'test.never_signalled'.*timed out 1, aborted 1, communicator destroyed");
  EXPECT_LT(seconds_since(t0), 15.0) << "a 500 ms bound, then an aborted communicator's teardown";
}

// --------------------------------------------- a rank that fails on the host ends its peers' waits
// A 60 s bound; rank 0 throws on the host after the team is made, while every other rank's
// kernel waits for a signal from it. The team's failure path aborts the peers' communicators
// (request_abort: from rank 0's thread), whose device waits then end at once: the team returns
// rank 0's error within seconds, not after the 60 s bound.
[[noreturn]] void failed_rank_child() {
  alarm(40);  // before the abort reached the device, the peers waited out the 60 s bound: SIGALRM
  setenv("TILEWIRE_TIMEOUT_MS", "60000", 1);
  const auto t0 = std::chrono::steady_clock::now();
  std::string why;
  try {
    run_child_team(2, [&](tw::Comm& comm) {
      comm.barrier();
      if (comm.rank() == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the peers' kernels are waiting
        throw std::runtime_error("rank 0 failed on the host");
      }
      Stream s;
      wait_unsignalled<<<1, 1, 0, s>>>(comm.dev_ctx(), 7);
      comm.sync(s);
    });
  } catch (const std::exception& e) {
    why = e.what();
  }
  const double t = seconds_since(t0);
  std::fprintf(stderr, "team ended after %.1f s: %s\n", t, why.c_str());
  _exit(why == "rank 0 failed on the host" && t < 20.0 ? kPeersEnded : kOtherError);
}

TEST(TimeoutDeathTest, FailedRankEndsPeersWaits) {
  TW_SKIP_UNLESS_RANKS(2);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(failed_rank_child(), ::testing::ExitedWithCode(kPeersEnded), "team ended after .* s: rank 0 failed on the host");
}

// ---------------------------------------------------------------- a lone lane must not deadlock
// Lane 0 waits with the single-thread group on a signal already >= 0; lanes 1..31 go straight to
// __syncthreads. A wait that needs the whole warp (a full-mask shuffle) would deadlock here.
__global__ void one_lane_wait(const __grid_constant__ tw::DevCtx ctx, int* done) {
  if (threadIdx.x == 0) dev::wait_signal(dev::Thread{}, ctx, 9, 0);
  __syncthreads();
  if (threadIdx.x == 0) *done = 1;
}

[[noreturn]] void one_lane_child() {
  alarm(40);
  try {
    run_child_team(1, [&](tw::Comm& comm) {
      Stream s;
      DeviceBuffer done(sizeof(int));
      one_lane_wait<<<1, 32, 0, s>>>(comm.dev_ctx(), static_cast<int*>(done.data()));
      const auto t0 = std::chrono::steady_clock::now();
      cudaError_t e;
      while ((e = cudaStreamQuery(s)) == cudaErrorNotReady && seconds_since(t0) < 5.0)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (e == cudaErrorNotReady) {
        std::fprintf(stderr, "HANG: lane 0's wait_signal(Thread) did not return within 5 s\n");
        _exit(kHung);
      }
      if (e != cudaSuccess) {
        std::fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(e));
        _exit(kOtherError);
      }
      std::fprintf(stderr, "one-lane wait returned\n");
      _exit(0);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
  }
  _exit(kSetupFailed);
}

TEST(TimeoutDeathTest, OneLaneWaitReturns) {
  TW_SKIP_UNLESS_GPUS(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(one_lane_child(), ::testing::ExitedWithCode(0), "one-lane wait returned");
}

}  // namespace
