// src/runtime/nccl_window.hpp — tilewire's device window handle from an NCCL registration.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "tilewire/device/context.hpp"

namespace tw {

// Reads NCCL's pointer to byte 0 of every LSA peer's copy of registered window `w` (and its
// local pointer) on the device, once, and returns the handle base + lsa_peer * stride. Throws
// kUnsupported if NCCL's mapping is not of that form (the peers' copies at one stride, at least
// `bytes` apart, the local copy at lsa_rank's), so kernels never see a handle that is wrong.
DevWindow nccl_dev_window(ncclWindow_t w, int lsa_rank, int lsa_size, size_t bytes, cudaStream_t stream);

}  // namespace tw
