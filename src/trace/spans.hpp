// The pairing rules of trace/trace.hpp (which events make which interval), shared by the
// metrics (metrics.cpp) and the Perfetto writer (perfetto.cpp). Internal.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "tilewire/trace/event.hpp"

namespace tw::trace::detail {

constexpr int kKinds = (int)EventKind::kCount;

inline bool is_tile_kind(EventKind k) { return k >= EventKind::kMmaStart && k <= EventKind::kTileLanded; }
inline bool is_chunk_kind(EventKind k) { return k == EventKind::kChunkSend || k == EventKind::kChunkRecv; }
inline bool is_kernel_kind(EventKind k) { return k == EventKind::kKernelStart || k == EventKind::kKernelEnd; }

// Every event of one (rank, id) in one family (tile or chunk): per kind, how many, the earliest
// and latest time, and the SM of the earliest.
struct IdEvents {
  uint32_t n[kKinds] = {};
  uint64_t first[kKinds] = {};
  uint64_t last[kKinds] = {};
  uint8_t first_sm[kKinds] = {};

  void add(const Event& e) {
    const int k = e.kind;
    if (n[k] == 0 || e.t_ns < first[k]) first[k] = e.t_ns, first_sm[k] = e.sm;
    if (n[k] == 0 || e.t_ns > last[k]) last[k] = e.t_ns;
    ++n[k];
  }
  bool has(EventKind k) const { return n[(int)k] > 0; }
  uint64_t earliest(EventKind k) const { return first[(int)k]; }
  uint64_t latest(EventKind k) const { return last[(int)k]; }
};

// A closed interval [begin, end] of one id on one rank, and the SM that began it.
struct Span {
  uint64_t begin = 0, end = 0;
  uint8_t sm = 0;
};

// compute(tile) = [earliest kMmaStart, latest kMmaEnd].
inline bool compute_span(const IdEvents& t, Span* s) {
  if (!t.has(EventKind::kMmaStart) || !t.has(EventKind::kMmaEnd)) return false;
  *s = Span{t.earliest(EventKind::kMmaStart), t.latest(EventKind::kMmaEnd), t.first_sm[(int)EventKind::kMmaStart]};
  return true;
}

// The kind that starts a tile's communication on this rank: the partial leaving, or for an owned
// tile (nothing leaves before the sum) the partials seen, else the reduce done. kCount: none.
inline EventKind comm_start_kind(const IdEvents& t) {
  for (EventKind k : {EventKind::kPartialLeave, EventKind::kPartialsSeen, EventKind::kReduceDone})
    if (t.has(k)) return k;
  return EventKind::kCount;
}

// comm(tile) = [comm start, latest kTileLanded].
inline bool tile_comm_span(const IdEvents& t, Span* s) {
  const EventKind k = comm_start_kind(t);
  if (k == EventKind::kCount || !t.has(EventKind::kTileLanded)) return false;
  *s = Span{t.earliest(k), t.latest(EventKind::kTileLanded), t.first_sm[(int)k]};
  return true;
}

// comm(chunk) = [earliest kChunkSend, latest kChunkRecv].
inline bool chunk_comm_span(const IdEvents& c, Span* s) {
  if (!c.has(EventKind::kChunkSend) || !c.has(EventKind::kChunkRecv)) return false;
  *s = Span{c.earliest(EventKind::kChunkSend), c.latest(EventKind::kChunkRecv), c.first_sm[(int)EventKind::kChunkSend]};
  return true;
}

struct RankEvents {
  uint64_t events = 0;
  std::map<uint32_t, IdEvents> tiles, chunks;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> ctas;  // CTA id -> (#kKernelStart, #kKernelEnd)
  bool has_kernel_start = false, has_kernel_end = false;
  uint64_t kernel_start = 0;  // earliest kKernelStart
  uint64_t kernel_end = 0;    // latest kKernelEnd
};

// Group aligned events by rank (events of a rank outside [0, nranks) must have been rejected).
inline std::vector<RankEvents> group_by_rank(const std::vector<Event>& aligned, int nranks) {
  std::vector<RankEvents> out((size_t)nranks);
  for (const Event& e : aligned) {
    RankEvents& r = out[e.rank];
    ++r.events;
    const auto k = (EventKind)e.kind;
    if (is_tile_kind(k)) {
      r.tiles[e.id].add(e);
    } else if (is_chunk_kind(k)) {
      r.chunks[e.id].add(e);
    } else if (k == EventKind::kKernelStart) {
      ++r.ctas[e.id].first;
      if (!r.has_kernel_start || e.t_ns < r.kernel_start) r.kernel_start = e.t_ns;
      r.has_kernel_start = true;
    } else if (k == EventKind::kKernelEnd) {
      ++r.ctas[e.id].second;
      if (!r.has_kernel_end || e.t_ns > r.kernel_end) r.kernel_end = e.t_ns;
      r.has_kernel_end = true;
    }
  }
  return out;
}

}  // namespace tw::trace::detail
