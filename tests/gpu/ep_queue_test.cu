// tests/gpu/ep_queue_test.cu — the low-latency EP on a virtual team whose ranks' streams share a
// GPU hardware queue.
//
//   EpQueue.LowLatencyStepsWithTwoRanksInOneQueue  (virtual teams of 2 or more ranks) rank 0's
//       stream and rank 1's are CUDA_DEVICE_MAX_CONNECTIONS streams apart in creation order (one
//       hardware queue, if CUDA hands the queues to new streams in turn), and rank 1 enqueues each
//       send 200 ms after the others (every rank's copies done first). Two steps of identity
//       experts (ep_identity.hpp: y written into the combine block, then copied in by
//       combine_send), counts and the combined output exact against the host. Written for the
//       rule in Comm::launched (no rank enqueues work behind a kernel that waits for its peers
//       before every rank has enqueued its own): the low-latency send follows it since this test,
//       but the test also passed on the code before (2026-12-05-ll-combine-h100): the shared queue
//       it aims at did not show there, so it guards a late rank, not a demonstrated deadlock.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common.cuh"
#include "ep_identity.hpp"
#include "tilewire/ops/ep.hpp"

namespace tw_test {
namespace {

TEST(EpQueue, LowLatencyStepsWithTwoRanksInOneQueue) {
  TW_SKIP_UNLESS_GPUS(1);
  if (virtual_ranks() < 2) GTEST_SKIP() << "needs a virtual team of 2 or more ranks (TILEWIRE_TEST_VIRTUAL): ranks sharing one GPU";
  const int P = team_size();
  constexpr int N = 32, H = 256, K = 4, L = 8;
  const int E = L * P;
  const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const int queues = std::min(32, c ? std::atoi(c) : 8);  // CUDA has at most 32
  if (P > queues + 1) GTEST_SKIP() << P << " ranks: more than one more than the " << queues << " hardware queues";
  // Made on this thread one after another: stream k lands in queue (first + k) mod queues.
  TW_CUDA_CHECK(cudaSetDevice(0));
  struct Streams {
    std::vector<cudaStream_t> v;
    ~Streams() {
      for (cudaStream_t st : v) cudaStreamDestroy(st);
    }
  } made;
  for (int k = 0; k <= queues; ++k) {
    made.v.push_back(nullptr);
    TW_CUDA_CHECK(cudaStreamCreateWithFlags(&made.v.back(), cudaStreamNonBlocking));
  }
  const std::vector<cudaStream_t>& streams = made.v;
  const auto ids_of = [&](int q) {  // distinct experts per token
    std::vector<int64_t> ids((size_t)N * K);
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < K; ++j) ids[(size_t)t * K + j] = (int64_t)((mix(411, q, t) % (uint64_t)E + (uint64_t)j * (E / K)) % E);
    return ids;
  };
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    const cudaStream_t s = me == 0 ? streams[0] : me == 1 ? streams[queues] : streams[me - 1];
    tw::EpBuffer buf(comm, identity_config(N, H, K, E));
    const std::vector<int64_t> ids = ids_of(me);
    const IdentityExperts ref = identity_experts(412, me, P, N, H, K, L, ids_of);
    IdentityBuffers io(ref, ids, s);
    // Step 1's y, outside the combine block: combine_send copies it in with its whole grid (step
    // 0 writes y into the block, where one CTA releases the flags). [L, P x N, H], the receive's shape.
    DeviceBuffer ycopy((size_t)L * P * N * H * 2);
    comm.sync(s);
    comm.barrier();  // every rank's allocations are made before any rank's kernel waits for it
    // Rank 1 enqueues each send 200 ms late, after every rank's copies (identity_step).
    const auto late = [&] {
      if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    };
    for (int step = 0; step < 2; ++step)
      identity_step(comm, buf, io, ref, N, L, step == 0 ? nullptr : &ycopy, s, "step " + std::to_string(step) + ": ",
                    wrong[me], late);
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

}  // namespace
}  // namespace tw_test
