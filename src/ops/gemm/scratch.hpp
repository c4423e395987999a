// src/ops/gemm/scratch.hpp — device scratch of the stream-K GEMM kernel (fp32 partial tiles plus one
// counter per split tile and consumer warpgroup), owned by the library because tw::gemm takes no
// workspace argument.
//
// One buffer per (device, stream) — two streams never share one, so GEMMs running concurrently on
// different streams cannot overwrite each other's partial tiles — and, for cudaStreamPerThread, per
// host thread. Captures (cudaStreamBeginCapture) get buffers of their own, apart from eager calls on
// the same stream. Grow-only: a call that needs more allocates a new buffer (power of two, at least
// 1 MiB) and *retires* the old one instead of freeing it, since kernels already enqueued (or a CUDA
// graph that captured it) may still use it; everything is freed when the process exits. A mutex
// guards the table; a lease also holds its entry's own mutex, so two host threads enqueueing on
// one stream take turns.
//
// Counter state. The kernel's last split of every tile resets that tile's counters to 0
// (gemm_sm90_bf16_nk_streamk.cu), so after a launch the counters of *its* layout are zero again;
// the partial-tile area is garbage, and a launch with another layout may place its counters there.
// The entry remembers the layout of the last launch enqueued on it (`ScratchKey`: kernel, problem,
// SM count, scheduler arguments), or that the buffer is all zero (fresh, zeroed on its stream), or
// that nothing is known (another user of the buffer: overwritten());
// the launcher zeroes the counters (CUTLASS's initialize_workspace: one memset) only when neither
// holds. A repeated shape on one stream — every benchmark loop, every decode step — launches with
// no memset. Capture buffers never trust their state: a graph replays whenever its owner wants.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>

namespace tw::gemm_impl {

// Everything CUTLASS's workspace layout depends on, compared exactly.
using ScratchKey = std::array<int64_t, 10>;

struct ScratchEntry;

class ScratchLease {
 public:
  ScratchLease(ScratchEntry* e, std::unique_lock<std::mutex> lock) : e_(e), lock_(std::move(lock)) {}
  void* data() const;
  // True when, once the work already enqueued on the stream has run, the counters of `key` are 0.
  bool counters_zero(const ScratchKey& key) const;
  // Record that a launch with `key` was enqueued (call after a successful launch only).
  void enqueued(const ScratchKey& key);
  // Record that work enqueued on the stream uses the buffer as it likes (cuBLASLt's workspace,
  // the grouped GEMM's arrays): the next stream-K launch zeroes its counters, whatever its layout.
  // Call before enqueueing that work (a failure after it then still leaves the state distrusted).
  void overwritten();

 private:
  ScratchEntry* e_;
  std::unique_lock<std::mutex> lock_;
};

// The scratch of (current device, `stream`), grown to at least `bytes` (> 0). Throws tw::Error
// (kCuda) when the allocation fails, with the size and what to do.
ScratchLease lease_scratch(cudaStream_t stream, size_t bytes);

}  // namespace tw::gemm_impl
