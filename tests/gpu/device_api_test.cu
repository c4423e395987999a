// tests/gpu/device_api_test.cu — the device API (tilewire/device.cuh) from test kernels.
//
//   DeviceApi.PutSignalRing          put_signal rank r -> r+1 of seeded bytes inside a window; the
//                                    receiver waits on the signal and copies what arrived out; it
//                                    must equal the sender's bytes. Thread, warp and CTA groups,
//                                    vector and byte-loop sizes. 1 GPU: the ring is a self-loop.
//   DeviceApi.SignalAddSetSemantics  adds accumulate (from many blocks, release and relaxed), set
//                                    overrides (also downwards), add after set, wrap-safe compare.
//   DeviceApi.LsaBarrierPublishesPlainStores   (2+ GPUs) plain stores into peers' windows before
//                                    lsa_barrier are seen by plain loads after it, many rounds.
//   DeviceApi.LsaPointers            lsa_ptr(self) aliases the window's local memory; every peer on
//                                    the node is an LSA peer with a distinct mapping at base +
//                                    LSA rank x stride of the handle, and no other rank is.
// PutSignalRing and the adds of SignalAddSetSemantics cross nodes through GIN when the test team
// is in virtual nodes (TILEWIRE_TEST_RANKS_PER_NODE); sets stay inside the node.
// Every test runs on the test team (common.cuh): one rank per GPU, or P virtual ranks on one.
#include <type_traits>

#include "common.cuh"
#include "tilewire/device.cuh"

namespace {
using namespace tw_test;
namespace dev = tw::dev;

template <class Coop>
constexpr int threads_for() {
  if constexpr (std::is_same_v<Coop, dev::Cta>)
    return 256;
  else if constexpr (std::is_same_v<Coop, dev::Warp>)
    return 32;
  else
    return 1;
}

// --------------------------------------------------------------------------- put_signal
__host__ __device__ inline uint8_t byte_value(uint64_t seed, int rank, size_t i) {
  return (uint8_t)(mix(seed, rank, i) >> 17);
}
__global__ void fill_bytes(uint8_t* p, size_t n, uint64_t seed, int rank) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = byte_value(seed, rank, i);
}

// Rank r puts bytes [0, bytes) of its window into rank r+1's window at dst_off, adding 1 to r+1's
// signal `sig` (release); then waits for its own `sig` to reach `expect` (acquire) and copies what
// arrived at its own dst_off to `out`.
template <class Coop>
__global__ void ring_put_signal(const __grid_constant__ tw::DevCtx ctx, tw::DevWindow win, size_t dst_off, size_t bytes,
                                int sig, uint64_t expect, uint8_t* out) {
  Coop coop{};
  const int next = (ctx.rank + 1) % ctx.nranks;
  dev::put_signal(coop, ctx, next, win, dst_off, win, 0, bytes, sig, 1);
  dev::wait_signal(coop, ctx, sig, expect);
  const uint8_t* in = dev::lsa_ptr<const uint8_t>(ctx, win, dst_off, ctx.lsa_rank);
  for (size_t i = coop.thread_rank(); i < bytes; i += coop.size()) out[i] = in[i];
}

struct RingCase {
  size_t bytes, dst_off;
  int coop;  // 0 thread, 1 warp, 2 CTA
};

TEST(DeviceApi, PutSignalRing) {
  TW_SKIP_UNLESS_GPUS(1);
  constexpr size_t kWin = 4 << 20;
  const RingCase cases[] = {
      {16, 2 << 20, 2},             // one vector
      {48, 2 << 20, 0},             // a single thread does it all
      {4096 + 16, 2 << 20, 1},      // a warp
      {1 << 20, 2 << 20, 2},        // 1 MiB, vector path with 4 in flight
      {1000003, (2 << 20) + 8, 2},  // odd size and offset: byte loop
  };
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank(), P = comm.nranks(), prev = (r + P - 1) % P;
    Stream s;
    tw::Window win = comm.alloc_window(kWin);
    DeviceBuffer out(kWin);
    const int sig = 11;
    uint64_t expect = 0;  // one add per round arrives at every rank
    for (const RingCase& c : cases) {
      for (int round = 0; round < 3; ++round) {
        const uint64_t seed = c.bytes * 131 + round;
        fill_bytes<<<256, 256, 0, s>>>(win.as<uint8_t>(), c.bytes, seed, r);
        poison(win.as<char>() + c.dst_off, c.bytes, s);
        poison(out.data(), c.bytes, s);
        comm.sync(s);
        comm.barrier();  // every source filled and destination poisoned before any put
        ++expect;
        auto* o = static_cast<uint8_t*>(out.data());
        if (c.coop == 0)
          ring_put_signal<dev::Thread>
              <<<1, 1, 0, s>>>(comm.dev_ctx(), win.dev(), c.dst_off, c.bytes, sig, expect, o);
        if (c.coop == 1)
          ring_put_signal<dev::Warp><<<1, 32, 0, s>>>(comm.dev_ctx(), win.dev(), c.dst_off, c.bytes, sig, expect, o);
        if (c.coop == 2)
          ring_put_signal<dev::Cta><<<1, 256, 0, s>>>(comm.dev_ctx(), win.dev(), c.dst_off, c.bytes, sig, expect, o);
        TW_CUDA_CHECK(cudaGetLastError());
        comm.launched("test.put_signal");
        comm.sync(s);
        const Bytes got = to_host(out.data(), c.bytes, s);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < c.bytes; ++i)
          if (got[i] != byte_value(seed, prev, i) && bad++ == 0) first = i;
        EXPECT_EQ(bad, 0u) << c.bytes << " bytes at offset " << c.dst_off << " (coop " << c.coop << ", round " << round
                           << ") from rank " << prev << " to rank " << r << ": first wrong byte " << first;
        comm.barrier();  // the next round overwrites sources and destinations
      }
    }
  });
}

