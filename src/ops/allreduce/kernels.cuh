// All-reduce family kernels. See include/tilewire/ops/allreduce.hpp for the design and
// docs/allreduce.md for the timeline.
#pragma once
#include "pack.cuh"
#include "state.hpp"  // kOneShotMaxBlocks
#include "tilewire/device.cuh"

namespace tw::ops {

inline constexpr int kOneShotMaxThreads = 512;
inline constexpr int kTwoShotThreads = 512;
inline constexpr int kMaxRanks = 8;         // LSA team size the kernels are compiled for

// ---------------------------------------------------------------------------------- one-shot
// LL line: 16 bytes = {w0, flag, w1, flag}; 8 payload bytes, flags = the block's epoch.
struct OneShotLayout {
  size_t base;        // byte offset of staging in ctx.control (the family's need, state.hpp)
  uint32_t* epochs;   // [blocks]: each block's last epoch (local device memory, the need's)
  size_t blk_lines;   // lines per (parity, source rank, block)
  int nranks;
  int blocks;
  __device__ size_t line(int parity, int src, int block, size_t i) const {
    return base + ((((size_t)parity * nranks + src) * blocks + block) * blk_lines + i) * 16;
  }
};

// 8 payload bytes of line i; zero beyond `bytes` (bytes is a multiple of 2).
__device__ __forceinline__ uint2 load_payload(const char* src, size_t bytes, size_t i) {
  const size_t at = i * 8;
  if (at + 8 <= bytes) return *reinterpret_cast<const uint2*>(src + at);
  uint32_t w[2] = {0, 0};
  auto* h = reinterpret_cast<uint16_t*>(w);
  for (size_t b = at; b < bytes; b += 2) h[(b - at) / 2] = *reinterpret_cast<const uint16_t*>(src + b);
  return make_uint2(w[0], w[1]);
}
__device__ __forceinline__ void store_payload(char* dst, size_t bytes, size_t i, uint2 v) {
  const size_t at = i * 8;
  if (at + 8 <= bytes) {
    *reinterpret_cast<uint2*>(dst + at) = v;
    return;
  }
  uint32_t w[2] = {v.x, v.y};
  auto* h = reinterpret_cast<uint16_t*>(w);
  for (size_t b = at; b < bytes; b += 2) *reinterpret_cast<uint16_t*>(dst + b) = h[(b - at) / 2];
}

template <class T>
__global__ void __launch_bounds__(kOneShotMaxThreads) oneshot_allreduce(const __grid_constant__ DevCtx ctx, const T* send, T* recv,
                                                                     size_t count, OneShotLayout lay) {
  __shared__ uint32_t epoch_sh;
  const int b = blockIdx.x, P = ctx.lsa_size, me = ctx.lsa_rank;
  const size_t bytes = count * sizeof(T);
  const size_t lines = (bytes + 7) / 8;
  const size_t per_blk = (lines + gridDim.x - 1) / gridDim.x;
  const size_t l0 = (size_t)b * per_blk, l1 = min(lines, l0 + per_blk);
  const char* src = reinterpret_cast<const char*>(send);

  // Launched early (PDL): nothing the previous kernel touches is read before this.
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
  // The epoch load (thread 0) and each thread's first payload load are in flight together.
  uint2 first = l0 + threadIdx.x < l1 ? load_payload(src, bytes, l0 + threadIdx.x) : make_uint2(0, 0);
  // 0 is the tag of every staging line no call has written yet: a counter that wraps skips to 2
  // (the parity still alternates), so a peer's untouched line never reads as this call's.
  if (threadIdx.x == 0) {
    const uint32_t next = lay.epochs[b] + 1;
    epoch_sh = next == 0 ? 2u : next;
  }
  __syncthreads();
  const uint32_t epoch = epoch_sh;
  const int parity = epoch & 1;

  // Push: my payload, LL-encoded, into every peer's staging slot for source `me`.
  for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
    uint2 v = i == l0 + threadIdx.x ? first : load_payload(src, bytes, i);
    uint4 ll = make_uint4(v.x, epoch, v.y, epoch);
    const size_t off = lay.line(parity, me, b, i - l0);
    for (int k = 1; k < P; ++k) {
      int q = me + k < P ? me + k : me + k - P;
      ptx::st_volatile_v4(dev::lsa_ptr<char>(ctx, ctx.control, off, q), ll);
    }
  }
  // Reduce: sum the P payloads of each line in rank order 0..P-1, in fp32.
  constexpr int kPerLine = 2 * Elem<T>::kPerWord;
  const char* stage = dev::local_ptr<const char>(ctx, ctx.control, 0);
  for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
    float acc[kPerLine];
    for (int q = 0; q < P; ++q) {
      uint32_t w[2];
      if (q == me) {
        uint2 v = load_payload(src, bytes, i);
        w[0] = v.x;
        w[1] = v.y;
      } else {
        const char* p = stage + lay.line(parity, q, b, i - l0);
        uint4 ll = ptx::ld_volatile_v4(p);
        if (ll.y != epoch || ll.w != epoch) {
          dev::bounded_spin(
              ctx, "allreduce.oneshot", epoch,
              [&] {
                ll = ptx::ld_volatile_v4(p);
                return (uint64_t)(ll.y == epoch && ll.w == epoch ? epoch : (ll.y != epoch ? ll.y : ll.w));
              },
              [&](uint64_t) { return ll.y == epoch && ll.w == epoch; });
        }
        w[0] = ll.x;
        w[1] = ll.z;
      }
      if (q == 0) accumulate<T, 2, true>(acc, w);
      else accumulate<T, 2, false>(acc, w);
    }
    uint32_t out[2];
    pack_words<T, 2>(acc, out);
    store_payload(reinterpret_cast<char*>(recv), bytes, i, make_uint2(out[0], out[1]));
  }
  if (threadIdx.x == 0) lay.epochs[b] = epoch;
}

