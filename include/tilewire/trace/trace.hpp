// tilewire/trace/trace.hpp — the host side of tracing: collect the device rings, align the GPUs'
// clocks, compute the overlap metrics, write/read the trace file (Chrome trace-event JSON that
// ui.perfetto.dev and chrome://tracing load, with the raw events embedded for tools).
//
//   per rank:  TraceBuffer buf(capacity);  buf.reset(s);  op(..., buf.ring(rank));  ev = buf.download(&dropped, s)
//   once:      ClockSync cs = measure_clock_offsets(comm);        (collective, every rank)
//   anywhere:  Trace t = make_trace({ev_0, ev_1, ...}, cs, {dropped_0, ...});
//              Metrics m = compute_metrics(t);  save_trace_file("trace.json", t, &m);
//
// The event record and the device ring: tilewire/trace/event.hpp. Definitions of every metric
// (and the same in prose, with the clock-alignment error): docs/tracing.md.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tilewire/trace/event.hpp"

namespace tw {
class Comm;
}

namespace tw::trace {

// ------------------------------------------------------------------------------ device buffer
// `capacity` events + the claim counter in device memory of the device current at construction.
// RAII, move-only. Not thread-safe; one per rank.
class TraceBuffer {
 public:
  explicit TraceBuffer(uint32_t capacity);
  TraceBuffer(TraceBuffer&&) noexcept;
  TraceBuffer& operator=(TraceBuffer&&) noexcept;
  TraceBuffer(const TraceBuffer&) = delete;
  TraceBuffer& operator=(const TraceBuffer&) = delete;
  ~TraceBuffer();

  // The device view a kernel takes (events, counter, capacity, the rank it stamps).
  Ring ring(int rank) const;
  // Zero the counter and the events, asynchronously on `stream` (emit_at layouts find unwritten
  // slots by t_ns == 0; download() drops them).
  void reset(cudaStream_t stream);
  // The events recorded since the last reset, in claim order, after `stream` (the stream the
  // traced kernels ran on) has drained. `dropped` (optional) receives how many emits found the
  // ring full.
  std::vector<Event> download(uint64_t* dropped, cudaStream_t stream);

  uint32_t capacity() const { return capacity_; }
  int device() const { return device_; }
  const Event* device_events() const { return events_; }
  const unsigned long long* device_count() const { return count_; }

 private:
  void release() noexcept;
  int device_ = -1;
  Event* events_ = nullptr;
  unsigned long long* count_ = nullptr;
  uint32_t capacity_ = 0;
};

// ------------------------------------------------------------------------------ clock alignment
// %globaltimer is per GPU. measure_clock_offsets() ping-pongs a signal between rank 0 and each
// peer q, `rounds` times: rank 0 stamps t0 and signals q; q stamps t1 when it sees it and signals
// back; rank 0 stamps t2 when it sees the reply. Of the rounds, the one with the smallest round
// trip t2 - t0 gives
//     offset_ns[q] = t1 - (t0 + t2) / 2           (q's clock minus rank 0's clock)
//     error_ns[q]  = ceil((t2 - t0) / 2) + tick_ns[0] + tick_ns[q]
// Causality puts the true instant of t1 inside [t0, t2] on rank 0's clock, so the midpoint is
// off by at most half the round trip, plus one timer tick on each side for quantization.
// Not covered: clock drift between the measurement and the traced kernel (globaltimer rates
// differ by parts per million: ~1 us per second elapsed); measure right before or after tracing.
struct ClockSync {
  int rounds = 0;
  std::vector<int64_t> offset_ns;  // per rank: t on rank 0's clock = t_rank - offset_ns[rank]; [0] = 0
  std::vector<int64_t> error_ns;   // per rank: bound on |error| of offset_ns (0 for rank 0)
  std::vector<int64_t> rtt_ns;     // per rank: round trip of the round used (0 for rank 0)
  std::vector<int64_t> tick_ns;    // per rank: smallest %globaltimer step observed on that GPU
  int64_t residual_ns = 0;         // max error_ns: the bound on any cross-rank time difference
};

// Collective: every rank of `comm` calls it (works under Comm::run_local, one thread per GPU).
// Launches two 1-thread kernels and two NCCL collectives; synchronizes. Uses signal
// clock_sync_signal(comm) (see below): no other kernel may wait on that index meanwhile.
// Throws tw::Error (kTimeout when a peer never answered within TILEWIRE_TIMEOUT_MS).
ClockSync measure_clock_offsets(Comm& comm, int rounds = 32);

// The signal index measure_clock_offsets uses: the communicator's last one (signal_count - 1).
// tilewire's own ops use no signals; user kernels sharing a communicator should leave it alone.
// The counter only ever grows (adds), so a user waiting with rolling compares on it elsewhere
// is not confused once the call has returned.
int clock_sync_signal(const Comm& comm);

// The arithmetic of measure_clock_offsets, separated for testing. `stamps` holds, for each rank
// q in [0, nranks) and round r, three values at ((q * rounds) + r) * 3: t0 and t2 (written by
// rank 0 for q >= 1), t1 (written by q); then nranks timer ticks. Throws kInvalidArgument on a
// table with missing or impossible stamps (t2 < t0).
ClockSync clock_sync_from_stamps(int nranks, int rounds, const std::vector<uint64_t>& stamps);

// ------------------------------------------------------------------------------ the trace
struct Trace {
  int nranks = 0;
  std::vector<Event> events;       // as recorded: each on its own GPU's clock
  std::vector<int64_t> offset_ns;  // per rank (ClockSync::offset_ns); empty: all clocks taken as equal
  int64_t residual_ns = 0;         // ClockSync::residual_ns
  uint64_t dropped = 0;            // emits that found a ring full, summed over ranks