// ------------------------------------------------------------------------------ signals
// Block b adds b+1 to the next rank's signal `sig` (even blocks release, odd blocks relaxed);
// block 0 then waits for the whole sum from the previous rank and records the value it saw.
__global__ void add_from_every_block(const __grid_constant__ tw::DevCtx ctx, int sig, uint64_t* seen) {
  const int next = (ctx.rank + 1) % ctx.nranks;
  const auto order = (blockIdx.x & 1) ? cuda::memory_order_relaxed : cuda::memory_order_release;
  dev::signal(dev::Cta{}, ctx, next, sig, blockIdx.x + 1, dev::SignalOp::kAdd, order);
  if (blockIdx.x == 0) {
    const uint64_t want = (uint64_t)gridDim.x * (gridDim.x + 1) / 2;
    const uint64_t v = dev::wait_signal(dev::Cta{}, ctx, sig, want);
    if (threadIdx.x == 0) *seen = v;
  }
}
// One thread sets or adds `value` on the next LSA rank's signal `sig` (a ring inside the node:
// a set reaches LSA peers only).
__global__ void signal_next(const __grid_constant__ tw::DevCtx ctx, int sig, uint64_t value, dev::SignalOp op) {
  const int node0 = ctx.rank - ctx.lsa_rank;
  dev::signal(dev::Thread{}, ctx, node0 + (ctx.lsa_rank + 1) % ctx.lsa_size, sig, value, op);
}
__global__ void read_own(const __grid_constant__ tw::DevCtx ctx, int sig, uint64_t* out) {
  *out = dev::read_signal(ctx, sig);
}
__global__ void wait_own(const __grid_constant__ tw::DevCtx ctx, int sig, uint64_t expected, uint64_t* out) {
  *out = dev::wait_signal(dev::Thread{}, ctx, sig, expected);
}

TEST(DeviceApi, SignalAddSetSemantics) {
  TW_SKIP_UNLESS_GPUS(1);
  tw_test::run_team([&](tw::Comm& comm) {
    Stream s;
    DeviceBuffer dv(sizeof(uint64_t)), sv(sizeof(uint64_t));
    auto* d = static_cast<uint64_t*>(dv.data());
    auto* seen_d = static_cast<uint64_t*>(sv.data());
    const tw::DevCtx& ctx = comm.dev_ctx();
    // Run `launch`, wait for every rank, then return this rank's counter `sig`.
    auto step = [&](auto launch, int sig) {
      launch();
      TW_CUDA_CHECK(cudaGetLastError());
      comm.launched("test.signal");  // every rank's kernel is enqueued before anyone goes on (comm.hpp)
      comm.sync(s);
      comm.barrier();  // every rank's signal has landed
      read_own<<<1, 1, 0, s>>>(ctx, sig, d);
      uint64_t v = 0;
      TW_CUDA_CHECK(cudaMemcpyAsync(&v, d, sizeof v, cudaMemcpyDeviceToHost, s));
      comm.sync(s);
      comm.barrier();  // nobody signals again before everyone has read
      return v;
    };
    constexpr int kBlocks = 8, kSum = kBlocks * (kBlocks + 1) / 2;
    EXPECT_EQ(step([&] { add_from_every_block<<<kBlocks, 128, 0, s>>>(ctx, 3, seen_d); }, 3), (uint64_t)kSum)
        << "adds from " << kBlocks << " blocks (release and relaxed) must accumulate";
    uint64_t seen = 0;
    TW_CUDA_CHECK(cudaMemcpy(&seen, seen_d, sizeof seen, cudaMemcpyDeviceToHost));
    EXPECT_EQ(seen, (uint64_t)kSum) << "wait_signal returns the value that satisfied it";

    using Op = dev::SignalOp;
    // Counter 5: only its LSA part moves (counter 3 may hold a GIN part: a read adds both).
    EXPECT_EQ(step([&] { signal_next<<<1, 1, 0, s>>>(ctx, 5, 1000, Op::kSet); }, 5), 1000u) << "set overrides";
    EXPECT_EQ(step([&] { signal_next<<<1, 1, 0, s>>>(ctx, 5, 5, Op::kSet); }, 5), 5u) << "set overrides downwards";
    EXPECT_EQ(step([&] { signal_next<<<1, 1, 0, s>>>(ctx, 5, 2, Op::kAdd); }, 5), 7u) << "add after set";

    // Wrap: UINT64_MAX - 1 plus 3 is 1, which is "after" UINT64_MAX in rolling order, so a wait for
    // >= UINT64_MAX must be satisfied at once (a plain >= would time out).
    EXPECT_EQ(step([&] { signal_next<<<1, 1, 0, s>>>(ctx, 4, ~0ull - 1, Op::kSet); }, 4), ~0ull - 1);
    EXPECT_EQ(step([&] { signal_next<<<1, 1, 0, s>>>(ctx, 4, 3, Op::kAdd); }, 4), 1u);
    wait_own<<<1, 1, 0, s>>>(ctx, 4, ~0ull, d);
    TW_CUDA_CHECK(cudaMemcpyAsync(&seen, d, sizeof seen, cudaMemcpyDeviceToHost, s));
    EXPECT_NO_THROW(comm.sync(s)) << "a wrapped counter must satisfy a rolling >= wait";
    EXPECT_EQ(seen, 1u);
    comm.barrier();
  });
}

