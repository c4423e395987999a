// The stream-K GEMM's scratch cache (scratch.hpp has the contract).
#include "scratch.hpp"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_impl {

struct ScratchEntry {
  enum class State { kUnknown, kAllZero, kLayout };
  std::mutex mu;             // held by a lease
  int device = 0;
  bool capture = false;      // buffer of captured launches: its state is never trusted
  void* ptr = nullptr;
  size_t bytes = 0;
  State state = State::kUnknown;
  ScratchKey layout{};       // kLayout: the last launch enqueued used this
};

namespace {

// (device, stream, capturing, host thread for cudaStreamPerThread; default id otherwise)
using EntryKey = std::tuple<int, uintptr_t, bool, std::thread::id>;

class ScratchCache {
 public:
  ScratchEntry* entry(const EntryKey& k) {
    std::lock_guard<std::mutex> g(mu_);
    std::unique_ptr<ScratchEntry>& e = entries_[k];
    if (!e) {
      e = std::make_unique<ScratchEntry>();
      e->device = std::get<0>(k);
      e->capture = std::get<2>(k);
    }
    return e.get();
  }
  void retire(int device, void* p) {
    std::lock_guard<std::mutex> g(mu_);
    retired_.emplace_back(device, p);
  }
  // Process exit: give everything back. Errors are ignored (the runtime may be unloading already).
  ~ScratchCache() {
    for (auto& [k, e] : entries_)
      if (e->ptr != nullptr) retired_.emplace_back(e->device, e->ptr);
    for (auto& [dev, p] : retired_) {
      if (cudaSetDevice(dev) == cudaSuccess) (void)cudaFree(p);
    }
    (void)cudaGetLastError();
  }

 private:
  std::mutex mu_;
  std::map<EntryKey, std::unique_ptr<ScratchEntry>> entries_;
  std::vector<std::pair<int, void*>> retired_;
};

ScratchCache& cache() {
  static ScratchCache c;
  return c;
}

size_t round_capacity(size_t bytes) {
  size_t c = size_t(1) << 20;
  while (c < bytes) c <<= 1;
  return c;
}

}  // namespace

void* ScratchLease::data() const { return e_->ptr; }

bool ScratchLease::counters_zero(const ScratchKey& key) const {
  if (e_->capture) return false;
  return e_->state == ScratchEntry::State::kAllZero ||
         (e_->state == ScratchEntry::State::kLayout && e_->layout == key);
}

void ScratchLease::overwritten() { e_->state = ScratchEntry::State::kUnknown; }

void ScratchLease::enqueued(const ScratchKey& key) {
  if (e_->capture) return;
  e_->state = ScratchEntry::State::kLayout;
  e_->layout = key;
}

ScratchLease lease_scratch(cudaStream_t stream, size_t bytes) {
  int dev = 0;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  TW_CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
  const bool capture = cs != cudaStreamCaptureStatusNone;
  // cudaStreamPerThread names a different stream in every host thread.
  const std::thread::id tid = stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id{};
  ScratchEntry* e = cache().entry(EntryKey{dev, reinterpret_cast<uintptr_t>(stream), capture, tid});
  std::unique_lock<std::mutex> lock(e->mu);
  if (e->bytes < bytes) {
    const size_t cap = round_capacity(bytes);
    void* p = nullptr;
    // cudaMalloc is a "potentially unsafe" call while any thread captures in the global mode: this
    // thread allows it for the one call (the allocation is not a stream operation).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    TW_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t err = cudaMalloc(&p, cap);
    TW_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      TW_REQUIRE(false, kCuda,
                 "gemm: the stream-K kernel needs " + std::to_string(bytes) + " bytes of device scratch (" +
                     std::to_string(cap) + " to allocate, cached per stream) and cudaMalloc failed: " +
                     cudaGetErrorString(err) + "; free device memory or set TILEWIRE_GEMM_KERNEL=hook");
    }
    if (e->ptr != nullptr) cache().retire(e->device, e->ptr);
    e->ptr = p;
    e->bytes = cap;
    e->state = ScratchEntry::State::kUnknown;
    if (!capture) {
      // Zeroed on the stream, before any kernel that uses it: every layout's counters start at 0.
      TW_CUDA_CHECK(cudaMemsetAsync(p, 0, cap, stream));
      e->state = ScratchEntry::State::kAllZero;
    }
  }
  return ScratchLease(e, std::move(lock));
}

}  // namespace tw::gemm_impl
