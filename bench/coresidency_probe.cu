// bench/coresidency_probe.cu — how many whole-SM CTAs can be resident at once, in the pattern of
// a virtual team: P grids on P non-blocking streams of one GPU, each CTA holding so much shared
// memory that no two fit on one SM. Every CTA adds 1 to a global counter and spins (bounded by a
// clock budget) until the counter reaches the CTAs of all P grids; the CTAs that saw the total
// met every other, those that did not were waiting for a CTA that could not be placed.
// Plain CUDA, no tilewire: it tells what the device (or a tool such as compute-sanitizer, which
// may keep SMs for itself) lets the fused kernels' persistent grids count on.
// Usage (GPU machine):  coresidency_probe [spin ms, default 2000]
// Prints per (P, CTAs per grid): the CTAs launched, the fewest arrivals any CTA saw before it
// stopped (all of them: every CTA met every other; fewer: some CTA gave up waiting for a CTA
// that was not placed until others exited), and met/SHORT.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

// One thread per CTA counts and spins; the shared memory is what keeps the CTA alone on its SM.
__global__ void meet(unsigned* count, unsigned* seen_min, unsigned total, long long spin_ns) {
  extern __shared__ char smem[];
  if (threadIdx.x != 0) return;
  smem[0] = 1;
  atomicAdd(count, 1u);
  long long t0 = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  unsigned seen = 0;
  for (;;) {
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(count));
    if (seen >= total) break;
    long long t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > spin_ns) break;
    __nanosleep(1000);
  }
  atomicMin(seen_min, seen);
}

int main(int argc, char** argv) {
  const long long spin_ms = argc > 1 ? std::atoll(argv[1]) : 2000;
  int dev = 0, sms = 0, smem_max = 0, smem_sm = 0;
  CK(cudaSetDevice(dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  CK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  // More than half an SM's shared memory: one CTA per SM.
  const int smem = smem_sm / 2 + 8 * 1024 < smem_max ? smem_sm / 2 + 8 * 1024 : smem_max;
  CK(cudaFuncSetAttribute(meet, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, meet, 128, smem));
  std::printf("# coresidency_probe: %d SMs, %d B shared memory per CTA, %d CTA(s) per SM, spin bound %lld ms\n",
              sms, smem, per_sm, spin_ms);
  std::printf("# %4s %8s %8s %8s %s\n", "P", "per_grid", "ctas", "min_seen", "result");
  unsigned *count = nullptr, *seen = nullptr;
  CK(cudaMalloc(&count, 4));
  CK(cudaMalloc(&seen, 4));
  std::vector<cudaStream_t> streams(8);
  for (auto& s : streams) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int Ps[] = {1, 2, 4};
  for (int P : Ps) {
    const int full = sms / P;
    for (int per = full - 2; per <= full; ++per) {
      if (per < 1) continue;
      const unsigned total = (unsigned)(per * P);
      CK(cudaMemset(count, 0, 4));
      CK(cudaMemset(seen, 0xFF, 4));
      CK(cudaDeviceSynchronize());
      for (int r = 0; r < P; ++r) meet<<<per, 128, smem, streams[r]>>>(count, seen, total, spin_ms * 1000000ll);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      unsigned got = 0;
      CK(cudaMemcpy(&got, seen, 4, cudaMemcpyDeviceToHost));
      std::printf("  %4d %8d %8u %8u %s\n", P, per, total, got, got >= total ? "met" : "SHORT");
    }
  }
  for (auto& s : streams) CK(cudaStreamDestroy(s));
  CK(cudaFree(count));
  CK(cudaFree(seen));
  return 0;
}
