// TraceBuffer (device ring, host RAII), the clock-offset arithmetic, and Trace assembly/alignment.
// The clock-sync kernels: clock_sync.cu. Metrics: metrics.cpp. Files: perfetto.cpp.
#include "tilewire/trace/trace.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::trace {

// ------------------------------------------------------------------------------ TraceBuffer
TraceBuffer::TraceBuffer(uint32_t capacity) : capacity_(capacity) {
  TW_REQUIRE(capacity > 0, kInvalidArgument, "TraceBuffer: capacity must be > 0 events");
  TW_CUDA_CHECK(cudaGetDevice(&device_));
  try {
    TW_CUDA_CHECK(cudaMalloc(&events_, sizeof(Event) * (size_t)capacity));
    TW_CUDA_CHECK(cudaMalloc(&count_, sizeof(unsigned long long)));
    TW_CUDA_CHECK(cudaMemset(count_, 0, sizeof(unsigned long long)));
  } catch (...) {
    release();
    throw;
  }
}

TraceBuffer::TraceBuffer(TraceBuffer&& o) noexcept { *this = std::move(o); }

TraceBuffer& TraceBuffer::operator=(TraceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    device_ = std::exchange(o.device_, -1);
    events_ = std::exchange(o.events_, nullptr);
    count_ = std::exchange(o.count_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
  }
  return *this;
}

TraceBuffer::~TraceBuffer() { release(); }

void TraceBuffer::release() noexcept {
  if (events_ == nullptr && count_ == nullptr) return;
  int prev = -1;
  cudaGetDevice(&prev);
  if (device_ >= 0) cudaSetDevice(device_);
  if (events_) cudaFree(events_);
  if (count_) cudaFree(count_);
  if (prev >= 0) cudaSetDevice(prev);
  events_ = nullptr;
  count_ = nullptr;
}

Ring TraceBuffer::ring(int rank) const {
  TW_REQUIRE(rank >= 0 && rank <= 0xFFFF, kInvalidArgument,
             "TraceBuffer::ring: rank " + std::to_string(rank) + " does not fit the event's 16-bit rank field");
  Ring r;
  r.events = events_;
  r.count = count_;
  r.capacity = capacity_;
  r.rank = (uint16_t)rank;
  return r;
}

void TraceBuffer::reset(cudaStream_t stream) {
  TW_REQUIRE(count_ != nullptr, kState, "TraceBuffer::reset: the buffer was moved from");
  TW_CUDA_CHECK(cudaMemsetAsync(count_, 0, sizeof(unsigned long long), stream));
  // Slots written with emit_at() are found by t_ns != 0: clear them all.
  TW_CUDA_CHECK(cudaMemsetAsync(events_, 0, sizeof(Event) * capacity_, stream));
}

namespace {
std::vector<Event> fetch(const Event* events, const unsigned long long* count, uint32_t capacity, uint64_t* dropped) {
  unsigned long long n = 0;
  TW_CUDA_CHECK(cudaMemcpy(&n, count, sizeof(n), cudaMemcpyDeviceToHost));
  const size_t kept = (size_t)std::min<unsigned long long>(n, capacity);
  std::vector<Event> out(kept);
  if (kept) TW_CUDA_CHECK(cudaMemcpy(out.data(), events, sizeof(Event) * kept, cudaMemcpyDeviceToHost));
  if (dropped) *dropped = (uint64_t)(n - kept);
  // Reserved slots an emitter never wrote (emit_at layouts with holes) hold zeros.
  out.erase(std::remove_if(out.begin(), out.end(), [](const Event& e) { return e.t_ns == 0; }), out.end());
  return out;
}
}  // namespace

std::vector<Event> TraceBuffer::download(uint64_t* dropped, cudaStream_t stream) {
  TW_REQUIRE(count_ != nullptr, kState, "TraceBuffer::download: the buffer was moved from");
  TW_CUDA_CHECK(cudaStreamSynchronize(stream));
  return fetch(events_, count_, capacity_, dropped);
}

// ------------------------------------------------------------------------------ clock offsets
ClockSync clock_sync_from_stamps(int nranks, int rounds, const std::vector<uint64_t>& stamps) {
  TW_REQUIRE(nranks >= 1 && rounds >= 1, kInvalidArgument, "clock sync: need nranks >= 1 and rounds >= 1");
  const size_t need = (size_t)nranks * rounds * 3 + nranks;
  TW_REQUIRE(
      stamps.size() == need, kInvalidArgument,
      "clock sync: stamp table has " + std::to_string(stamps.size()) + " values, expected " + std::to_string(need));
  ClockSync cs;
  cs.rounds = rounds;
  cs.offset_ns.assign(nranks, 0);
  cs.error_ns.assign(nranks, 0);
  cs.rtt_ns.assign(nranks, 0);
  cs.tick_ns.assign(nranks, 0);
  const uint64_t* ticks = stamps.data() + (size_t)nranks * rounds * 3;
  for (int q = 0; q < nranks; ++q) cs.tick_ns[q] = (int64_t)ticks[q];
  for (int q = 1; q < nranks; ++q) {
    int best = -1;
    uint64_t best_rtt = 0;
    for (int r = 0; r < rounds; ++r) {
      const uint64_t* s = stamps.data() + ((size_t)q * rounds + r) * 3;
      TW_REQUIRE(s[0] != 0 && s[1] != 0 && s[2] != 0, kInvalidArgument,
                 "clock sync: rank " + std::to_string(q) + " round " + std::to_string(r) + " has a missing stamp");
      TW_REQUIRE(s[2] >= s[0], kInvalidArgument,
                 "clock sync: rank 0's clock went backwards in round " + std::to_string(r) + " with rank " +
                     std::to_string(q));
      const uint64_t rtt = s[2] - s[0];
      if (best < 0 || rtt < best_rtt) best = r, best_rtt = rtt;
    }
    const uint64_t* s = stamps.data() + ((size_t)q * rounds + best) * 3;
    const uint64_t mid = s[0] + (s[2] - s[0]) / 2;
    cs.offset_ns[q] = (int64_t)(s[1] - mid);  // two's complement: negative when q's clock is behind
    cs.rtt_ns[q] = (int64_t)best_rtt;
    // |true t1 instant - midpoint| <= ceil(rtt / 2) on rank 0's clock; each stamp is truncated to
    // its clock's tick, which widens the window by one tick of each clock.
    cs.error_ns[q] = (int64_t)((best_rtt + 1) / 2) + cs.tick_ns[0] + cs.tick_ns[q];
    cs.residual_ns = std::max(cs.residual_ns, cs.error_ns[q]);
  }
  return cs;
}

