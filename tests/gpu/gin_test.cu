// tests/gpu/gin_test.cu — virtual nodes and the emulated GIN (CommConfig::ranks_per_node,
// src/runtime/gin_emu.hpp).
//
//   Gin.PutsSignalsAndFlushUnderChaos  every rank puts chunks of seeded bytes to every other rank
//                                      (put, put_signal, signal), flushes, overwrites its sources,
//                                      then waits for its own signal; every byte received must be
//                                      the sender's. With the test team in nodes the peers of other
//                                      nodes are GIN peers, and the emulation reorders and delays
//                                      puts, signals and flushes under several seeds: a signal seen
//                                      before the data it covers, or a flush that returned before a
//                                      source was read, shows as wrong bytes.
//   Gin.VirtualNodeShape               (team in nodes) the LSA team is the node, windows' LSA base
//                                      is the node's first rank, GIN is available, ops that need an
//                                      all-LSA team refuse with their reason.
//   Gin.BadNodeConfig                  ranks_per_node that does not divide P, or differs between
//                                      ranks: refused before any rank is made.
// TILEWIRE_TEST_GIN_SEEDS (default 3) sets how many chaos seeds the first test runs.
#include <cstdlib>
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/device.cuh"

namespace {
using namespace tw_test;
namespace dev = tw::dev;

constexpr int kChunks = 6;
constexpr size_t kChunk = 40960;  // bytes per chunk slot
// Chunk c's bytes: vector-sized, except one odd size (the LSA byte loop; GIN takes any size).
__host__ __device__ inline size_t chunk_bytes(int c) { return c == 1 ? kChunk - 16 * 7 - 5 : kChunk - 16 * (size_t)c; }
// Offsets in the window: [send block per destination | receive block per source], P blocks each.
__host__ __device__ inline size_t send_off(int dst, int c) { return ((size_t)dst * kChunks + c) * kChunk; }
__host__ __device__ inline size_t recv_off(int P, int src, int c) { return ((size_t)(P + src) * kChunks + c) * kChunk; }

__host__ __device__ inline uint8_t gin_byte(uint64_t seed, int rank, size_t i) {
  return (uint8_t)(mix(seed, rank, i) >> 23) | 1;  // never 0 (a poisoned byte is 0xFF: may collide; see the check)
}
__global__ void fill_send(uint8_t* win, int P, uint64_t seed, int rank) {
  const size_t n = (size_t)P * kChunks * kChunk;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    win[i] = gin_byte(seed, rank, i);
}

// CTA q sends to peer q (none to itself): chunks 0..kChunks-2 with put, the last with put_signal,
// then a signal alone; flushes; then overwrites the sources it sent (a flush that returned before
// the copies read them shows at the receiver). CTA 0 then waits for `expect` on its own signal.
__global__ void send_all(const __grid_constant__ tw::DevCtx ctx, tw::DevWindow win, int sig, uint64_t expect) {
  const int q = blockIdx.x, me = ctx.rank, P = ctx.nranks;
  dev::Cta cta;
  if (q != me) {
    for (int c = 0; c < kChunks - 1; ++c)
      dev::put(cta, ctx, q, win, recv_off(P, me, c), win, send_off(q, c), chunk_bytes(c));
    dev::put_signal(cta, ctx, q, win, recv_off(P, me, kChunks - 1), win, send_off(q, kChunks - 1),
                    chunk_bytes(kChunks - 1), sig, 1);
    dev::signal(cta, ctx, q, sig, 1, dev::SignalOp::kAdd);
    dev::gin_flush(cta, ctx);
    uint8_t* src = dev::local_ptr<uint8_t>(ctx, win, send_off(q, 0));
    for (size_t i = threadIdx.x; i < kChunks * kChunk; i += blockDim.x) src[i] = 0;
  }
  if (q == 0) dev::wait_signal(cta, ctx, sig, expect, cuda::memory_order_acquire, "test.gin.signals");
}

TEST(Gin, PutsSignalsAndFlushUnderChaos) {
  TW_SKIP_UNLESS_RANKS(2);
  const int P = team_size();
  const char* e = std::getenv("TILEWIRE_TEST_GIN_SEEDS");
  const int seeds = e && *e ? std::max(1, std::atoi(e)) : 3;
  for (int k = 0; k < seeds; ++k) {
    // Seed 1..: reorder among 16, delays up to 50 us, late signals up to 200 us, slow flushes up to 300 us.
    const std::string seed = std::to_string(1 + k);
    ScopedEnv s1("TILEWIRE_GIN_EMU_SEED", seed.c_str()), s2("TILEWIRE_GIN_EMU_REORDER", "16"),
        s3("TILEWIRE_GIN_EMU_DELAY_US", "50"), s4("TILEWIRE_GIN_EMU_LATE_SIGNAL_US", "200"),
        s5("TILEWIRE_GIN_EMU_SLOW_FLUSH_US", "300");
    std::vector<size_t> wrong(P, ~size_t{0});
    tw_test::run_team([&](tw::Comm& comm) {
      const int r = comm.rank();
      Stream s;
      tw::Window win = comm.alloc_window(2 * (size_t)P * kChunks * kChunk);
      const int sig = 17;
      uint64_t expect = 0;
      size_t bad = 0;
      for (int round = 0; round < 3; ++round) {
        const uint64_t dseed = 1000003ull * (k + 1) + round;
        poison(win.data(), win.bytes(), s);
        fill_send<<<256, 256, 0, s>>>(win.as<uint8_t>(), P, dseed, r);
        comm.sync(s);
        comm.barrier();  // every source filled and every destination poisoned before any put
        expect += 2 * (uint64_t)(P - 1);  // a put_signal and a signal from every peer
        send_all<<<P, 256, 0, s>>>(comm.dev_ctx(), win.dev(), sig, expect);
        TW_CUDA_CHECK(cudaGetLastError());
        comm.launched("test.gin.send_all");
        comm.sync(s);
        const Bytes got = to_host(win.as<char>() + (size_t)P * kChunks * kChunk, (size_t)P * kChunks * kChunk, s);
        for (int src = 0; src < P; ++src) {
          if (src == r) continue;
          for (int c = 0; c < kChunks; ++c)
            for (size_t i = 0; i < chunk_bytes(c); ++i)
              if ((uint8_t)got[recv_off(P, src, c) - (size_t)P * kChunks * kChunk + i] !=
                  gin_byte(dseed, src, send_off(r, c) + i))
                ++bad;
        }
        comm.barrier();  // everyone checked before the next round's poison
      }
      wrong[r] = bad;
    });
    for (int q = 0; q < P; ++q)
      EXPECT_EQ(wrong[q], 0u) << "rank " << q << " received wrong bytes, chaos seed " << seed
                              << " (ranks per node " << ranks_per_node() << ")";
  }
}

TEST(Gin, VirtualNodeShape) {
  TW_SKIP_UNLESS_RANKS(2);
  const int P = team_size(), L = ranks_per_node();
  if (virtual_ranks() == 0 || L == 0 || L == P) GTEST_SKIP() << "needs a virtual team in nodes (TILEWIRE_TEST_RANKS_PER_NODE)";
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    EXPECT_EQ(comm.lsa_size(), L);
    EXPECT_EQ(comm.dev_ctx().lsa_rank, r % L);
    EXPECT_FALSE(comm.all_lsa());
    EXPECT_TRUE(comm.gin_available());
    tw::Window a = comm.alloc_window(4096), b = comm.alloc_window(4096);
    // The window's rank-0 copy of this node: the slice of world rank (r - r % L).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.dev().lsa_base) + (size_t)(r % L) * a.dev().lsa_stride,
              reinterpret_cast<uintptr_t>(a.data()));
    // An op that needs every rank load/store reachable refuses, with its reason.
    tw::AllReduceArgs ar;
    ar.send = a.data();
    ar.recv = b.data();
    ar.count = 256;
    ar.dtype = tw::DType::kFloat32;
    Stream s;
    try {
      tw::allreduce(comm, ar, s);
      ADD_FAILURE() << "allreduce ran on a team with GIN peers";
    } catch (const tw::Error& err) {
      EXPECT_NE(std::string(err.what()).find("LSA"), std::string::npos) << err.what();
    }
    comm.barrier();
  });
}

TEST(Gin, BadNodeConfig) {
  TW_SKIP_UNLESS_GPUS(1);
  tw::CommConfig c;
  c.ranks_per_node = 3;
  try {
    tw::Comm::run_virtual(0, 4, [](tw::Comm&) { ADD_FAILURE() << "a rank was made"; }, c);
    ADD_FAILURE() << "3 ranks per node of 4 accepted";
  } catch (const tw::Error& e) {
    EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ranks_per_node"), std::string::npos) << e.what();
  }
  std::vector<tw::CommConfig> per(4);
  per[0].ranks_per_node = 2;
  per[1].ranks_per_node = 2;
  per[2].ranks_per_node = 4;
  per[3].ranks_per_node = 2;
  try {
    tw::Comm::run_virtual(0, std::span<const tw::CommConfig>(per), [](tw::Comm&) { ADD_FAILURE() << "a rank was made"; });
    ADD_FAILURE() << "ranks that disagree on ranks_per_node accepted";
  } catch (const tw::Error& e) {
    EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
}

}  // namespace
