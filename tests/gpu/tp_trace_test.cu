// tests/gpu/tp_trace_test.cu — the fused paths' trace events (TpConfig::trace) of
// gemm_reducescatter and allgather_gemm, on the test team (real ranks or TILEWIRE_TEST_VIRTUAL):
//   GemmReduceScatter.TraceEventsPerTile   every tile: one mma_start <= mma_end; a pusher's
//                                          partial_leave and tile_landed after it, an owner's
//                                          partials_seen <= reduce_done <= tile_landed; a kernel_end
//                                          per kernel_start; nothing dropped; the metrics find no
//                                          missing event. On one GPU (one clock for all ranks) the
//                                          owner sees the partials after every pusher's partial_leave.
//   AllGatherGemm.TraceEventsPerTile       every tile: one mma_start <= mma_end; per peer q one
//                                          chunk_send (the ready barrier's arrive: this rank's rows in
//                                          place) <= one chunk_recv (passed: q's rows readable), none
//                                          at one rank; kernel events paired; no missing event; no tile
//                                          starts before the ready barrier.
// The ops' results under tracing are checked elsewhere (gemm_scatter_gather_test.cu); here the
// outputs only have to be written (not the poison).
#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "common.cuh"
#include "ops/gemm/launch.hpp"  // gated_tile_is_decode, kDecodeBlkN: the traced GEMM's tile
#include "tilewire/ops/gemm_scatter_gather.hpp"
#include "tilewire/trace/trace.hpp"

namespace {
using namespace tw_test;
using K = tw::trace::EventKind;

struct Recorded {
  std::vector<tw::trace::Event> events;
  uint64_t dropped = 0;
};

// Every rank's events of one traced call of `op(cfg)` (fused path), downloaded after the call.
template <class Op>
std::vector<Recorded> record(int P, uint32_t capacity, Op op) {
  std::vector<Recorded> rec(P);
  run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    tw::trace::TraceBuffer buf(capacity);
    buf.reset(s);
    tw::TpConfig cfg;
    cfg.path = tw::TpPath::kFused;
    cfg.trace = buf.ring(r);
    op(comm, cfg, s.s);
    comm.sync(s);
    rec[r].events = buf.download(&rec[r].dropped, s);
  });
  return rec;
}

// Per tile id, per kind: the times recorded (non-tile kinds left out).
using PerTile = std::map<uint32_t, std::array<std::vector<uint64_t>, (int)K::kCount>>;
PerTile per_tile(const std::vector<tw::trace::Event>& ev) {
  PerTile m;
  for (const auto& e : ev)
    if (e.kind >= (uint8_t)K::kMmaStart && e.kind <= (uint8_t)K::kTileLanded) m[e.id][e.kind].push_back(e.t_ns);
  return m;
}

int count(const std::vector<tw::trace::Event>& ev, K k, int64_t id = -1) {
  return (int)std::count_if(ev.begin(), ev.end(),
                            [&](const tw::trace::Event& e) { return e.kind == (uint8_t)k && (id < 0 || e.id == id); });
}

void expect_no_missing(const std::vector<Recorded>& rec) {
  std::vector<std::vector<tw::trace::Event>> per_rank;
  for (const auto& x : rec) per_rank.push_back(x.events);
  tw::trace::ClockSync cs;  // one clock per GPU: the checks below need no alignment
  cs.offset_ns.assign(rec.size(), 0);
  cs.error_ns.assign(rec.size(), 0);
  const tw::trace::Metrics m = tw::trace::compute_metrics(tw::trace::make_trace(per_rank, cs));
  EXPECT_EQ(m.overall.missing.total(), 0u) << tw::trace::format_metrics(m);
  EXPECT_EQ(m.overall.inverted, 0u) << tw::trace::format_metrics(m);
}

constexpr uint64_t kSeedA = 71, kSeedB = 72;