  // The events on rank 0's clock (t_ns - offset_ns[rank]), sorted by time (ties: rank, sm, kind,
  // id). Throws kInvalidArgument when an event's rank is outside [0, nranks) or its kind unknown.
  std::vector<Event> align() const;
};

// One trace from every rank's download (per_rank[r] = rank r's events) and the clock offsets.
// `dropped[r]` as download() reported (may be empty).
Trace make_trace(const std::vector<std::vector<Event>>& per_rank, const ClockSync& sync,
                 const std::vector<uint64_t>& dropped = {});

// Collective (every rank of `comm`, same order as its other collectives): waits for `stream`,
// gathers every rank's events of `buf` with two ncclAllGather calls (counts, then the events) and
// returns on every rank the merged Trace aligned with `sync` (make_trace). Works with one
// process per GPU as with Comm::run_local. Every rank's buffer must have the same capacity.
Trace gather_trace(Comm& comm, const TraceBuffer& buf, const ClockSync& sync, cudaStream_t stream);

// ------------------------------------------------------------------------------ metrics
// All times in ns, on rank 0's clock (after align()). -1 (and NaN for percentages) means
// "not defined for this trace" (e.g. no kKernelStart): never a silent 0.
//
// Intervals, per rank, per id (several events of one kind and id: earliest start, latest end):
//   compute(tile)  [kMmaStart, kMmaEnd]
//   comm(tile)     [start, kTileLanded], start = kPartialLeave (this rank's partial left),
//                  or for a tile this rank owns (no partial leaves) kPartialsSeen, else kReduceDone
//   comm(chunk)    [kChunkSend, kChunkRecv]             (generic communication ops, baselines)
//   kernel span    earliest kKernelStart -> latest kKernelEnd of the rank (all kernels traced)
// |U| below is the measure (total length) of a union of intervals, so concurrent tiles count once.
//
//   ttfb_ns          time to first byte on the wire: earliest kKernelStart of the rank -> its first
//                    kPartialLeave or kChunkSend (a sequential GEMM-then-all-reduce baseline emits
//                    kKernelStart in the GEMM and kChunkSend in the all-reduce, so its TTFB is the
//                    GEMM time). Overall: earliest kKernelStart of any rank -> earliest first byte
//                    of any rank.
//   compute_ns       |U compute intervals|          comm_ns  |U comm intervals (tiles and chunks)|
//   hidden_ns        |U compute  ∩  U comm|: communication time under compute
//   overlap_pct      100 * hidden_ns / comm_ns. Overall: 100 * sum(hidden) / sum(comm).
//   link_busy_pct    100 * comm_ns / kernel span. Overall: 100 * sum(comm) / sum(spans).
//   exposed_comm_ns  max(0, last comm end (kTileLanded / kChunkRecv) - last kMmaEnd): the
//                    communication left after the last compute. Overall: over all ranks' events
//                    (the op ends when the last tile landed everywhere); per rank: its own.
//   tile_latency     kTileLanded - kMmaEnd per tile (per rank; overall pools all ranks' tiles):
//                    count, p50, p99, max; percentile p = the nearest-rank value, sorted[ceil(p/100 n) - 1].
//   missing          events the pairing rules expected and did not find (see Missing), counted,
//                    never dropped silently; intervals with end < start are counted in `inverted`
//                    and left out of every sum.
// Cross-rank quantities (overall ttfb_ns, overall exposed_comm_ns) carry the clock alignment
// error, Metrics::residual_ns; per-rank quantities use one clock and do not.
struct Missing {
  uint64_t mma_start = 0;     // tile with kMmaEnd but no kMmaStart
  uint64_t mma_end = 0;       // tile with kMmaStart but no kMmaEnd
  uint64_t comm_start = 0;    // tile with kTileLanded but none of kPartialLeave/kPartialsSeen/kReduceDone
  uint64_t tile_landed = 0;   // in a fused trace (some kTileLanded..kPartialLeave anywhere): a tile of
                              // this rank with compute or a comm start but no kTileLanded
  uint64_t absent_tiles = 0;  // in a fused trace: tile ids some other rank has and this rank has no
                              // event for (an all-reduce puts every tile on every rank)
  uint64_t chunk_send = 0;    // chunk with kChunkRecv but no kChunkSend
  uint64_t chunk_recv = 0;    // chunk with kChunkSend but no kChunkRecv
  uint64_t kernel_start = 0;  // per CTA id: kKernelEnd events beyond its kKernelStart events; +1 for a
                              // rank with events but no kernel event at all
  uint64_t kernel_end = 0;    // per CTA id: kKernelStart events beyond its kKernelEnd events; +1 likewise
  uint64_t total() const {
    return mma_start + mma_end + comm_start + tile_landed + absent_tiles + chunk_send + chunk_recv + kernel_start +
           kernel_end;
  }
};

struct Percentiles {
  uint64_t count = 0;
  int64_t p50_ns = -1, p99_ns = -1, max_ns = -1;
};

struct RankMetrics {
  int rank = -1;  // -1: the overall line
  uint64_t events = 0;
  uint64_t tiles = 0, chunks = 0;  // distinct ids with any tile / chunk event
  int64_t kernel_span_ns = -1;
  int64_t ttfb_ns = -1;
  int64_t compute_ns = 0, comm_ns = 0, hidden_ns = 0;
  double overlap_pct = 0;    // NaN when comm_ns == 0
  double link_busy_pct = 0;  // NaN when the span is unknown
  int64_t exposed_comm_ns = -1;
  Percentiles tile_latency;
  Missing missing;
  uint64_t inverted = 0;
};

struct Metrics {
  int nranks = 0;
  uint64_t events = 0;
  uint64_t dropped = 0;     // from the trace: > 0 means the metrics describe a partial trace
  int64_t residual_ns = 0;  // clock alignment bound on the cross-rank quantities
  RankMetrics overall;
  std::vector<RankMetrics> ranks;
};

Metrics compute_metrics(const Trace& trace);

// {"nranks":..,"events":..,"dropped":..,"residual_ns":..,"overall":{...},"ranks":[{...},...]};
// undefined values are null.
std::string metrics_json(const Metrics& m);
// A table for people: one line per rank and the overall line, then missing events, if any.
std::string format_metrics(const Metrics& m);

// ------------------------------------------------------------------------------ files
// Chrome trace-event JSON: "traceEvents" holds, per rank (process "rank N"), complete events for
// compute per tile on track "SM k compute" and communication per tile/chunk on "SM k comm" (a
// second lane "SM k comm +1" ... where intervals of one SM overlap: JSON viewers need nesting),
// and instant events for the rest (kernel start/end, partials seen, reduce done, unpaired events);
// ts/dur in microseconds from the earliest aligned event. Top-level key "tilewire" holds the raw
// events ([t_ns, id, rank, sm, kind] arrays), offset_ns, residual_ns, dropped and the metrics
// (`metrics`, or computed here when null), for from_json and scripts/plot_trace.py.
std::string to_perfetto_json(const Trace& trace, const Metrics* metrics = nullptr);
// Reads the "tilewire" key back (exactly: same events, offsets, residual, dropped). Throws
// kInvalidArgument saying where the text is not such a file.
Trace from_json(const std::string& text);

void save_trace_file(const std::string& path, const Trace& trace, const Metrics* metrics = nullptr);
Trace load_trace_file(const std::string& path);

}  // namespace tw::trace
