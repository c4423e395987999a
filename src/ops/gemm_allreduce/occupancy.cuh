// src/ops/gemm_allreduce/occupancy.cuh — how many clusters (of kClusterM CTAs) of a CUTLASS kernel can be
// resident at once on the current device (the persistent fused kernels refuse to run otherwise).
#pragma once
#include <cuda_runtime.h>

#include <cutlass/device_kernel.h>

#include "../gemm/launch.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_allreduce_impl {

template <class Kernel, int kClusterM = gemm_impl::kClusterM>
int max_active_clusters() {
  auto* fn = cutlass::device_kernel<Kernel>;
  const int smem = static_cast<int>(Kernel::SharedStorageSize);
  TW_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t lc{};
  lc.gridDim = dim3(kClusterM, 1, 1);
  lc.blockDim = dim3(Kernel::MaxThreadsPerBlock, 1, 1);
  lc.dynamicSmemBytes = static_cast<size_t>(smem);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kClusterM;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  int clusters = 0;
  TW_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, fn, &lc));
  return clusters;
}

}  // namespace tw::gemm_allreduce_impl