TEST(GemmReduceScatter, TraceEventsPerTile) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  const int M = 1024, N = 520, Kl = 256;  // 8 x 3 tiles, the last column partial
  const tw::DType dt = tw::DType::kBFloat16;
  const int tiles_m = (M + 127) / 128, tiles_n = (N + 255) / 256, T = tiles_m * tiles_n;
  const std::vector<Recorded> rec =
      record(P, 8 * T + 4096, [&](tw::Comm& comm, const tw::TpConfig& cfg, cudaStream_t s) {
        const int me = comm.rank(), rows = tw::shard_rows_of(M, P, me);
        DeviceBuffer A((size_t)M * Kl * 2), B((size_t)N * Kl * 2), C(std::max<size_t>((size_t)rows * N * 2, 16));
        tw::Window ws = comm.alloc_window(tw::gemm_reducescatter_workspace_size(M, N, dt, P));
        fill(A.data(), dt, (size_t)M * Kl, Fill::kRandom, kSeedA, me, s);
        fill(B.data(), dt, (size_t)N * Kl, Fill::kRandom, kSeedB, me, s);
        poison(C.data(), C.bytes, s);
        comm.sync(s);
        comm.barrier();  // every rank's fills before any rank's op (a virtual team shares the device)
        tw::gemm_reducescatter(
            comm, tw::GemmReduceScatterArgs{A.data(), B.data(), C.data(), M, N, Kl, dt, tw::BLayout::kNK, ws.data()},
            cfg, s);
        comm.sync(s);
        comm.barrier();  // no rank frees its window while a peer's kernel may still read it
      });
  std::vector<PerTile> tiles(P);
  for (int r = 0; r < P; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(P));
    const auto& ev = rec[r].events;
    EXPECT_EQ(rec[r].dropped, 0u);
    for (const auto& e : ev) EXPECT_EQ(e.rank, r);
    const int starts = count(ev, K::kKernelStart), ends = count(ev, K::kKernelEnd);
    EXPECT_GT(starts, 0);
    EXPECT_EQ(starts, ends);
    tiles[r] = per_tile(ev);
    EXPECT_EQ((int)tiles[r].size(), T) << "every rank computes a partial of every tile";
    int owned = 0;
    for (const auto& [id, k] : tiles[r]) {
      ASSERT_LT(id, (uint32_t)T);
      // Tile ids follow the kernel's walk (plan.hpp tile_index: raster dependent), so ownership is
      // read off the events: an owner sees partials, a pusher sends one (checked across ranks below).
      const bool own = !k[(int)K::kPartialsSeen].empty();
      owned += own;
      for (K x : {K::kMmaStart, K::kMmaEnd, K::kTileLanded})
        ASSERT_EQ(k[(int)x].size(), 1u) << "tile " << id << " " << tw::trace::kind_name(x);
      ASSERT_EQ(k[(int)K::kPartialLeave].size(), own ? 0u : 1u) << "tile " << id;
      ASSERT_EQ(k[(int)K::kPartialsSeen].size(), own ? 1u : 0u) << "tile " << id;
      ASSERT_EQ(k[(int)K::kReduceDone].size(), own ? 1u : 0u) << "tile " << id;
      const uint64_t start = k[(int)K::kMmaStart][0], end = k[(int)K::kMmaEnd][0], landed = k[(int)K::kTileLanded][0];
      EXPECT_LE(start, end) << "tile " << id;
      if (own) {
        EXPECT_LE(end, k[(int)K::kPartialsSeen][0]) << "tile " << id;
        EXPECT_LE(k[(int)K::kPartialsSeen][0], k[(int)K::kReduceDone][0]) << "tile " << id;
        EXPECT_LE(k[(int)K::kReduceDone][0], landed) << "tile " << id;
      } else {
        EXPECT_LE(end, k[(int)K::kPartialLeave][0]) << "tile " << id;
        EXPECT_LE(k[(int)K::kPartialLeave][0], landed) << "tile " << id;
      }
    }
    // This rank owns the tiles of its shard's rows: ceil(rows / 128) tile rows (S is a multiple of 128).
    EXPECT_EQ(owned, (tw::shard_rows_of(M, P, r) + 127) / 128 * tiles_n);
  }
  for (int id = 0; id < T; ++id) {  // one owner per tile
    int owners = 0;
    for (int r = 0; r < P; ++r) owners += tiles[r].count(id) && !tiles[r].at(id)[(int)K::kPartialsSeen].empty();
    EXPECT_EQ(owners, 1) << "tile " << id;
  }
  expect_no_missing(rec);
  if (virtual_ranks() > 0) {  // one clock: an owner saw each partial after its pusher sent it
    for (int o = 0; o < P; ++o)
      for (const auto& [id, k] : tiles[o]) {
        if (k[(int)K::kPartialsSeen].empty()) continue;
        for (int q = 0; q < P; ++q)
          if (q != o && tiles[q].count(id) && !tiles[q].at(id)[(int)K::kPartialLeave].empty())
            EXPECT_LE(tiles[q].at(id)[(int)K::kPartialLeave][0], k[(int)K::kPartialsSeen][0])
                << "tile " << id << ": owner " << o << " saw the partials before rank " << q << " sent its";
      }
  }
}

