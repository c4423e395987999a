// The MoE's expert-major placement (src/ops/moe/kernels.hpp: place_own_rows, place_rows) against
// a host counting sort, on every entry: counts, offsets, each entry's place (-1 where it has no
// expert), perm over the placed rows, the overflow verdict. Sizes cross the chunk boundaries of
// both chunk sizes (a sender's few entries and a receive's many) on one scratch, made once for the
// largest; ids outside [0, L) included; outputs poisoned before every call.
//   MoePlace.OwnRowsMatchTheHost      int32 and int64 ids over E = 128 experts, N from 1 to 20000
//   MoePlace.ReceiveMatchesTheHost    a device row count, L = 16, receives of both chunk sizes, with and
//                                     without an overflow; nothing written past the scratch or the entries
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "common.cuh"
#include "ops/moe/kernels.hpp"

namespace {
using tw_test::DeviceBuffer;
using tw_test::Stream;
namespace moe = tw::ops::moe;

constexpr int kTopk = 8;
constexpr uint8_t kPoisonByte = 0x5A;  // 0x5A5A5A5A: neither -1 nor a place these sizes reach

// Seeded ids: mostly in [0, L), some -1 and some out of range on either side.
std::vector<int64_t> make_ids(size_t n, int L, uint64_t seed) {
  std::vector<int64_t> v(n);
  for (size_t e = 0; e < n; ++e) {
    const uint64_t r = tw_test::mix(seed, 0, e);
    const uint64_t kind = r % 64;
    v[e] = kind == 0 ? -1 : kind == 1 ? L + int64_t(r % 7) : kind == 2 ? -2 - int64_t(r % 5) : int64_t((r >> 8) % L);
  }
  return v;
}

struct HostPlace {
  std::vector<int> counts, offsets, pos_of, perm;
  int overflow = 0;
};

HostPlace host_place(const std::vector<int64_t>& ids, size_t n, int L, long long max_rows) {
  HostPlace h;
  h.counts.assign(size_t(L), 0);
  for (size_t e = 0; e < n; ++e)
    if (ids[e] >= 0 && ids[e] < L) ++h.counts[size_t(ids[e])];
  long long all = 0;
  h.offsets.assign(size_t(L), 0);
  for (int l = 0; l < L; ++l) h.offsets[size_t(l)] = int(all), all += h.counts[size_t(l)];
  h.pos_of.assign(n, -1);
  if (all > max_rows) {
    h.overflow = int(all);
    std::fill(h.counts.begin(), h.counts.end(), 0);
    std::fill(h.offsets.begin(), h.offsets.end(), 0);
    return h;
  }
  std::vector<int> next = h.offsets;
  h.perm.assign(size_t(all), -1);
  for (size_t e = 0; e < n; ++e)
    if (ids[e] >= 0 && ids[e] < L) {
      const int pos = next[size_t(ids[e])]++;
      h.pos_of[e] = pos;
      h.perm[size_t(pos)] = int(e / kTopk);
    }
  return h;
}

// The first difference of got against want, with `what` and the index; "" when they agree.
std::string first_diff(const char* what, const std::vector<int>& got, const std::vector<int>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return std::string(what) + "[" + std::to_string(i) + "] is " + std::to_string(got[i]) + ", want " +
             std::to_string(want[i]);
  return "";
}

// "" when the n ints at p (device) all still hold the poison, else the first byte written (check_fill).
std::string untouched(const int* p, size_t n, cudaStream_t s, const char* what) {
  return tw_test::check_fill(tw_test::to_host(p, n * 4, s), 0, n * 4, kPoisonByte, what);
}

// Scratch for max_entries over L experts, place_chunks(max_entries) x L ints per array, each followed
// by kGuard poisoned ints that no call may write (the chunk count of any entry count up to
// max_entries must fit the scratch).
constexpr size_t kGuard = 64 * 1024;
struct Scratch {
  size_t ints;
  DeviceBuffer cc, cb;
  Scratch(long long max_entries, int L, cudaStream_t s)
      : ints(size_t(moe::place_chunks(max_entries)) * L), cc((ints + kGuard) * 4), cb((ints + kGuard) * 4) {
    TW_CUDA_CHECK(cudaMemsetAsync(cc.p, kPoisonByte, cc.bytes, s));
    TW_CUDA_CHECK(cudaMemsetAsync(cb.p, kPoisonByte, cb.bytes, s));
  }
  moe::PlaceScratch w() const { return {static_cast<int*>(cc.p), static_cast<int*>(cb.p)}; }
  std::string guards(cudaStream_t s) const {  // "" when no call wrote past the scratch
    const std::string c = untouched(static_cast<int*>(cc.p) + ints, kGuard, s, "past chunk_counts");
    return c.empty() ? untouched(static_cast<int*>(cb.p) + ints, kGuard, s, "past chunk_base") : c;
  }
};

TEST(MoePlace, OwnRowsMatchTheHost) {
  TW_SKIP_UNLESS_GPUS(1);
  constexpr int E = 128, kMaxN = 20000;
  const long long max_entries = (long long)kMaxN * kTopk;
  Stream s;
  const Scratch scratch(max_entries, E, s);
  DeviceBuffer counts(E * 4), offsets(E * 4), pos(size_t(max_entries) * 4), idx(size_t(max_entries) * 8);
  const moe::PlaceScratch w = scratch.w();
  // 128 and 16384 tokens end exactly on a chunk (1024 entries; 131072, the last small size); 20000
  // takes the large chunks on the same scratch.
  for (const bool idx64 : {false, true})
    for (const int N : {1, 37, 128, 1000, 16384, 16385, 20000}) {
      SCOPED_TRACE("N " + std::to_string(N) + (idx64 ? " int64" : " int32") + " ids");
      const size_t n = size_t(N) * kTopk;
      const std::vector<int64_t> ids = make_ids(n, E, 100 + N + (idx64 ? 1 : 0));
      if (idx64) {
        tw_test::upload(idx.p, ids, s);
      } else {
        std::vector<int32_t> ids32(ids.begin(), ids.end());
        tw_test::upload(idx.p, ids32, s);
      }
      for (DeviceBuffer* b : {&counts, &offsets, &pos}) TW_CUDA_CHECK(cudaMemsetAsync(b->p, kPoisonByte, b->bytes, s));
      moe::place_own_rows(idx.p, idx64, N, kTopk, E, w, static_cast<int*>(counts.p), static_cast<int*>(offsets.p),
                          static_cast<int*>(pos.p), s);
      const HostPlace want = host_place(ids, n, E, max_entries);
      EXPECT_EQ(first_diff("counts", tw_test::download<int>(counts.p, E, s), want.counts), "");
      EXPECT_EQ(first_diff("offsets", tw_test::download<int>(offsets.p, E, s), want.offsets), "");
      EXPECT_EQ(first_diff("pos_of", tw_test::download<int>(pos.p, n, s), want.pos_of), "");
      EXPECT_EQ(untouched(static_cast<int*>(pos.p) + n, size_t(max_entries) - n, s, "pos_of past the entries"), "");
      EXPECT_EQ(scratch.guards(s), "");
    }
}

TEST(MoePlace, ReceiveMatchesTheHost) {
  TW_SKIP_UNLESS_GPUS(1);
  constexpr int L = 16;
  Stream s;
  for (const int capacity : {1000, 20000}) {  // a receive of 8000 entries (small chunks), of 160000 (large)
    const long long max_entries = (long long)capacity * kTopk;
    const Scratch scratch(max_entries, L, s);
    DeviceBuffer counts(L * 4), offsets(L * 4), over(4), nrecv(4);
    DeviceBuffer pos(size_t(max_entries) * 4), perm(size_t(max_entries) * 4), idx(size_t(max_entries) * 4);
    for (const int rows : {0, 5, 128, capacity / 2 + 3, capacity})
      for (const int short_by : {0, 1}) {  // max_rows: every placed entry, or one fewer (the overflow)
        SCOPED_TRACE("capacity " + std::to_string(capacity) + ", " + std::to_string(rows) + " rows, max_rows " +
                     (short_by ? "one short" : "exact"));
        const size_t n = size_t(rows) * kTopk;
        const std::vector<int64_t> ids = make_ids(n, L, 900 + rows);
        const HostPlace exact = host_place(ids, n, L, max_entries);
        const long long placed = std::accumulate(exact.counts.begin(), exact.counts.end(), 0ll);
        if (short_by && placed == 0) continue;
        const int max_rows = int(placed - short_by);
        const HostPlace want = host_place(ids, n, L, max_rows);
        tw_test::upload(idx.p, std::vector<int32_t>(ids.begin(), ids.end()), s);
        tw_test::upload(nrecv.p, std::vector<int>{rows}, s);
        for (DeviceBuffer* b : {&counts, &offsets, &pos, &perm, &over})
          TW_CUDA_CHECK(cudaMemsetAsync(b->p, kPoisonByte, b->bytes, s));
        moe::place_rows(static_cast<const int32_t*>(idx.p), static_cast<const int*>(nrecv.p), kTopk, L, max_rows,
                        max_entries, scratch.w(), static_cast<int*>(counts.p), static_cast<int*>(offsets.p),
                        static_cast<int*>(perm.p), static_cast<int*>(pos.p), static_cast<int*>(over.p), s);
        EXPECT_EQ(tw_test::download<int>(over.p, 1, s)[0], want.overflow);
        EXPECT_EQ(first_diff("counts", tw_test::download<int>(counts.p, L, s), want.counts), "");
        EXPECT_EQ(first_diff("offsets", tw_test::download<int>(offsets.p, L, s), want.offsets), "");
        EXPECT_EQ(first_diff("pos_of", tw_test::download<int>(pos.p, n, s), want.pos_of), "");
        EXPECT_EQ(first_diff("perm", tw_test::download<int>(perm.p, want.perm.size(), s), want.perm), "");
        // perm past the placed rows (all of it after an overflow) and pos_of past the entries: untouched.
        EXPECT_EQ(untouched(static_cast<int*>(perm.p) + want.perm.size(), size_t(max_entries) - want.perm.size(), s,
                            "perm past the placed rows"),
                  "");
        EXPECT_EQ(untouched(static_cast<int*>(pos.p) + n, size_t(max_entries) - n, s, "pos_of past the entries"), "");
        EXPECT_EQ(scratch.guards(s), "");
      }
  }
}

}  // namespace
