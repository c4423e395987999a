// src/runtime/stream_guard.hpp — a private non-blocking stream for the library's own setup work
// (never the legacy default stream: it would wait for other ranks' kernels on a virtual team,
// which may wait for this rank).
#pragma once
#include <cuda_runtime.h>

#include "tilewire/runtime/errors.hpp"

namespace tw {

struct StreamGuard {
  cudaStream_t s = nullptr;
  StreamGuard() { TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~StreamGuard() { cudaStreamDestroy(s); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
};

}  // namespace tw
