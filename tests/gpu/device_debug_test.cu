// tests/gpu/device_debug_test.cu — the device API's debug checks (TILEWIRE_DEVICE_DEBUG).
//
// The device API is header-only: this file builds it with TILEWIRE_DEVICE_DEBUG, as a user's
// debug build would. A check that fails prints what was wrong and traps, which leaves the CUDA
// context unusable, so each case runs in a child process (a death test, "threadsafe" style).
//
//   DeviceDebugDeathTest.SignalIndexOutOfRange   signalling counter signal_count (one past the
//       last) traps with the rank, the block, the index and the bound; without the check the
//       store lands in the barrier inboxes that follow the counters in the control window
//   DeviceDebugDeathTest.PeerOutsideTheTeam      a pointer to LSA peer lsa_size traps likewise
#define TILEWIRE_DEVICE_DEBUG 1
#include <unistd.h>

#include <cstdio>

#include "common.cuh"
#include "tilewire/device.cuh"

namespace {
using namespace tw_test;
namespace dev = tw::dev;

enum ChildExit { kKernelFailed = 3, kKernelReturned = 5, kSetupFailed = 6 };

__global__ void signal_past_the_end(const __grid_constant__ tw::DevCtx ctx) {
  dev::signal(dev::Thread{}, ctx, ctx.rank, ctx.signal_count, 1);
}
__global__ void peer_past_the_team(const __grid_constant__ tw::DevCtx ctx, tw::DevWindow w) {
  *dev::lsa_ptr<int>(ctx, w, 0, ctx.lsa_size) = 1;
}

// One rank: launch, synchronize; exit kKernelFailed when the kernel trapped, else kKernelReturned.
template <class Launch>
[[noreturn]] void child(Launch launch) {
  alarm(40);
  // Device printf reaches the process's stdout at the next synchronization; the death test reads
  // the child's stderr.
  std::fflush(stdout);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  try {
    tw::Comm::run_virtual(0, 1, [&](tw::Comm& comm) {
      Stream s;
      tw::Window w = comm.alloc_window(4096);
      launch(comm, w, s);
      const cudaError_t e = cudaStreamSynchronize(s);
      std::fprintf(stderr, "kernel: %s\n", cudaGetErrorString(e));
      std::fflush(stderr);
      _exit(e == cudaSuccess ? kKernelReturned : kKernelFailed);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
  }
  _exit(kSetupFailed);
}

TEST(DeviceDebugDeathTest, SignalIndexOutOfRange) {
  TW_SKIP_UNLESS_GPUS(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child([](tw::Comm& c, tw::Window&, cudaStream_t s) { signal_past_the_end<<<1, 1, 0, s>>>(c.dev_ctx()); }),
              ::testing::ExitedWithCode(kKernelFailed),
              "rank 0 block 0: signal index [0-9]+ is outside \\[0, [0-9]+\\) \\(CommConfig::signal_count\\)");
}

TEST(DeviceDebugDeathTest, PeerOutsideTheTeam) {
  TW_SKIP_UNLESS_GPUS(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child([](tw::Comm& c, tw::Window& w, cudaStream_t s) { peer_past_the_team<<<1, 1, 0, s>>>(c.dev_ctx(), w.dev()); }),
              ::testing::ExitedWithCode(kKernelFailed), "rank 0 block 0: lsa_ptr peer 1 is not in the LSA team \\(size 1\\)");
}

}  // namespace
