// bench/nvlink_ceiling.cu — what each way of writing to the peer GPU reaches over NVLink with
// both directions busy (GPU 0 -> 1 and 1 -> 0 at once), the situation of a 2-rank all-reduce's
// large sizes. Plain CUDA (peer access, no NCCL), so it isolates the transport:
//   st     SM threads: 16-byte loads from local memory, 16-byte stores to the peer (what the
//          all-reduce's two-shot kernels do), G blocks x T threads, U vectors in flight per thread;
//   tma    one thread per block drives a ring of NS shared-memory stages: bulk copy local ->
//          shared (cp.async.bulk + mbarrier), bulk copy shared -> peer (cp.async.bulk.global.shared);
//   ce     cudaMemcpyPeerAsync (the copy engines).
// Usage (GPU machine, 2 GPUs):  nvlink_ceiling [MiB per direction, default 256]
// Prints GB/s per direction (bytes / time of the slower GPU), median of 5 repeats.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

template <int U>
__global__ void __launch_bounds__(512) copy_st(const uint4* __restrict__ src, uint4* dst, size_t nvec) {
  const size_t stride = (size_t)gridDim.x * blockDim.x * U;
  for (size_t base = (size_t)blockIdx.x * blockDim.x * U + threadIdx.x; base < nvec; base += stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t i = base + (size_t)u * blockDim.x;
      if (i < nvec) v[u] = __ldg(src + i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t i = base + (size_t)u * blockDim.x;
      if (i < nvec) dst[i] = v[u];
    }
  }
}

__device__ __forceinline__ size_t dmin(size_t a, size_t b) { return a < b ? a : b; }
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// One thread per block; the block's slice is [b*per, (b+1)*per) bytes; chunks of `ch` bytes
// (multiple of 16) through `ns` stages.
__global__ void copy_tma(const char* src, char* dst, size_t bytes, int ch, int ns) {
  extern __shared__ __align__(128) char stage[];
  __shared__ __align__(8) uint64_t bar[16];
  if (threadIdx.x != 0) return;
  const size_t per = (bytes / gridDim.x + 15) / 16 * 16;
  const size_t lo = dmin(bytes, (size_t)blockIdx.x * per), hi = dmin(bytes, lo + per);
  const int chunks = (int)((hi - lo + ch - 1) / ch);
  for (int s = 0; s < ns; ++s)
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_u32(&bar[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto load = [&](int k) {
    const int s = k % ns;
    const size_t off = lo + (size_t)k * ch;
    const uint32_t n = (uint32_t)dmin(ch, hi - off);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_u32(&bar[s])), "r"(n) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(stage + (size_t)s * ch)),
                 "l"(src + off), "r"(n), "r"(smem_u32(&bar[s]))
                 : "memory");
  };
  for (int k = 0; k < (ns < chunks ? ns : chunks); ++k) load(k);
  for (int k = 0; k < chunks; ++k) {
    const int s = k % ns;
    const uint32_t parity = (k / ns) & 1;
    asm volatile(
        "{ .reg .pred p; W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1; @!p bra W; }" ::"r"(smem_u32(&bar[s])),
        "r"(parity)
        : "memory");
    const size_t off = lo + (size_t)k * ch;
    const uint32_t n = (uint32_t)dmin(ch, hi - off);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + off),
                 "r"(smem_u32(stage + (size_t)s * ch)), "r"(n)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // Refill the stage of chunk k - 1 (its store must have read shared memory) with chunk k - 1 + ns.
    if (k >= 1 && k - 1 + ns < chunks) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(k - 1 + ns);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

struct Pair {
  int dev;
  char* src;  // local
  char* dst;  // on the other GPU
  cudaStream_t st;
  cudaEvent_t e0, e1;
};

// Runs `launch` on both GPUs at once (each writes to the other), returns GB/s per direction.
double both(std::vector<Pair>& p, size_t bytes, const std::function<void(Pair&)>& launch) {
  std::vector<double> ts;
  for (int rep = 0; rep < 7; ++rep) {
    for (auto& x : p) {
      CK(cudaSetDevice(x.dev));
      CK(cudaStreamSynchronize(x.st));
    }
    for (auto& x : p) {
      CK(cudaSetDevice(x.dev));
      CK(cudaEventRecord(x.e0, x.st));
      launch(x);
      CK(cudaEventRecord(x.e1, x.st));
    }
    float worst = 0;
    for (auto& x : p) {
      CK(cudaSetDevice(x.dev));
      CK(cudaEventSynchronize(x.e1));
      CK(cudaGetLastError());
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, x.e0, x.e1));
      worst = std::max(worst, ms);
    }
    if (rep >= 2) ts.push_back(bytes / (worst * 1e-3) / 1e9);  // first two: warm-up
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const size_t bytes = mib << 20;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::printf("nvlink_ceiling: needs 2 GPUs, found %d\n", n);
    return 1;
  }
  std::vector<Pair> p(2);
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    p[d].dev = d;
    CK(cudaMalloc(&p[d].src, bytes));
    CK(cudaMemset(p[d].src, 0x11 * (d + 1), bytes));
    CK(cudaStreamCreateWithFlags(&p[d].st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&p[d].e0));
    CK(cudaEventCreate(&p[d].e1));
  }
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(1 - d));
    CK(cudaMalloc(&p[d].dst, bytes));  // GPU d writes into memory of GPU 1 - d
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("# nvlink_ceiling: %zu MiB per direction, both directions at once; GB/s per direction\n", mib);
  std::printf("ce     cudaMemcpyPeerAsync                 %7.1f\n", both(p, bytes, [&](Pair& x) {
                CK(cudaMemcpyPeerAsync(x.dst, 1 - x.dev, x.src, x.dev, bytes, x.st));
              }));
  for (int g : {sms / 2, sms, 2 * sms})
    for (int u : {4, 8}) {
      const double bw = both(p, bytes, [&](Pair& x) {
        if (u == 4) copy_st<4><<<g, 512, 0, x.st>>>((const uint4*)x.src, (uint4*)x.dst, bytes / 16);
        else copy_st<8><<<g, 512, 0, x.st>>>((const uint4*)x.src, (uint4*)x.dst, bytes / 16);
      });
      std::printf("st     blocks %4d threads 512 vectors %d   %7.1f\n", g, u, bw);
    }
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFuncSetAttribute(copy_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  }
  for (int g : {sms / 2, sms, 2 * sms})
    for (int ch : {8192, 16384, 32768})
      for (int ns : {4, 8}) {
        if ((size_t)ch * ns > 100 * 1024 && g > sms) continue;
        if ((size_t)ch * ns > 200 * 1024) continue;
        const double bw = both(p, bytes, [&](Pair& x) {
          copy_tma<<<g, 32, (size_t)ch * ns, x.st>>>(x.src, x.dst, bytes, ch, ns);
        });
        std::printf("tma    blocks %4d chunk %5d stages %d   %7.1f\n", g, ch, ns, bw);
      }
  // Spot check: the last copy landed.
  std::vector<unsigned char> h(16);
  CK(cudaSetDevice(1));
  CK(cudaMemcpy(h.data(), p[0].dst + bytes - 16, 16, cudaMemcpyDeviceToHost));
  std::printf("# check: last bytes GPU0->1 %s\n", h[0] == 0x11 && h[15] == 0x11 ? "ok" : "WRONG");
  return h[0] == 0x11 && h[15] == 0x11 ? 0 : 1;
}
