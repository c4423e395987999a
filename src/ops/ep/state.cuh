// The EP buffer's host-side state (tilewire/ops/ep.hpp), shared by ep.cu (high throughput) and
// ll.cu (low latency).
#pragma once
#include "kernels.cuh"
#include "tilewire/ops/ep.hpp"

namespace tw {

struct EpBuffer::State {
  ops::ep::Geometry g{};
  Window win;
  ops::ep::Routing r{};
  uint32_t* depochs = nullptr;
  uint32_t* cepochs = nullptr;
  int* num_recv = nullptr;
  int* recv_per_expert = nullptr;
  int* recv_base = nullptr;
  ops::ep::Status* status = nullptr;  // host-mapped
  ops::ep::Status* status_dev = nullptr;
  size_t local_bytes = 0;
  bool dispatched = false;        // a dispatch ran since the buffer was made
  bool layout_changed = false;    // layout() ran after the last dispatch
  bool have_layout = false;
  trace::Ring ring{};
};


struct EpBuffer::LowLatency {
  ops::ep::ll::Geo g{};
  ops::ep::ll::Local s{};
  Window win;
  size_t local_bytes = 0;
  enum class Step { kIdle, kSent, kReceived, kCombineSent } step = Step::kIdle;
  const void* topk_idx = nullptr;  // of the last send (combine_recv's slots come from its layout)
};

}  // namespace tw
