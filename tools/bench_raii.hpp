// tools/bench_raii.hpp — the benches' owners of device memory, streams and events (host side).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "tilewire/runtime/errors.hpp"

namespace tw::cli {

struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { TW_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p, o.p);
    return *this;
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s) cudaStreamDestroy(s);
  }
};

struct Event {
  cudaEvent_t e = nullptr;
  explicit Event(unsigned flags = cudaEventDefault) { TW_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags)); }
  Event(Event&& o) noexcept : e(std::exchange(o.e, nullptr)) {}
  Event& operator=(Event&&) = delete;
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
};

}  // namespace tw::cli