// -------------------------------------------------------------------------- LSA barrier
constexpr int kBarBlocks = 4, kBarPer = 1024;  // ints per (parity, block, source rank)

__host__ __device__ inline int bar_value(int round, int src, int block, int i) {
  return (int)(mix((uint64_t)round, src, (uint64_t)block * kBarPer + i) & 0x7ffffffe) | 1;  // never 0 or -1
}
__device__ inline size_t bar_slot(int parity, int block, int src, int P, int i) {
  return (((size_t)parity * kBarBlocks + block) * P + src) * kBarPer + i;
}

// Round k: store bar_value(k, me, ...) into every peer's window (plain stores, slot parity k&1),
// lsa_barrier, then check with plain loads that every peer's values of round k are in mine.
// Double-buffered by parity: a peer writes parity p again only after the next barrier, which I
// reach only after reading.
__global__ void barrier_exchange(const __grid_constant__ tw::DevCtx ctx, tw::DevWindow win, int rounds,
                                 unsigned long long* errors) {
  const int P = ctx.lsa_size, me = ctx.lsa_rank, b = blockIdx.x;
  const int* mine = dev::lsa_ptr<const int>(ctx, win, 0, me);
  unsigned long long bad = 0;
  for (int k = 0; k < rounds; ++k) {
    const int par = k & 1;
    for (int q = 0; q < P; ++q) {
      if (q == me) continue;
      int* theirs = dev::lsa_ptr<int>(ctx, win, 0, q);
      for (int i = threadIdx.x; i < kBarPer; i += blockDim.x)
        theirs[bar_slot(par, b, me, P, i)] = bar_value(k, me, b, i);
    }
    dev::lsa_barrier(dev::Cta{}, ctx, b);
    for (int q = 0; q < P; ++q) {
      if (q == me) continue;
      for (int i = threadIdx.x; i < kBarPer; i += blockDim.x)
        if (mine[bar_slot(par, b, q, P, i)] != bar_value(k, q, b, i)) ++bad;
    }
  }
  if (bad) atomicAdd(errors, bad);
}

