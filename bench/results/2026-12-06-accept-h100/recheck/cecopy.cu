// D2D copy bandwidth on one GPU: cudaMemcpyAsync, cudaMemcpyBatchAsync(PreferOverlapWithCompute),
// and an SM copy kernel; 1 stream and 4 concurrent streams (what 4 virtual ranks do).
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)
__global__ void kcopy(const int4* s, int4* d, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) d[i] = s[i];
}
int main() {
  const int S = 4, reps = 10;
  std::vector<cudaStream_t> st(S);
  for (auto& s : st) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t maxb = size_t(256) << 20;
  std::vector<void*> src(S), dst(S);
  for (int i = 0; i < S; ++i) { CK(cudaMalloc(&src[i], maxb)); CK(cudaMalloc(&dst[i], maxb)); CK(cudaMemset(src[i], 1, maxb)); }
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (size_t mb : {1, 4, 16, 64, 256}) {
    const size_t b = mb << 20;
    for (int mode = 0; mode < 3; ++mode)
      for (int ns : {1, S}) {
        auto go = [&](int i) -> cudaError_t {
          if (mode == 0) return cudaMemcpyAsync(dst[i], src[i], b, cudaMemcpyDeviceToDevice, st[i]);
          if (mode == 1) {
            cudaMemcpyAttributes a{}; a.srcAccessOrder = cudaMemcpySrcAccessOrderStream; a.flags = cudaMemcpyFlagPreferOverlapWithCompute;
            void* d[] = {dst[i]}; const void* s[] = {src[i]}; size_t z[] = {b}, idx[] = {0};
            return cudaMemcpyBatchAsync(d, s, z, 1, &a, idx, 1, st[i]);
          }
          kcopy<<<sms / ns, 512, 0, st[i]>>>((const int4*)src[i], (int4*)dst[i], b / 16);
          return cudaGetLastError();
        };
        for (int i = 0; i < ns; ++i) CK(go(i));
        CK(cudaDeviceSynchronize());
        float best = 1e9, worst = 0;
        for (int r = 0; r < reps; ++r) {
          CK(cudaEventRecord(e0, 0));
          for (int i = 0; i < ns; ++i) CK(cudaStreamWaitEvent(st[i], e0, 0));
          for (int i = 0; i < ns; ++i) CK(go(i));
          for (int i = 0; i < ns; ++i) { cudaEvent_t x; CK(cudaEventCreate(&x)); CK(cudaEventRecord(x, st[i])); CK(cudaStreamWaitEvent(0, x, 0)); cudaEventDestroy(x); }
          CK(cudaEventRecord(e1, 0));
          CK(cudaEventSynchronize(e1));
          float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
          best = ms < best ? ms : best; worst = ms > worst ? ms : worst;
        }
        const char* nm[] = {"memcpyAsync", "batch+overlap", "SM kernel"};
        printf("%4zu MB x %d streams %-14s best %8.1f us worst %8.1f us  %7.0f GB/s (r+w counted once)\n", mb, ns, nm[mode], best * 1e3,
               worst * 1e3, double(b) * ns / (best * 1e-3) / 1e9);
      }
  }
  return 0;
}
