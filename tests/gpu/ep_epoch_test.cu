// tests/gpu/ep_epoch_test.cu — the EP buffer's call counters past 2^32 calls.
//
// Every EP kernel tags the flags it writes with its CTA's call number and waits until a peer's
// flag has reached the number of the same call. The counters are set (EpAccess::set_calls) to
// 2^32 - 3 calls, then 8 steps run with no host synchronization between them, so the calls
// numbered 2^32 - 2 .. 2^32 + 5 cross the 32-bit boundary. One rank in turn is held back 2 ms
// before its dispatch: a wait that passed on a flag of an earlier call would read that rank's
// rows (or combine rows) of the step before, whose x had the other sign.
//
//   EpEpoch.CountersCrossTheWrapHighThroughput  dispatch, the received rows copied out as y,
//       unweighted combine: out[t] = sum over the ranks t went to of x[t] (fp32, rounded once).
//   EpEpoch.CountersCrossTheWrapLowLatency  dispatch_send, dispatch_recv, the rows copied
//       into the combine block, combine_send, combine_recv: out[t] = sum_j w[t][j] x[t] (fma in
//       top-k order, rounded once).
// Each step's output has its own slot, poisoned first, and is compared bitwise with the host.
// Needs 2 or more ranks in one LSA team (every flag is a peer's); virtual nodes skip it.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "common.cuh"
#include "ops/ep/state.cuh"  // EpAccess::set_calls
#include "tilewire/ops/ep.hpp"