TEST(DeviceApi, LsaBarrierPublishesPlainStores) {
  TW_SKIP_UNLESS_RANKS(2);
  const int P = team_size();
  std::vector<unsigned long long> errors(P, ~0ull);
  tw_test::run_team([&](tw::Comm& comm) {
    Stream s;
    tw::Window win = comm.alloc_window(sizeof(int) * 2 * kBarBlocks * P * kBarPer);
    DeviceBuffer err(sizeof(unsigned long long));
    poison(win.data(), win.bytes(), s);
    TW_CUDA_CHECK(cudaMemsetAsync(err.data(), 0, err.bytes, s));
    comm.sync(s);
    comm.barrier();
    barrier_exchange<<<kBarBlocks, 256, 0, s>>>(comm.dev_ctx(), win.dev(), 5000,
                                                static_cast<unsigned long long*>(err.data()));
    TW_CUDA_CHECK(cudaGetLastError());
    comm.launched("test.barrier_exchange");
    comm.sync(s);
    TW_CUDA_CHECK(cudaMemcpy(&errors[comm.rank()], err.data(), sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    comm.barrier();
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(errors[r], 0u) << "stale values read after lsa_barrier on rank " << r;
}

// --------------------------------------------------------------------------- pointers
__global__ void pointers(const __grid_constant__ tw::DevCtx ctx, tw::DevWindow win, size_t off, uintptr_t* out) {
  out[0] = (uintptr_t)dev::lsa_ptr<char>(ctx, win, off, ctx.lsa_rank);
  out[1] = (uintptr_t)dev::local_ptr<char>(ctx, win, off);
  for (int q = 0; q < ctx.nranks; ++q)
    out[2 + q] = dev::is_lsa_peer(ctx, q) ? (uintptr_t)dev::lsa_ptr<char>(ctx, win, off, dev::lsa_of_world(ctx, q)) : 0;
}

__global__ void store_u64(uintptr_t addr, uint64_t v) { *reinterpret_cast<uint64_t*>(addr) = v; }

// Every LSA rank, this one included, is reached through the handle's flat mapping. On NCCL,
// lsa_ptr(self) is a different virtual address than the ncclMemAlloc pointer, aliasing the same
// memory; on a virtual team it is the slice itself.
TEST(DeviceApi, LsaPointers) {
  TW_SKIP_UNLESS_GPUS(1);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank(), P = comm.nranks();
    Stream s;
    tw::Window win = comm.alloc_window(1 << 16);
    DeviceBuffer d(sizeof(uintptr_t) * (2 + P));
    const size_t off = 4096 + 48;
    pointers<<<1, 1, 0, s>>>(comm.dev_ctx(), win.dev(), off, static_cast<uintptr_t*>(d.data()));
    TW_CUDA_CHECK(cudaGetLastError());
    std::vector<uintptr_t> p(2 + P);
    TW_CUDA_CHECK(cudaMemcpyAsync(p.data(), d.data(), p.size() * sizeof(uintptr_t), cudaMemcpyDeviceToHost, s));
    comm.sync(s);
    const uintptr_t local = reinterpret_cast<uintptr_t>(win.as<char>() + off);
    EXPECT_EQ(p[0], p[1]) << "lsa_ptr(self) and local_ptr agree on rank " << r;
    const int L = ranks_per_node() > 0 && comm.is_virtual() ? ranks_per_node() : P, node0 = r - r % L;
    const tw::DevWindow h = win.dev();
    for (int q = node0; q < node0 + L; ++q)
      EXPECT_EQ(p[2 + q], reinterpret_cast<uintptr_t>(h.lsa_base) + (q - node0) * h.lsa_stride + off)
          << "peer " << q << " is at base + LSA rank x stride of the handle";
    if (comm.is_virtual()) {
      EXPECT_EQ(p[0], local) << "a virtual rank's own copy is its slice";
      EXPECT_EQ(h.nccl, nullptr);
    } else {
      EXPECT_NE(h.nccl, nullptr);
    }
    // Same memory: a store through lsa_ptr(self) is read back through the local pointer.
    const uint64_t v = 0x5EED000000000000ull + 77 * (r + 1);
    store_u64<<<1, 1, 0, s>>>(p[0], v);
    TW_CUDA_CHECK(cudaGetLastError());
    uint64_t back = 0;
    TW_CUDA_CHECK(cudaMemcpyAsync(&back, reinterpret_cast<void*>(local), sizeof(back), cudaMemcpyDeviceToHost, s));
    comm.sync(s);
    EXPECT_EQ(back, v) << "lsa_ptr(self) must alias the window's local memory on rank " << r;
    EXPECT_EQ(comm.all_lsa(), L == P) << "the LSA team is the node";
    EXPECT_EQ(comm.lsa_size(), L);
    if (comm.is_virtual()) EXPECT_EQ(comm.device(), 0) << "the virtual team runs on GPU 0";
    else EXPECT_EQ(comm.device(), r) << "run_local({}) puts rank r on GPU r";
    EXPECT_GT(comm.sm_count(), 0);
    for (int q = 0; q < P; ++q) {
      if (q < node0 || q >= node0 + L) {
        EXPECT_EQ(p[2 + q], 0u) << "rank " << q << " of another node is an LSA peer of rank " << r;
        continue;
      }
      EXPECT_NE(p[2 + q], 0u) << "rank " << q << " is not an LSA peer of rank " << r;
      if (q == r) {
        EXPECT_EQ(p[2 + q], p[0]);
      } else {
        EXPECT_NE(p[2 + q], p[0]) << "peer " << q << "'s window must be a different mapping";
        EXPECT_NE(p[2 + q], local) << "peer " << q << "'s window must be a different mapping";
      }
    }
    comm.barrier();
  });
}

}  // namespace