// ---------------------------------------------------------------------------------- two-shot
// Sum n elements at src[0..nsrc) (rank order) and store the result at every dst[0..ndst).
// Work is split over the whole grid; block b always handles the same vector indices for the
// same n and grid, on every rank (the per-block barriers rely on it).
// kP >= nsrc bounds the sources at compile time so all U*nsrc loads of an iteration are in
// flight before the first add; U vectors per thread per source.
template <class T, int kP, int U>
__device__ __forceinline__ void reduce_bcast(const T* const* src, int nsrc, T* const* dst, int ndst, size_t n,
                                             int local_src) {
  constexpr int kPerVec = 16 / sizeof(T);
  uintptr_t align = 0;
  for (int q = 0; q < nsrc; ++q) align |= reinterpret_cast<uintptr_t>(src[q]);
  for (int k = 0; k < ndst; ++k) align |= reinterpret_cast<uintptr_t>(dst[k]);
  const size_t nvec = (align & 15) == 0 ? n / kPerVec : 0;
  const size_t T_ = blockDim.x, G = gridDim.x, t = threadIdx.x;

  for (size_t base = (size_t)blockIdx.x * T_ * U; base < nvec; base += G * T_ * U) {
    uint4 v[kP][U];
#pragma unroll
    for (int q = 0; q < kP; ++q) {
      if (q >= nsrc) break;
      const char* s = reinterpret_cast<const char*>(src[q]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        size_t i = base + u * T_ + t;
        if (i < nvec) v[q][u] = (q == local_src) ? ptx::ld_nc_v4(s + 16 * i) : ptx::ld_relaxed_sys_v4(s + 16 * i);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      size_t i = base + u * T_ + t;
      if (i >= nvec) continue;
      float acc[kPerVec];
      accumulate<T, 4, true>(acc, reinterpret_cast<const uint32_t*>(&v[0][u]));
#pragma unroll
      for (int q = 1; q < kP; ++q)
        if (q < nsrc) accumulate<T, 4, false>(acc, reinterpret_cast<const uint32_t*>(&v[q][u]));
      uint4 o;
      pack_words<T, 4>(acc, reinterpret_cast<uint32_t*>(&o));
      for (int k = 0; k < ndst; ++k) ptx::st_v4(reinterpret_cast<char*>(dst[k]) + 16 * i, o);
    }
  }
  // Scalar tail (and the whole range when pointers are misaligned for vectors).
  for (size_t e = nvec * kPerVec + (size_t)blockIdx.x * T_ + t; e < n; e += G * T_) {
    float acc = 0.f;
    for (int q = 0; q < nsrc; ++q) {
      const volatile T* s = src[q];
      T x = const_cast<const T&>(s[e]);
      acc = (q == 0) ? float(x) : acc + float(x);
    }
    for (int k = 0; k < ndst; ++k) dst[k][e] = T(acc);
  }
}

// Vectors in flight per thread and source, by compile-time source bound.
template <int kP> inline constexpr int kUnrollFor = kP <= 1 ? 8 : (kP == 2 ? 4 : (kP == 4 ? 2 : 1));

enum class Mode { kAllReduce, kReduceScatter, kAllGather, kAllReducePush };

// Element range [e0, e1) of shard `s` of `count` elements over P ranks: vector-aligned splits,
// the last shard takes the tail.
template <class T>
__device__ __forceinline__ void shard_range(size_t count, int s, int P, size_t* e0, size_t* e1) {
  constexpr size_t kPerVec = 16 / sizeof(T);
  const size_t nv = count / kPerVec;
  *e0 = nv * s / P * kPerVec;
  *e1 = (s == P - 1) ? count : nv * (s + 1) / P * kPerVec;
}

// kAllReduce:     send/recv windows, count elements; rank s loads shard s from every rank,
//                 sums, stores it into every rank's recv.
// kAllReducePush: two ranks, out-of-place. Phase A: store my input of the peer's shard into the
//                 peer's recv (its own result slot, not yet written). Barrier. Phase B: owner
//                 sums its own input and that partial (rank order) from local memory and stores
//                 the result locally and into the peer's recv. Stores only on NVLink.
// kReduceScatter: send window holds count*P, recv is local, count elements.
// kAllGather:     send local, count elements; recv window holds count*P.
template <class T, int kP, Mode M>
__global__ void __launch_bounds__(kTwoShotThreads) twoshot(const __grid_constant__ DevCtx ctx, DevWindow swin,
                                                           size_t soff, const T* send, DevWindow rwin, size_t roff,
                                                           T* recv, size_t count) {
  constexpr int U = kUnrollFor<kP>;
  const int P = ctx.lsa_size, me = ctx.lsa_rank;
  ptx::griddep_wait();  // launched early (PDL): wait for the previous kernel before any access
  ptx::griddep_launch_dependents();
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "twoshot.entry");
  // Peer pointers in shared memory: indexed by a run-time rank, registers would spill to local.
  __shared__ const T* src[kMaxRanks];
  __shared__ T* dst[kMaxRanks];
  if constexpr (M == Mode::kAllReduce) {
    size_t e0, e1;
    shard_range<T>(count, me, P, &e0, &e1);
    if (threadIdx.x < P) {
      const int q = threadIdx.x;
      src[q] = (q == me ? send : dev::lsa_ptr<const T>(ctx, swin, soff, q)) + e0;
      dst[q] = (q == me ? recv : dev::lsa_ptr<T>(ctx, rwin, roff, q)) + e0;
    }
    __syncthreads();
    reduce_bcast<T, kP, U>(src, P, dst, P, e1 - e0, me);
  } else if constexpr (M == Mode::kAllReducePush) {
    const int peer = 1 - me;
    size_t e0, e1;
    shard_range<T>(count, peer, 2, &e0, &e1);
    if (threadIdx.x == 0) {
      src[0] = send + e0;
      dst[0] = dev::lsa_ptr<T>(ctx, rwin, roff, peer) + e0;
    }
    __syncthreads();
    reduce_bcast<T, 1, 4>(src, 1, dst, 1, e1 - e0, 0);  // phase A: a copy, same block mapping as B
    dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "twoshot.push");
    shard_range<T>(count, me, 2, &e0, &e1);
    if (threadIdx.x == 0) {
      // Rank order: rank 0's input first. The peer's partial sits in my recv.
      src[me] = send + e0;
      src[peer] = recv + e0;
      dst[0] = recv + e0;
      dst[1] = dev::lsa_ptr<T>(ctx, rwin, roff, peer) + e0;
    }
    __syncthreads();
    reduce_bcast<T, 2, 4>(src, 2, dst, 2, e1 - e0, /*local_src=*/me);
  } else if constexpr (M == Mode::kReduceScatter) {
    if (threadIdx.x < P) {
      const int q = threadIdx.x;
      src[q] = (q == me ? send : dev::lsa_ptr<const T>(ctx, swin, soff, q)) + count * me;
    }
    if (threadIdx.x == 0) dst[0] = recv;
    __syncthreads();
    reduce_bcast<T, kP, U>(src, P, dst, 1, count, me);
  } else {
    if (threadIdx.x == 0) src[0] = send;
    if (threadIdx.x < P) {
      const int q = threadIdx.x;
      dst[q] = (q == me ? recv : dev::lsa_ptr<T>(ctx, rwin, roff, q)) + count * me;
    }
    __syncthreads();
    reduce_bcast<T, 1, 8>(src, 1, dst, P, count, 0);
  }
  dev::lsa_barrier(dev::Cta{}, ctx, blockIdx.x, cuda::memory_order_acq_rel, "twoshot.exit");
}

}  // namespace tw::ops