// M <= 256 (the decode path): the GEMM's tiles (the hook kernel's decode tile when traced), then
// the reduce kernel: chunk_send per peer on arriving at its ready barrier, after every tile's
// epilogue was issued, chunk_recv once passed; no partial events.
TEST(GemmReduceScatter, DecodeTraceEvents) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  if (P < 2) GTEST_SKIP() << "the decode path runs on 2 ranks or more (one rank: the GEMM alone)";
  const int M = 200, N = 520, Kl = 128;
  const tw::DType dt = tw::DType::kBFloat16;
  const int T = (M + 127) / 128 * ((N + tw::gemm_impl::kDecodeBlkN - 1) / tw::gemm_impl::kDecodeBlkN);
  const std::vector<Recorded> rec =
      record(P, 8 * T + 4096, [&](tw::Comm& comm, const tw::TpConfig& cfg, cudaStream_t s) {
        const int me = comm.rank(), rows = tw::shard_rows_of(M, P, me);
        DeviceBuffer A((size_t)M * Kl * 2), B((size_t)N * Kl * 2), C(std::max<size_t>((size_t)rows * N * 2, 16));
        tw::Window ws = comm.alloc_window(tw::gemm_reducescatter_workspace_size(M, N, dt, P));
        fill(A.data(), dt, (size_t)M * Kl, Fill::kRandom, kSeedA, me, s);
        fill(B.data(), dt, (size_t)N * Kl, Fill::kRandom, kSeedB, me, s);
        poison(C.data(), C.bytes, s);
        comm.sync(s);
        comm.barrier();
        tw::gemm_reducescatter(
            comm, tw::GemmReduceScatterArgs{A.data(), B.data(), C.data(), M, N, Kl, dt, tw::BLayout::kNK, ws.data()},
            cfg, s);
        comm.sync(s);
        comm.barrier();
      });
  for (int r = 0; r < P; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(P));
    const auto& ev = rec[r].events;
    EXPECT_EQ(rec[r].dropped, 0u);
    EXPECT_GT(count(ev, K::kKernelStart), 0);
    EXPECT_EQ(count(ev, K::kKernelStart), count(ev, K::kKernelEnd));
    uint64_t arrived = ~0ull;
    for (int q = 0; q < P; ++q) {
      EXPECT_EQ(count(ev, K::kChunkSend, q), q == r ? 0 : 1) << "peer " << q;
      EXPECT_EQ(count(ev, K::kChunkRecv, q), q == r ? 0 : 1) << "peer " << q;
    }
    for (const auto& e : ev)
      if (e.kind == (uint8_t)K::kChunkSend) arrived = std::min(arrived, e.t_ns);
    const PerTile tiles = per_tile(ev);
    EXPECT_EQ((int)tiles.size(), T);
    for (const auto& [id, k] : tiles) {
      ASSERT_LT(id, (uint32_t)T);
      ASSERT_EQ(k[(int)K::kMmaStart].size(), 1u) << "tile " << id;
      ASSERT_EQ(k[(int)K::kMmaEnd].size(), 1u) << "tile " << id;
      for (K x : {K::kPartialLeave, K::kPartialsSeen, K::kReduceDone}) EXPECT_TRUE(k[(int)x].empty());
      EXPECT_LE(k[(int)K::kMmaEnd][0], arrived) << "tile " << id << ": the reduce arrived before its epilogue";
    }
  }
  expect_no_missing(rec);
}