// ------------------------------------------------------------------------------ Trace
std::vector<Event> Trace::align() const {
  std::vector<Event> out = events;
  for (Event& e : out) {
    TW_REQUIRE(
        (int)e.rank < nranks, kInvalidArgument,
        "trace: an event of rank " + std::to_string(e.rank) + " in a trace of " + std::to_string(nranks) + " ranks");
    TW_REQUIRE(e.kind < (uint8_t)EventKind::kCount, kInvalidArgument,
               "trace: an event of unknown kind " + std::to_string(e.kind) + " (rank " + std::to_string(e.rank) +
                   ", id " + std::to_string(e.id) + ")");
    if (!offset_ns.empty()) {
      TW_REQUIRE(
          offset_ns.size() == (size_t)nranks, kInvalidArgument,
          "trace: " + std::to_string(offset_ns.size()) + " clock offsets for " + std::to_string(nranks) + " ranks");
      e.t_ns -= (uint64_t)offset_ns[e.rank];  // modular: a negative offset adds
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) {
    return std::tie(a.t_ns, a.rank, a.sm, a.kind, a.id) < std::tie(b.t_ns, b.rank, b.sm, b.kind, b.id);
  });
  return out;
}

Trace make_trace(const std::vector<std::vector<Event>>& per_rank, const ClockSync& sync,
                 const std::vector<uint64_t>& dropped) {
  Trace t;
  t.nranks = (int)per_rank.size();
  TW_REQUIRE(sync.offset_ns.empty() || sync.offset_ns.size() == per_rank.size(), kInvalidArgument,
             "make_trace: " + std::to_string(sync.offset_ns.size()) + " clock offsets for " +
                 std::to_string(per_rank.size()) + " ranks");
  t.offset_ns = sync.offset_ns;
  t.residual_ns = sync.residual_ns;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const Event& e : per_rank[r]) {
      TW_REQUIRE(e.rank == r, kInvalidArgument,
                 "make_trace: per_rank[" + std::to_string(r) + "] holds an event stamped rank " +
                     std::to_string(e.rank) + " (TraceBuffer::ring(rank) sets the stamp)");
      t.events.push_back(e);
    }
  }
  for (uint64_t d : dropped) t.dropped += d;
  return t;
}

// ------------------------------------------------------------------------------ gather
Trace gather_trace(Comm& comm, const TraceBuffer& buf, const ClockSync& sync, cudaStream_t stream) {
  const int P = comm.nranks();
  TW_REQUIRE(buf.device_count() != nullptr, kState, "gather_trace: the buffer was moved from");
  TW_REQUIRE((int)sync.offset_ns.size() == P, kInvalidArgument,
             "gather_trace: " + std::to_string(sync.offset_ns.size()) + " clock offsets for " + std::to_string(P) +
                 " ranks (measure_clock_offsets on this communicator)");
  // This rank's count and events to the host, then a host all-gather (the communicator's own
  // collective: NCCL, or the virtual team's rendezvous).
  const size_t cap = buf.capacity();
  TW_REQUIRE(P <= 32, kUnsupported, "gather_trace: more than 32 ranks");
  const size_t per = sizeof(unsigned long long) + cap * sizeof(Event);
  std::vector<char> mine(per), gathered(per * P);
  TW_CUDA_CHECK(cudaMemcpyAsync(mine.data(), buf.device_count(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream));
  TW_CUDA_CHECK(cudaMemcpyAsync(mine.data() + sizeof(unsigned long long), buf.device_events(), cap * sizeof(Event),
                                cudaMemcpyDeviceToHost, stream));
  comm.sync(stream);
  comm.allgather_host(mine.data(), gathered.data(), per);
  std::vector<unsigned long long> n(P);
  std::vector<Event> all((size_t)P * cap);
  for (int r = 0; r < P; ++r) {
    std::memcpy(&n[r], gathered.data() + per * r, sizeof(unsigned long long));
    std::memcpy(all.data() + (size_t)r * cap, gathered.data() + per * r + sizeof(unsigned long long), cap * sizeof(Event));
  }
  std::vector<std::vector<Event>> per_rank(P);
  std::vector<uint64_t> dropped(P);
  for (int r = 0; r < P; ++r) {
    const size_t kept = (size_t)std::min<unsigned long long>(n[r], cap);
    dropped[r] = (uint64_t)(n[r] - kept);
    for (size_t i = 0; i < kept; ++i) {
      const Event& e = all[(size_t)r * cap + i];
      if (e.t_ns != 0) per_rank[r].push_back(e);  // emit_at slots never written stay zero
    }
  }
  return make_trace(per_rank, sync, dropped);
}

}  // namespace tw::trace
