// The one place tilewire asks NCCL for window pointers: it turns a registered window into the
// DevWindow handle every kernel uses, and checks NCCL's mapping for every LSA peer first.
#include "nccl_window.hpp"

#include <nccl_device.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace {

// out[p] = LSA peer p's copy of byte 0 (p < n); out[n] = the local pointer.
__global__ void probe_lsa_mapping(ncclWindow_t w, int n, uint64_t* out) {
  for (int p = threadIdx.x; p < n; p += blockDim.x) out[p] = (uint64_t)(uintptr_t)ncclGetLsaPointer(w, 0, p);
  if (threadIdx.x == 0) out[n] = (uint64_t)(uintptr_t)ncclGetLocalPointer(w, 0);
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%llx", (unsigned long long)v);
  return b;
}

}  // namespace

DevWindow nccl_dev_window(ncclWindow_t w, int lsa_rank, int lsa_size, size_t bytes, cudaStream_t stream) {
  TW_REQUIRE(w != nullptr && lsa_size >= 1 && lsa_rank >= 0 && lsa_rank < lsa_size, kInvalidArgument,
             "nccl_dev_window: no window, or LSA rank " + std::to_string(lsa_rank) + " outside a team of " +
                 std::to_string(lsa_size));
  uint64_t* d = nullptr;
  TW_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(uint64_t) * (lsa_size + 1), stream));
  probe_lsa_mapping<<<1, 32, 0, stream>>>(w, lsa_size, d);
  const cudaError_t le = cudaGetLastError();
  std::vector<uint64_t> p(lsa_size + 1);
  if (le == cudaSuccess)
    TW_CUDA_CHECK(cudaMemcpyAsync(p.data(), d, sizeof(uint64_t) * p.size(), cudaMemcpyDeviceToHost, stream));
  cudaFreeAsync(d, stream);
  TW_CUDA_CHECK(le);
  TW_CUDA_CHECK(cudaStreamSynchronize(stream));

  const uint64_t base = p[0];
  const uint64_t stride = lsa_size > 1 ? p[1] - p[0] : 0;
  auto refuse = [&](const std::string& why) {
    throw_error(Errc::kUnsupported, __FILE__, __LINE__,
                "NCCL's mapping of a symmetric window is not what tilewire's handle assumes (LSA peer p's copy at "
                "base + p * stride): " +
                    why + ". This NCCL build maps windows differently; tilewire cannot use it.");
  };
  if (base == 0) refuse("peer 0's copy is at address 0");
  if (lsa_size > 1 && (p[1] <= p[0] || stride < bytes))
    refuse("peer 1's copy at " + hex(p[1]) + " is not past the end of peer 0's (" + hex(p[0]) + " + " +
           std::to_string(bytes) + " bytes)");
  for (int q = 0; q < lsa_size; ++q)
    if (p[q] != base + (uint64_t)q * stride)
      refuse("peer " + std::to_string(q) + "'s copy is at " + hex(p[q]) + ", expected " + hex(base + (uint64_t)q * stride));
  if (p[lsa_size] != p[lsa_rank])
    refuse("the local pointer " + hex(p[lsa_size]) + " is not LSA rank " + std::to_string(lsa_rank) + "'s copy " +
           hex(p[lsa_rank]));
  DevWindow dw;
  dw.lsa_base = reinterpret_cast<char*>(base);
  dw.lsa_stride = stride;
  dw.nccl = w;
  return dw;
}

}  // namespace tw