// M = 1024: the GEMM pulls the shards (two barriers, then the batched GEMM); M = 128: the decode
// path (the gather kernel, then the GEMM on the hook kernel's decode tile, 128 x 64, when traced).
TEST(AllGatherGemm, TraceEventsPerTile) {
  TW_SKIP_UNLESS_SM90();
  for (const int M : {1024, 128}) {
    SCOPED_TRACE("M = " + std::to_string(M));
    const int P = team_size();
    const int N = 512, Kd = 256;
    const tw::DType dt = tw::DType::kFloat16;
    const int tile_n = tw::gemm_impl::gated_tile_is_decode(M) ? tw::gemm_impl::kDecodeBlkN : tw::gemm_impl::kBlkN;
    const int S = tw::shard_rows(M, P), tiles_m = (M + 127) / 128, tiles_n = (N + tile_n - 1) / tile_n,
              T = tiles_m * tiles_n;
    const std::vector<Recorded> rec =
        record(P, 8 * T + 4096, [&](tw::Comm& comm, const tw::TpConfig& cfg, cudaStream_t s) {
          const int me = comm.rank(), rows = tw::shard_rows_of(M, P, me);
          DeviceBuffer A(std::max<size_t>((size_t)rows * Kd * 2, 16)), B((size_t)N * Kd * 2), C((size_t)M * N * 2);
          tw::Window ws = comm.alloc_window(tw::allgather_gemm_workspace_size(M, Kd, dt, P));
          fill(A.data(), dt, (size_t)rows * Kd, Fill::kRandom, kSeedA, 0, s, (size_t)me * S * Kd);
          fill(B.data(), dt, (size_t)N * Kd, Fill::kRandom, kSeedB, me, s);
          poison(C.data(), C.bytes, s);
          comm.sync(s);
          comm.barrier();
          tw::allgather_gemm(
              comm,
              tw::AllGatherGemmArgs{A.data(), B.data(), C.data(), nullptr, M, N, Kd, dt, tw::BLayout::kNK, ws.data()},
              cfg, s);
          comm.sync(s);
          comm.barrier();
        });
    for (int r = 0; r < P; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(P));
      const auto& ev = rec[r].events;
      EXPECT_EQ(rec[r].dropped, 0u);
      for (const auto& e : ev) EXPECT_EQ(e.rank, r);
      EXPECT_GT(count(ev, K::kKernelStart), 0);
      EXPECT_EQ(count(ev, K::kKernelStart), count(ev, K::kKernelEnd));
      uint64_t arrived = 0, ready = 0;  // the ready barrier's arrive and exit (this rank's clock, like its tiles')
      for (int q = 0; q < P; ++q) {
        EXPECT_EQ(count(ev, K::kChunkSend, q), q == r ? 0 : 1) << "peer " << q;
        EXPECT_EQ(count(ev, K::kChunkRecv, q), q == r ? 0 : 1) << "peer " << q;
      }
      for (const auto& e : ev) {
        if (e.kind == (uint8_t)K::kChunkSend) arrived = std::max(arrived, e.t_ns);
        if (e.kind == (uint8_t)K::kChunkRecv) ready = std::max(ready, e.t_ns);
      }
      EXPECT_LE(arrived, ready);
      const PerTile tiles = per_tile(ev);
      EXPECT_EQ((int)tiles.size(), T);
      for (const auto& [id, k] : tiles) {
        ASSERT_LT(id, (uint32_t)T);
        ASSERT_EQ(k[(int)K::kMmaStart].size(), 1u) << "tile " << id;
        ASSERT_EQ(k[(int)K::kMmaEnd].size(), 1u) << "tile " << id;
        for (K x : {K::kPartialLeave, K::kPartialsSeen, K::kReduceDone, K::kTileLanded}) EXPECT_TRUE(k[(int)x].empty());
        EXPECT_LE(k[(int)K::kMmaStart][0], k[(int)K::kMmaEnd][0]) << "tile " << id;
        EXPECT_GE(k[(int)K::kMmaStart][0], ready) << "tile " << id << " started before every shard was in place";
      }
    }
    expect_no_missing(rec);
  }
}

}  // namespace