namespace {
using namespace tw_test;

constexpr int kMaxTokens = 64, kTopk = 4, kL = 8, kH = 1024, kSteps = 8;
constexpr uint64_t kStart = (1ull << 32) - 3;

int tokens_of(int rank) { return std::array<int, 4>{48, 0, 31, 5}[rank % 4]; }

struct Input {
  int N = 0;
  std::vector<uint16_t> x[2];  // [N, H] bf16 bits: x, and x with every sign flipped
  std::vector<int64_t> idx;    // [N, topk], distinct experts per token, some -1
  std::vector<float> w;        // [N, topk]
};

Input make_input(int rank, int P) {
  Input in;
  in.N = tokens_of(rank);
  const int E = kL * P;
  in.x[0].resize((size_t)in.N * kH);
  for (size_t i = 0; i < in.x[0].size(); ++i) in.x[0][i] = f32_to_bf16(random_exact(41, rank, i, tw::DType::kBFloat16));
  in.x[1] = in.x[0];
  for (uint16_t& v : in.x[1]) v ^= 0x8000u;
  in.idx.assign((size_t)in.N * kTopk, -1);
  for (int t = 0; t < in.N; ++t) {
    std::vector<int64_t> picked;
    for (int j = 0, tries = 0; j < kTopk && tries < 64; ++tries) {
      const uint64_t u = mix(43, rank, (uint64_t)t * 64 + tries);
      const int64_t e = (int64_t)(u % E);
      if (std::find(picked.begin(), picked.end(), e) != picked.end()) continue;
      picked.push_back(e);
      in.idx[(size_t)t * kTopk + j] = (u >> 40) % 5 == 0 ? -1 : e;
      ++j;
    }
  }
  in.w.resize((size_t)in.N * kTopk);
  for (size_t i = 0; i < in.w.size(); ++i) in.w[i] = random_exact(47, rank, i, tw::DType::kFloat32);
  return in;
}

// The host's output of step v (0: x, 1: -x) for either mode.
std::vector<uint16_t> expected(const Input& in, int v, bool low_latency) {
  std::vector<uint16_t> out((size_t)in.N * kH);
  for (int t = 0; t < in.N; ++t) {
    const int64_t* ids = &in.idx[(size_t)t * kTopk];
    int ranks = 0;  // high throughput: distinct destination ranks, in ascending order
    for (int d = 0; d < 64; ++d)
      ranks += std::any_of(ids, ids + kTopk, [&](int64_t e) { return e >= 0 && e / kL == d; });
    for (int c = 0; c < kH; ++c) {
      const float xv = bf16_to_f32(in.x[v][(size_t)t * kH + c]);
      float acc = 0.0f;
      if (low_latency) {
        for (int j = 0; j < kTopk; ++j)
          if (ids[j] >= 0) acc = std::fma(in.w[(size_t)t * kTopk + j], xv, acc);
      } else {
        for (int r = 0; r < ranks; ++r) acc += xv;
      }
      out[(size_t)t * kH + c] = f32_to_bf16(acc);
    }
  }
  return out;
}

void run_across_the_wrap(bool low_latency) {
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    tw::EpConfig cfg;
    cfg.mode = low_latency ? tw::EpMode::kLowLatency : tw::EpMode::kHighThroughput;
    cfg.max_tokens_per_rank = kMaxTokens, cfg.hidden = kH, cfg.topk = kTopk, cfg.num_experts = kL * P;
    tw::EpBuffer buf(comm, cfg);
    const Input in = make_input(me, P);
    const int N = in.N;
    const size_t cap = (size_t)P * kMaxTokens;
    const size_t ybytes = low_latency ? (size_t)kL * cap * kH * 2 : cap * kH * 2;
    const size_t xbytes = std::max<size_t>((size_t)N * kH * 2, 16), obytes = xbytes;
    DeviceBuffer x0(xbytes), x1(xbytes), idx(std::max<size_t>(in.idx.size() * 8, 16)),
        w(std::max<size_t>(in.w.size() * 4, 16)), y(ybytes), outs(obytes * kSteps);
    upload(x0.data(), in.x[0], s), upload(x1.data(), in.x[1], s), upload(idx.data(), in.idx, s);
    upload(w.data(), in.w, s);
    poison(outs.data(), outs.bytes, s);
    tw::EpAccess::set_calls(buf, kStart, s);
    comm.sync(s);
    comm.barrier();
    for (int step = 0; step < kSteps; ++step) {
      if (step % P == me) hold_stream(s, 2'000'000);
      const void* x = step % 2 ? x1.data() : x0.data();
      void* out = static_cast<char*>(outs.data()) + (size_t)step * obytes;
      if (low_latency) {
        tw::EpLowLatencyArgs a;
        a.x = x, a.num_tokens = N, a.topk_idx = idx.data();
        buf.dispatch_send(a, s);
        const tw::EpLowLatencyRecv r = buf.dispatch_recv(s);
        TW_CUDA_CHECK(cudaMemcpyAsync(r.y, r.x, ybytes, cudaMemcpyDeviceToDevice, s));
        buf.combine_send(r.y, s);
        buf.combine_recv(static_cast<const float*>(w.data()), out, s);
      } else {
        tw::EpDispatchArgs a;
        a.x = x, a.num_tokens = N, a.topk_idx = idx.data(), a.topk_weights = static_cast<const float*>(w.data());
        const tw::EpRecv r = buf.dispatch(a, s);
        TW_CUDA_CHECK(cudaMemcpyAsync(y.data(), r.x, ybytes, cudaMemcpyDeviceToDevice, s));
        buf.combine(y.data(), nullptr, out, s);
      }
    }
    buf.check(s);
    const std::vector<uint16_t> got = download<uint16_t>(outs.data(), (size_t)N * kH * kSteps, s);
    const std::vector<uint16_t> want[2] = {expected(in, 0, low_latency), expected(in, 1, low_latency)};
    for (int step = 0; step < kSteps && N > 0; ++step)
      if (!std::equal(want[step % 2].begin(), want[step % 2].end(), got.begin() + (size_t)step * N * kH))
        wrong[me].push_back("call " + std::to_string(kStart + 1 + step) + " (step " + std::to_string(step) +
                            "): output differs");
    comm.barrier();
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(EpEpoch, CountersCrossTheWrapHighThroughput) {
  TW_SKIP_UNLESS_RANKS(2);
  if (ranks_per_node() != 0 && ranks_per_node() != team_size()) GTEST_SKIP() << "virtual nodes: GIN peers' targets count from creation";
  run_across_the_wrap(false);
}

TEST(EpEpoch, CountersCrossTheWrapLowLatency) {
  TW_SKIP_UNLESS_RANKS(2);
  if (ranks_per_node() != 0 && ranks_per_node() != team_size()) GTEST_SKIP() << "virtual nodes: GIN peers' targets count from creation";
  run_across_the_wrap(true);
}

}  // namespace
