// src/runtime/pdl_launch.hpp — launching a kernel with programmatic dependent launch, the one
// way tilewire's short communication kernels are launched (the all-reduce family, the EP
// low-latency mode).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

// Launch `kernel` on `stream` with programmatic dependent launch when the communicator's tuning
// allows it (KernelTuning::pdl, TILEWIRE_PDL): its CTAs may be scheduled while the kernel before
// it on the stream drains, which hides most of a launch. The kernel must call
// griddepcontrol.wait (ptx::griddep_wait) before it touches memory.
template <class... Params, class... Args>
void launch_pdl(const Comm& comm, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = comm.tuning().pdl ? 1 : 0;
  TW_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace tw
