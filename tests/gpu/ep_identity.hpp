// tests/gpu/ep_identity.hpp — the low-latency EP tests' identity experts: every expert returns
// the rows it received (y = x), on inputs chosen so that the combine is exact. x is small
// integers, the weights are quarters, and out[t] = sum_j w[t][j] x[t] over t's slots with an
// expert comes out the same in fp32 in any order and in bf16.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "host_ref.hpp"

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

}  // namespace tw_test
