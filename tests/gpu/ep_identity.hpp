// tests/gpu/ep_identity.hpp — the low-latency EP tests' identity experts: every expert returns
// the rows it received (y = x), on inputs chosen so that the combine is exact. x is small
// integers, the weights are quarters, and out[t] = sum_j w[t][j] x[t] over t's slots with an
// expert comes out the same in fp32 in any order and in bf16. Then one checked step of them on
// an EpBuffer (identity_step), shared by the tests that use them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common.cuh"
#include "host_ref.hpp"
#include "tilewire/ops/ep.hpp"

namespace tw_test {

struct IdentityExperts {
  std::vector<uint16_t> x;         // [N, H] bf16 bits, integers in [-8, 8]
  std::vector<float> w;            // [N, K], quarters in [0.25, 1]
  std::vector<int> want_count;     // [L]: the rows each of this rank's experts receives
  std::vector<uint16_t> want_out;  // [N, H]: the combined output
};

// Rank `me` of P: its x from `seed`, its weights from `seed + 1`; `ids_of(q)` is rank q's routing
// [N, K] (expert ids, -1: none), L experts per rank.
template <class Ids>
IdentityExperts identity_experts(uint64_t seed, int me, int P, int N, int H, int K, int L, const Ids& ids_of) {
  IdentityExperts r;
  r.x.resize((size_t)N * H), r.w.resize((size_t)N * K);
  for (size_t i = 0; i < r.x.size(); ++i) r.x[i] = f32_to_bf16((float)((int)(mix(seed, me, i) % 17) - 8));
  for (size_t i = 0; i < r.w.size(); ++i) r.w[i] = (float)(1 + mix(seed + 1, me, i) % 4) / 4.0f;
  r.want_count.assign(L, 0);
  for (int q = 0; q < P; ++q)
    for (int64_t e : ids_of(q))
      if (e >= 0 && e / L == me) ++r.want_count[e % L];
  const std::vector<int64_t> ids = ids_of(me);
  r.want_out.resize((size_t)N * H);
  for (int t = 0; t < N; ++t)
    for (int c = 0; c < H; ++c) {
      float acc = 0.0f;
      for (int j = 0; j < K; ++j)
        if (ids[(size_t)t * K + j] >= 0) acc = std::fma(r.w[(size_t)t * K + j], bf16_to_f32(r.x[(size_t)t * H + c]), acc);
      r.want_out[(size_t)t * H + c] = f32_to_bf16(acc);
    }
  return r;
}

// A low-latency buffer for N tokens per rank, hidden H, top-K of E experts.
inline tw::EpConfig identity_config(int N, int H, int K, int E) {
  tw::EpConfig c;
  c.mode = tw::EpMode::kLowLatency;
  c.max_tokens_per_rank = N, c.hidden = H, c.topk = K, c.num_experts = E;
  return c;
}

// One rank's inputs on the device (x, its routing, the weights), uploaded on `s`, and its output.
struct IdentityBuffers {
  DeviceBuffer x, idx, w, out;
  IdentityBuffers(const IdentityExperts& ref, const std::vector<int64_t>& ids, cudaStream_t s)
      : x(ref.x.size() * 2), idx(ids.size() * 8), w(ref.w.size() * 4), out(ref.want_out.size() * 2) {
    upload(x.data(), ref.x, s), upload(idx.data(), ids, s), upload(w.data(), ref.w, s);
  }
};

// One step on `buf`, every rank at once: all N tokens dispatched, this rank's L counts against the
// reference, the received rows copied back as y (into the combine block when `y` is null, where
// combine_send then copies nothing; else into `y`, which combine_send copies in), the combine,
// and the output against the reference; each difference goes to `wrong` after `at`.
// Every rank's copy and poison are done (sync + barrier) before any rank's combine waits for its
// peers, and every rank's downloads before any next send: compute-sanitizer orders a copy behind
// a running kernel, and a faster peer's spinning combine_recv stalled a rank's copy there
// (memcheck at 4 virtual ranks). before_send, if set, runs before each of the two sends.
inline void identity_step(tw::Comm& comm, tw::EpBuffer& buf, IdentityBuffers& io, const IdentityExperts& ref, int N,
                          int L, DeviceBuffer* y, cudaStream_t s, const std::string& at, std::vector<std::string>& wrong,
                          const std::function<void()>& before_send = {}) {
  tw::EpLowLatencyArgs a;
  a.x = io.x.data(), a.num_tokens = N, a.topk_idx = io.idx.data();
  if (before_send) before_send();
  buf.dispatch_send(a, s);
  const tw::EpLowLatencyRecv r = buf.dispatch_recv(s);
  buf.check(s);
  if (download<int>(r.count, L, s) != ref.want_count) wrong.push_back(at + "counts differ");
  size_t bytes = (size_t)L * r.capacity * (ref.x.size() / N) * 2;
  if (y != nullptr && bytes > y->bytes) {  // the receive's shape is [L, capacity, H]
    wrong.push_back(at + "capacity " + std::to_string(r.capacity) + " overflows y");
    bytes = y->bytes;
  }
  void* const dst = y != nullptr ? y->data() : r.y;
  TW_CUDA_CHECK(cudaMemcpyAsync(dst, r.x, bytes, cudaMemcpyDeviceToDevice, s));
  poison(io.out.data(), io.out.bytes, s);
  comm.sync(s);
  comm.barrier();
  if (before_send) before_send();
  buf.combine_send(dst, s);
  buf.combine_recv(static_cast<const float*>(io.w.data()), io.out.data(), s);
  if (download<uint16_t>(io.out.data(), ref.want_out.size(), s) != ref.want_out) wrong.push_back(at + "output differs");
  comm.barrier();
}

}  // namespace tw_test
