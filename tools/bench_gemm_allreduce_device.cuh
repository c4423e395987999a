// tools/bench_gemm_allreduce_device.cuh — bench gemm-allreduce's device side and host RAII: the
// seeded inputs, the check kernel, device buffers, streams and events. Included by
// bench_gemm_allreduce.cu only (inside its anonymous namespace, after its constants).
#pragma once

// ------------------------------------------------------------------ device: inputs and check
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// x[0, n) = uniform bf16 in [-1, 1) from (seed, i).
__global__ void fill_uniform(__nv_bfloat16* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16_rn((float)(mix64(seed ^ i) >> 40) * (2.f / 16777216.f) - 1.f);
}

struct CheckResult {
  unsigned long long wrong;     // elements outside the bound (file comment), NaN included, + guard bytes hit
  unsigned long long checksum;  // sum over i of mix64(bits(c[i]), i): order-free, position-sensitive
};

// c[0, n) against ref = sum over LSA ranks p of partials_p[i] (bf16, at offset 0 of the window on
// every rank), within rel * mag + abs_tol, mag = sum of |partials_p[i]|; both in fp32, rank order.
// The guard bytes after c[n) must still be 0xFF. Every rank's partials are in place before launch.
__global__ void check_kernel(const __nv_bfloat16* c, const __grid_constant__ DevCtx ctx, DevWindow partials,
                             size_t n, float rel, float abs_tol, CheckResult* out) {
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long wrong = 0, sum = 0;
  for (size_t i = tid; i < n; i += stride) {
    float b = 0, m = 0;
    for (int p = 0; p < ctx.lsa_size; ++p) {
      const float x = __bfloat162float(dev::lsa_ptr<const __nv_bfloat16>(ctx, partials, 0, p)[i]);
      b += x;
      m += fabsf(x);
    }
    const float e = __bfloat162float(c[i]);
    wrong += !(fabsf(e - b) <= rel * m + abs_tol);
    sum += mix64(((uint64_t)__bfloat16_as_ushort(c[i]) << 40) ^ i);
  }
  const unsigned char* guard = reinterpret_cast<const unsigned char*>(c + n);
  for (size_t i = tid; i < kGuardBytes; i += stride) wrong += guard[i] != 0xFF;
  for (int o = 16; o > 0; o >>= 1) {
    wrong += __shfl_down_sync(0xFFFFFFFFu, wrong, o);
    sum += __shfl_down_sync(0xFFFFFFFFu, sum, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&out->wrong, wrong);
    atomicAdd(&out->checksum, sum);
  }
}

// ------------------------------------------------------------------ host RAII: bench_raii.hpp

// Byte offset `elems` bf16 elements into p.
template <class P> P* at(P* p, size_t elems) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(p) + elems * 2);
}
