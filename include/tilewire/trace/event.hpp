// tilewire/trace/event.hpp — the one trace record every tilewire op emits when tracing is on,
// and the device ring it goes into. Host side (collect, align clocks, metrics, Perfetto JSON):
// tilewire/trace/trace.hpp.
//
//   Event (16 bytes):  t_ns   %globaltimer of the GPU that recorded it (ns; per-GPU clock, aligned
//                             across GPUs on the host with the offsets measured by clock_sync)
//                      id     tile id (fused GEMM ops: tile_m * tiles_n + tile_n) or chunk id
//                      rank   the recording rank
//                      sm     %smid of the recording CTA
//                      kind   EventKind; its role (compute or communication) is role_of(kind)
//
// A Ring is a device buffer of `capacity` events plus a 64-bit counter. Two ways to fill it:
//   emit()     claims a slot with one atomicAdd and writes the event if the slot is < capacity; the
//              counter keeps counting past capacity, so the host sees how many were dropped.
//   emit_at()  writes a slot the emitter computed itself (an op with a fixed event layout: no
//              atomic, no round trip on its critical path); the op raises the counter to the end
//              of its layout once (reserve()). Unwritten slots stay zero (TraceBuffer::reset clears
//              them) and the host drops events with t_ns == 0.
// Tracing off = a null Ring::events: emitters test one pointer per tile (uniform branch) and do
// nothing else.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#include "tilewire/device/ptx.cuh"  // globaltimer, smid
#endif

#if defined(__CUDACC__)
#define TW_TRACE_HD __host__ __device__
#else
#define TW_TRACE_HD
#endif

namespace tw::trace {

enum class EventKind : uint8_t {
  kKernelStart = 0,   // a CTA started (id = CTA index)
  kMmaStart = 1,      // the CTA began the mainloop of tile `id`
  kMmaEnd = 2,        // accumulators of tile `id` final (epilogue entered)
  kPartialLeave = 3,  // first store of this rank's partial of tile `id` to a peer issued
  kPartialsSeen = 4,  // owner: every peer's partial of tile `id` has arrived (flags acquired)
  kReduceDone = 5,    // owner: tile `id` summed, stores of the final tile to every rank issued
  kTileLanded = 6,    // the final tile `id` is in this rank's C (done flag acquired / own store)
  kChunkSend = 7,     // generic communication op: chunk `id` send issued
  kChunkRecv = 8,     // generic communication op: chunk `id` received
  kKernelEnd = 9,     // a CTA finished (id = CTA index)
  kCount
};

enum class Role : uint8_t { kCompute = 0, kComm = 1, kKernel = 2 };

TW_TRACE_HD constexpr Role role_of(EventKind k) {
  switch (k) {
    case EventKind::kMmaStart:
    case EventKind::kMmaEnd: return Role::kCompute;
    case EventKind::kKernelStart:
    case EventKind::kKernelEnd: return Role::kKernel;
    default: return Role::kComm;
  }
}

TW_TRACE_HD constexpr const char* kind_name(EventKind k) {
  switch (k) {
    case EventKind::kKernelStart: return "kernel_start";
    case EventKind::kMmaStart: return "mma_start";
    case EventKind::kMmaEnd: return "mma_end";
    case EventKind::kPartialLeave: return "partial_leave";
    case EventKind::kPartialsSeen: return "partials_seen";
    case EventKind::kReduceDone: return "reduce_done";
    case EventKind::kTileLanded: return "tile_landed";
    case EventKind::kChunkSend: return "chunk_send";
    case EventKind::kChunkRecv: return "chunk_recv";
    case EventKind::kKernelEnd: return "kernel_end";
    default: return "unknown";
  }
}

struct alignas(16) Event {
  uint64_t t_ns;
  uint32_t id;
  uint16_t rank;
  uint8_t sm;
  uint8_t kind;  // EventKind
};
static_assert(sizeof(Event) == 16, "one 16-byte store per event");

// Device view of a trace buffer (trivially copyable: travels in kernel parameters).
struct Ring {
  Event* events = nullptr;             // null: tracing off
  unsigned long long* count = nullptr; // claimed slots (may exceed capacity: dropped = count - capacity)
  uint32_t capacity = 0;
  uint16_t rank = 0;
  TW_TRACE_HD bool on() const { return events != nullptr; }
};

#if defined(__CUDACC__)
// One thread calls it. `t_ns` is taken by the caller (so an event can be stamped before the
// work that follows it and written afterwards).
__device__ __forceinline__ void emit(const Ring& r, EventKind kind, uint32_t id, uint64_t t_ns) {
  if (!r.on()) return;
  const unsigned long long slot = atomicAdd(r.count, 1ull);
  if (slot < r.capacity) {
    Event e;
    e.t_ns = t_ns;
    e.id = id;
    e.rank = r.rank;
    e.sm = static_cast<uint8_t>(tw::ptx::smid());
    e.kind = static_cast<uint8_t>(kind);
    r.events[slot] = e;
  }
}
__device__ __forceinline__ void emit_at(const Ring& r, unsigned long long slot, EventKind kind, uint32_t id,
                                        uint64_t t_ns) {
  if (!r.on() || slot >= r.capacity) return;
  Event e;
  e.t_ns = t_ns;
  e.id = id;
  e.rank = r.rank;
  e.sm = static_cast<uint8_t>(tw::ptx::smid());
  e.kind = static_cast<uint8_t>(kind);
  r.events[slot] = e;
}
// Slots [0, n) are in use (emit_at's layout); past capacity they count as dropped.
__device__ __forceinline__ void reserve(const Ring& r, unsigned long long n) {
  if (r.on()) atomicMax(r.count, n);
}
#endif

}  // namespace tw::trace
