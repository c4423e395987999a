// tests/gpu/ep_gin_test.cu — the EP kernels' GIN puts and the life of their sources.
//
//   EpGin.SourcesReadWhenKernelsEnd  (team in nodes) after every step of a high-throughput and a
//       low-latency dispatch and combine, a kernel on the same stream compares the rank's GIN ops
//       posted with those whose source has been read (the emulated GIN's flush mark): every one
//       must be read when the step's kernels have ended. The emulation delays puts and marks
//       sources read late (TILEWIRE_GIN_EMU_DELAY_US, _SLOW_FLUSH_US), so a kernel that ends
//       without a GIN flush leaves some unread. The NCCL backend frees a window right after the
//       last call on it (Comm::release_window); a put still reading its staging then would read
//       freed memory.
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/device.cuh"
#include "tilewire/ops/ep.hpp"

namespace {
using namespace tw_test;

// out[0] = GIN ops this rank posted, out[1] = the first op whose source is not yet read.
__global__ void gin_source_state(const __grid_constant__ tw::DevCtx ctx, unsigned long long* out) {
  out[0] = *reinterpret_cast<volatile unsigned long long*>(ctx.gin_emu.tail);
  out[1] = *reinterpret_cast<const volatile uint64_t*>(ctx.gin_emu.consumed);
}

TEST(EpGin, SourcesReadWhenKernelsEnd) {
  TW_SKIP_UNLESS_RANKS(2);
  const int P = team_size(), L = ranks_per_node();
  if (virtual_ranks() == 0 || L == 0 || L == P) GTEST_SKIP() << "needs a virtual team in nodes (TILEWIRE_TEST_RANKS_PER_NODE)";
  // Puts wait up to 2 ms to move and their sources count as read up to 2 ms after that.
  ScopedEnv s1("TILEWIRE_GIN_EMU_DELAY_US", "2000"), s2("TILEWIRE_GIN_EMU_SLOW_FLUSH_US", "2000");
  constexpr int kTokens = 64, kTopk = 4, kExpertsPerRank = 4, kHidden = 2048;
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    DeviceBuffer state(16);
    const auto expect_read = [&](const std::string& step) {
      gin_source_state<<<1, 1, 0, s>>>(comm.dev_ctx(), static_cast<unsigned long long*>(state.data()));
      TW_CUDA_CHECK(cudaGetLastError());
      const std::vector<unsigned long long> v = download<unsigned long long>(state.data(), 2, s);
      if (v[1] < v[0])
        wrong[me].push_back(step + ": " + std::to_string(v[0] - v[1]) + " of " + std::to_string(v[0]) +
                            " GIN ops still reading their source when the kernels ended");
      // Every rank's copy is done before any rank's next step waits for its peers: under
      // compute-sanitizer a copy waits behind the kernels running on the device.
      comm.barrier();
    };
    // Token t of rank r picks kTopk distinct experts spread over every rank.
    std::vector<int64_t> idx((size_t)kTokens * kTopk);
    const int E = kExpertsPerRank * P;
    for (int t = 0; t < kTokens; ++t)
      for (int j = 0; j < kTopk; ++j) idx[(size_t)t * kTopk + j] = (int64_t)((mix(7, me, t) + (uint64_t)j * (E / kTopk)) % E);
    std::vector<uint16_t> x((size_t)kTokens * kHidden);
    for (size_t i = 0; i < x.size(); ++i) x[i] = f32_to_bf16((float)((mix(11, me, i) % 2001) - 1000) / 1000.0f);
    std::vector<float> w((size_t)kTokens * kTopk, 0.25f);
    DeviceBuffer xd(x.size() * 2), idxd(idx.size() * 8), wd(w.size() * 4), out((size_t)kTokens * kHidden * 2);
    upload(xd.data(), x, s), upload(idxd.data(), idx, s), upload(wd.data(), w, s);
    for (tw::EpMode mode : {tw::EpMode::kHighThroughput, tw::EpMode::kLowLatency}) {
      const std::string m = mode == tw::EpMode::kHighThroughput ? "high throughput " : "low latency ";
      tw::EpConfig cfg;
      cfg.mode = mode;
      cfg.max_tokens_per_rank = kTokens, cfg.hidden = kHidden, cfg.topk = kTopk, cfg.num_experts = E;
      tw::EpBuffer buf(comm, cfg);
      const size_t cap = (size_t)P * kTokens;
      DeviceBuffer y(std::max(cap, (size_t)kExpertsPerRank * cap) * kHidden * 2);
      poison(y.data(), y.bytes, s);
      comm.sync(s);
      comm.barrier();
      for (int round = 0; round < 2; ++round) {
        const std::string r = m + "round " + std::to_string(round) + " ";
        if (mode == tw::EpMode::kHighThroughput) {
          tw::EpDispatchArgs a;
          a.x = xd.data(), a.num_tokens = kTokens, a.topk_idx = idxd.data();
          a.topk_weights = static_cast<const float*>(wd.data());
          buf.dispatch(a, s);
          expect_read(r + "dispatch");
          buf.combine(y.data(), nullptr, out.data(), s);
          expect_read(r + "combine");
        } else {
          tw::EpLowLatencyArgs a;
          a.x = xd.data(), a.num_tokens = kTokens, a.topk_idx = idxd.data();
          buf.dispatch_send(a, s);
          expect_read(r + "dispatch_send");
          buf.dispatch_recv(s);
          buf.combine_send(y.data(), s);
          expect_read(r + "combine_send");
          buf.combine_recv(static_cast<const float*>(wd.data()), out.data(), s);
        }
        comm.sync(s);
        comm.barrier();
      }
    }
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

}  // namespace
