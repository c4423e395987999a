// The EP buffer's host-side state (tilewire/ops/ep.hpp), shared by ep.cu (high throughput) and
// ll.cu (low latency).
#pragma once
#include <algorithm>
#include <vector>

#include "kernels.cuh"
#include "../../runtime/stream_guard.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/ops/ep.hpp"

namespace tw {

// Zeroed device memory for the buffer's state, zeroed on `s` (a StreamGuard's: setup never uses
// the legacy default stream). At least one element, so that every pointer is valid.
template <class T>
T* ep_zalloc(size_t n, cudaStream_t s) {
  void* p = nullptr;
  TW_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  TW_CUDA_CHECK(cudaMemsetAsync(p, 0, std::max<size_t>(n, 1) * sizeof(T), s));
  return static_cast<T*>(p);
}

struct EpBuffer::State {
  ops::ep::Geometry g{};
  Window win;
  ops::ep::Routing r{};
  ops::ep::Epoch* depochs = nullptr;
  ops::ep::Epoch* cepochs = nullptr;
  ops::ep::Epoch* sepochs = nullptr;  // combine_slots' done exchange
  int* rank_over = nullptr;           // [P]: the last direct dispatch's ranks whose area overflowed
  int* num_recv = nullptr;
  int* recv_per_expert = nullptr;
  int* recv_base = nullptr;
  ops::ep::Status* status_dev = nullptr;  // device memory; check() reads it back
  uint64_t* sig0 = nullptr;               // GIN: the counters' values at creation ([4P])
  size_t local_bytes = 0;
  bool dispatched = false;        // a dispatch ran since the buffer was made
  bool layout_changed = false;    // layout() ran after the last dispatch
  bool direct = false;            // the last dispatch stored rows at their places (EpExpertPlaces)
  bool have_layout = false;
  trace::Ring ring{};

  // What every high-throughput kernel of this rank shares (kernels.cuh Common).
  ops::ep::Common common(const Comm& comm) const { return ops::ep::Common{comm.dev_ctx(), win.dev(), g, sig0}; }
};


struct EpBuffer::LowLatency {
  ops::ep::ll::Geo g{};
  ops::ep::ll::Local s{};
  Window win;
  size_t local_bytes = 0;
  // send_tma's allowance of dynamic shared memory (0: never; TILEWIRE_EP_LL_TMA=0 or no room).
  size_t tma_smem_max = 0;
  bool early = false;  // Params::early (TILEWIRE_EP_LL_EARLY, never on a virtual team)
  enum class Step { kIdle, kSent, kReceived, kCombineSent } step = Step::kIdle;

  // What every low-latency kernel takes; the call adds its own pointers.
  ops::ep::ll::Params params(const Comm& comm, const trace::Ring& ring) const {
    ops::ep::ll::Params p{};
    p.ctx = comm.dev_ctx();
    p.win = win.dev();
    p.g = g;
    p.ring = ring;
    p.s = s;
    p.early = early;
    return p;
  }
};

// The buffer's state, for tests that need to reach inside it.
struct EpAccess {
  // Every call counter of the buffer (the epochs that tag its flags) set to `calls`, as if that
  // many calls had run, on `stream`: a test then crosses a counter's wrap in a few calls. All-LSA
  // buffers only (a GIN peer's targets count from the buffer's creation); between calls.
  static void set_calls(EpBuffer& b, uint64_t calls, cudaStream_t stream) {
    TW_REQUIRE(b.comm_.all_lsa(), kUnsupported, "EpAccess::set_calls: the buffer has GIN peers");
    const auto fill = [&](ops::ep::Epoch* p, size_t n) {
      const std::vector<ops::ep::Epoch> v(n, (ops::ep::Epoch)calls);
      TW_CUDA_CHECK(cudaMemcpyAsync(p, v.data(), n * sizeof(ops::ep::Epoch), cudaMemcpyHostToDevice, stream));
      TW_CUDA_CHECK(cudaStreamSynchronize(stream));
    };
    if (b.ll_) {
      fill(b.ll_->s.epochs, 4 * (size_t)b.ll_->g.G);
    } else {
      fill(b.st_->depochs, (size_t)b.sms_);
      fill(b.st_->cepochs, (size_t)b.sms_);
      fill(b.st_->sepochs, (size_t)b.sms_);
    }
  }
};

}  // namespace tw
