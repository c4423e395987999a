// Trace metrics (tilewire/trace/trace.hpp) on synthetic event lists with hand-worked answers:
// full overlap, none (sequential GEMM then all-reduce), partial (2 ranks, owners), clock skew
// undone by the offsets, the clock-offset arithmetic, missing events, the JSON round trip and
// the Perfetto structure, and the PNG from scripts/plot_trace.py.
//
// Times below are written in microseconds and stored in ns (x 1000) on top of a large base, like
// %globaltimer stamps.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_util.hpp"
#include "tilewire/trace/trace.hpp"
#include "trace/json.hpp"  // src/trace: the reader the round trip uses, to inspect the Perfetto part

namespace {
using tw::trace::Event;
using tw::trace::EventKind;
using tw::trace::Metrics;
using tw::trace::Trace;
using tw_test::contains;

constexpr uint64_t kBase = 1'700'000'000'000'000'000ull;  // beyond a double's 53 bits on purpose

Event ev(double t_us, EventKind k, uint32_t id, int rank, int sm = 0) {
  Event e{};
  e.t_ns = kBase + (uint64_t)std::llround(t_us * 1000.0);
  e.id = id;
  e.rank = (uint16_t)rank;
  e.sm = (uint8_t)sm;
  e.kind = (uint8_t)k;
  return e;
}

constexpr int64_t us(double v) { return (int64_t)(v * 1000.0); }

using K = EventKind;

// One tile on one rank: [ms, me] compute, then (optionally) a partial leaving at pl and landing at tl.
void tile(std::vector<Event>& v, int rank, uint32_t id, double ms, double me, double pl, double tl, int sm = 0) {
  v.push_back(ev(ms, K::kMmaStart, id, rank, sm));
  v.push_back(ev(me, K::kMmaEnd, id, rank, sm));
  if (pl >= 0) v.push_back(ev(pl, K::kPartialLeave, id, rank, sm));
  if (tl >= 0) v.push_back(ev(tl, K::kTileLanded, id, rank, sm));
}

Trace make(int nranks, std::vector<Event> events) {
  Trace t;
  t.nranks = nranks;
  t.events = std::move(events);
  return t;
}

// ------------------------------------------------------------------------------------ full overlap
// Per rank: kernel [0, 100]; tiles t = 0..3 compute [25t, 25t + 25] (union [0, 100]);
// comm [25, 40], [50, 65], [75, 90], [90, 100] (union 15 + 15 + 25 = 55), all under compute.
Trace full_overlap() {
  std::vector<Event> v;
  for (int r = 0; r < 2; ++r) {
    v.push_back(ev(0, K::kKernelStart, 0, r, 3 + r));
    tile(v, r, 0, 0, 25, 25, 40, 3 + r);
    tile(v, r, 1, 25, 50, 50, 65, 3 + r);
    tile(v, r, 2, 50, 75, 75, 90, 3 + r);
    tile(v, r, 3, 75, 100, 90, 100, 3 + r);
    v.push_back(ev(100, K::kKernelEnd, 0, r, 3 + r));
  }
  return make(2, v);
}

TEST(TraceMetrics, FullOverlap) {
  const Metrics m = tw::trace::compute_metrics(full_overlap());
  ASSERT_EQ(m.ranks.size(), 2u);
  for (const auto& r : m.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    EXPECT_EQ(r.compute_ns, us(100));
    EXPECT_EQ(r.comm_ns, us(55));
    EXPECT_EQ(r.hidden_ns, us(55));
    EXPECT_DOUBLE_EQ(r.overlap_pct, 100.0);
    EXPECT_EQ(r.ttfb_ns, us(25));
    EXPECT_EQ(r.kernel_span_ns, us(100));
    EXPECT_DOUBLE_EQ(r.link_busy_pct, 55.0);
    EXPECT_EQ(r.exposed_comm_ns, 0);
    // latencies 15, 15, 15, 0 -> sorted 0 15 15 15: p50 = 2nd, p99 = 4th
    EXPECT_EQ(r.tile_latency.count, 4u);
    EXPECT_EQ(r.tile_latency.p50_ns, us(15));
    EXPECT_EQ(r.tile_latency.p99_ns, us(15));
    EXPECT_EQ(r.tile_latency.max_ns, us(15));
    EXPECT_EQ(r.missing.total(), 0u);
    EXPECT_EQ(r.tiles, 4u);
  }
  EXPECT_DOUBLE_EQ(m.overall.overlap_pct, 100.0);
  EXPECT_EQ(m.overall.exposed_comm_ns, 0);
  EXPECT_EQ(m.overall.tile_latency.count, 8u);
  EXPECT_EQ(m.overall.tile_latency.p50_ns, us(15));
}

// ------------------------------------------------------------------------------------ no overlap
// Sequential baseline per rank: GEMM kernel [0, 100] with tiles compute [25t, 25t + 25], then an
// all-reduce kernel [100, 200] sending chunks 0, 1 over [100, 150], [150, 200].
TEST(TraceMetrics, SequentialHasNoOverlapAndTtfbIsTheGemm) {
  std::vector<Event> v;
  for (int r = 0; r < 2; ++r) {
    v.push_back(ev(0, K::kKernelStart, 0, r));
    for (int t = 0; t < 4; ++t) tile(v, r, t, 25 * t, 25 * t + 25, -1, -1);
    v.push_back(ev(100, K::kKernelEnd, 0, r));
    v.push_back(ev(100, K::kKernelStart, 0, r, 1));
    for (int c = 0; c < 2; ++c) {
      v.push_back(ev(100 + 50 * c, K::kChunkSend, c, r, 1));
      v.push_back(ev(150 + 50 * c, K::kChunkRecv, c, r, 1));
    }
    v.push_back(ev(200, K::kKernelEnd, 0, r, 1));
  }
  const Metrics m = tw::trace::compute_metrics(make(2, v));
  for (const auto& r : m.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    EXPECT_EQ(r.compute_ns, us(100));
    EXPECT_EQ(r.comm_ns, us(100));
    EXPECT_EQ(r.hidden_ns, 0);
    EXPECT_DOUBLE_EQ(r.overlap_pct, 0.0);
    EXPECT_EQ(r.ttfb_ns, us(100)) << "first chunk_send = the end of the GEMM";
    EXPECT_EQ(r.kernel_span_ns, us(200));
    EXPECT_DOUBLE_EQ(r.link_busy_pct, 50.0);
    EXPECT_EQ(r.exposed_comm_ns, us(100));
    EXPECT_EQ(r.tile_latency.count, 0u) << "no tile lands in a chunked all-reduce";
    EXPECT_EQ(r.missing.total(), 0u) << "not a fused trace: tiles need no tile_landed";
    EXPECT_EQ(r.chunks, 2u);
  }
  EXPECT_DOUBLE_EQ(m.overall.overlap_pct, 0.0);
  EXPECT_EQ(m.overall.ttfb_ns, us(100));
  EXPECT_EQ(m.overall.exposed_comm_ns, us(100));
}

// ------------------------------------------------------------------------------------ partial
// 2 ranks, tile t owned by rank t % 2.
//   rank 0: compute t0 [0, 40], t1 [40, 80]; owns t0: partials seen 50, reduce done 60, landed 60
//           -> comm [50, 60]; t1: partial leaves 80, lands 110 -> comm [80, 110]; kernel [0, 110]
//   rank 1: compute t0 [0, 45], t1 [45, 90]; t0: leaves 45, lands 62 -> comm [45, 62]; owns t1:
//           partials seen 95, reduce done 105, landed 105 -> comm [95, 105]; kernel [0, 112]
std::vector<std::vector<Event>> partial_per_rank() {
  std::vector<std::vector<Event>> v(2);
  auto& a = v[0];
  a.push_back(ev(0, K::kKernelStart, 0, 0, 7));
  tile(a, 0, 0, 0, 40, -1, 60, 7);
  a.push_back(ev(50, K::kPartialsSeen, 0, 0, 7));
  a.push_back(ev(60, K::kReduceDone, 0, 0, 7));
  tile(a, 0, 1, 40, 80, 80, 110, 7);
  a.push_back(ev(110, K::kKernelEnd, 0, 0, 7));
  auto& b = v[1];
  b.push_back(ev(0, K::kKernelStart, 0, 1, 9));
  tile(b, 1, 0, 0, 45, 45, 62, 9);
  tile(b, 1, 1, 45, 90, -1, 105, 9);
  b.push_back(ev(95, K::kPartialsSeen, 1, 1, 9));
  b.push_back(ev(105, K::kReduceDone, 1, 1, 9));
  b.push_back(ev(112, K::kKernelEnd, 0, 1, 9));
  return v;
}

Trace partial() { return tw::trace::make_trace(partial_per_rank(), tw::trace::ClockSync{}); }

void expect_partial(const Metrics& m) {
  ASSERT_EQ(m.ranks.size(), 2u);
  const auto& a = m.ranks[0];
  EXPECT_EQ(a.compute_ns, us(80));
  EXPECT_EQ(a.comm_ns, us(40));    // [50, 60] + [80, 110]
  EXPECT_EQ(a.hidden_ns, us(10));  // [50, 60]
  EXPECT_DOUBLE_EQ(a.overlap_pct, 25.0);
  EXPECT_EQ(a.ttfb_ns, us(80));  // its first partial leaves after its own tile
  EXPECT_EQ(a.kernel_span_ns, us(110));
  EXPECT_NEAR(a.link_busy_pct, 100.0 * 40 / 110, 1e-9);
  EXPECT_EQ(a.exposed_comm_ns, us(30));      // 110 - 80
  EXPECT_EQ(a.tile_latency.p50_ns, us(20));  // t0 60 - 40, t1 110 - 80
  EXPECT_EQ(a.tile_latency.p99_ns, us(30));
  EXPECT_EQ(a.tile_latency.max_ns, us(30));
  const auto& b = m.ranks[1];
  EXPECT_EQ(b.compute_ns, us(90));
  EXPECT_EQ(b.comm_ns, us(27));    // [45, 62] + [95, 105]
  EXPECT_EQ(b.hidden_ns, us(17));  // [45, 62]
  EXPECT_NEAR(b.overlap_pct, 100.0 * 17 / 27, 1e-9);
  EXPECT_EQ(b.ttfb_ns, us(45));
  EXPECT_EQ(b.kernel_span_ns, us(112));
  EXPECT_NEAR(b.link_busy_pct, 100.0 * 27 / 112, 1e-9);
  EXPECT_EQ(b.exposed_comm_ns, us(15));      // 105 - 90
  EXPECT_EQ(b.tile_latency.p50_ns, us(15));  // t0 62 - 45 = 17, t1 105 - 90 = 15
  EXPECT_EQ(b.tile_latency.max_ns, us(17));
  const auto& o = m.overall;
  EXPECT_EQ(o.hidden_ns, us(27));
  EXPECT_EQ(o.comm_ns, us(67));
  EXPECT_NEAR(o.overlap_pct, 100.0 * 27 / 67, 1e-9);
  EXPECT_EQ(o.ttfb_ns, us(45));          // earliest start 0 -> earliest first byte (rank 1, 45)
  EXPECT_EQ(o.exposed_comm_ns, us(20));  // last landed 110 - last mma end 90
  EXPECT_EQ(o.kernel_span_ns, us(112));
  EXPECT_NEAR(o.link_busy_pct, 100.0 * 67 / 222, 1e-9);
  EXPECT_EQ(o.tile_latency.count, 4u);  // 15 17 20 30
  EXPECT_EQ(o.tile_latency.p50_ns, us(17));
  EXPECT_EQ(o.tile_latency.p99_ns, us(30));
  EXPECT_EQ(o.missing.total(), 0u);
  EXPECT_EQ(o.inverted, 0u);
}

TEST(TraceMetrics, PartialOverlapWorkedNumbers) { expect_partial(tw::trace::compute_metrics(partial())); }

// ------------------------------------------------------------------------------------ clock skew
TEST(TraceMetrics, ClockSkewIsUndoneByTheOffsets) {
  constexpr int64_t kSkew = 5'000'000;  // rank 1's clock reads 5 ms ahead of rank 0's
  auto per_rank = partial_per_rank();
  for (Event& e : per_rank[1]) e.t_ns += kSkew;
  tw::trace::ClockSync cs;
  cs.offset_ns = {0, kSkew};
  cs.residual_ns = 250;
  const Trace skewed = tw::trace::make_trace(per_rank, cs);
  const Metrics m = tw::trace::compute_metrics(skewed);
  expect_partial(m);
  Trace ref = partial();
  ref.residual_ns = 250;
  EXPECT_EQ(tw::trace::metrics_json(m), tw::trace::metrics_json(tw::trace::compute_metrics(ref)));

  // Without the offsets, the cross-rank numbers are off by the skew (per-rank ones are not).
  Trace raw = skewed;
  raw.offset_ns.clear();
  const Metrics bad = tw::trace::compute_metrics(raw);
  EXPECT_EQ(bad.ranks[1].overlap_pct, m.ranks[1].overlap_pct);
  // rank 1 then seems to start its partials at 5045 us: the first byte is rank 0's (80 us), and the
  // last landing (5105) and last mma end (5090) are both rank 1's.
  EXPECT_EQ(bad.overall.ttfb_ns, us(80));
  EXPECT_EQ(bad.overall.exposed_comm_ns, us(15));
}

// The arithmetic of measure_clock_offsets: the round with the smallest round trip wins.
TEST(TraceClockSync, OffsetFromTheTightestRound) {
  constexpr uint64_t T = 1'000'000'000ull;
  constexpr int64_t kSkew = 5'000'000;
  // table: [q][round][t0, t1, t2], then ticks
  std::vector<uint64_t> s(2 * 3 * 3 + 2, 0);
  auto put = [&](int q, int r, uint64_t t0, uint64_t t1, uint64_t t2) {
    s[(q * 3 + r) * 3 + 0] = t0;
    s[(q * 3 + r) * 3 + 1] = t1;
    s[(q * 3 + r) * 3 + 2] = t2;
  };
  put(1, 0, T + 1000, T + kSkew + 2100, T + 3000);  // rtt 2000
  put(1, 1, T + 4000, T + kSkew + 4250, T + 4400);  // rtt 400: mid 4200 -> offset skew + 50
  put(1, 2, T + 5000, T + kSkew + 5500, T + 6000);  // rtt 1000
  s[18] = 32;
  s[19] = 40;
  const auto cs = tw::trace::clock_sync_from_stamps(2, 3, s);
  ASSERT_EQ(cs.offset_ns.size(), 2u);
  EXPECT_EQ(cs.offset_ns[0], 0);
  EXPECT_EQ(cs.offset_ns[1], kSkew + 50);
  EXPECT_EQ(cs.rtt_ns[1], 400);
  EXPECT_EQ(cs.error_ns[1], 200 + 32 + 40);
  EXPECT_EQ(cs.residual_ns, 272);
  EXPECT_EQ(cs.tick_ns[1], 40);

  // A peer whose clock is behind gives a negative offset.
  put(1, 1, T + 4000, T - kSkew + 4200, T + 4400);
  EXPECT_EQ(tw::trace::clock_sync_from_stamps(2, 3, s).offset_ns[1], -kSkew);

  s[(1 * 3 + 2) * 3 + 1] = 0;  // a missing stamp is an error, not a zero offset
  auto e = tw_test::catch_tw([&] { tw::trace::clock_sync_from_stamps(2, 3, s); });
  EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "missing stamp"));
}

// ------------------------------------------------------------------------------------ missing
TEST(TraceMetrics, MissingEventsAreReported) {
  std::vector<Event> v;
  // rank 0
  v.push_back(ev(0, K::kKernelStart, 0, 0));  // no kernel_end
  v.push_back(ev(0, K::kMmaStart, 0, 0));     // t0: no mma_end, never lands
  tile(v, 0, 1, 10, 20, 20, -1);              // t1: leaves, never lands
  tile(v, 0, 2, 20, 30, -1, 50);              // t2: lands, no comm start
  tile(v, 0, 3, 30, 40, 40, 60);              // t3: complete
  v.push_back(ev(5, K::kChunkSend, 5, 0));    // chunk 5: never received
  // rank 1: t0..t2 complete, no t3; t7 has no mma_start
  v.push_back(ev(0, K::kKernelStart, 0, 1));
  tile(v, 1, 0, 0, 10, 10, 20);
  tile(v, 1, 1, 10, 20, 20, 30);
  tile(v, 1, 2, 20, 30, 30, 40);
  v.push_back(ev(50, K::kMmaEnd, 7, 1));
  v.push_back(ev(50, K::kPartialLeave, 7, 1));
  v.push_back(ev(70, K::kTileLanded, 7, 1));
  v.push_back(ev(100, K::kKernelEnd, 0, 1));

  const Metrics m = tw::trace::compute_metrics(make(2, v));
  const auto& a = m.ranks[0].missing;
  EXPECT_EQ(a.mma_end, 1u);
  EXPECT_EQ(a.tile_landed, 2u);
  EXPECT_EQ(a.comm_start, 1u);
  EXPECT_EQ(a.chunk_recv, 1u);
  EXPECT_EQ(a.kernel_end, 1u);
  EXPECT_EQ(a.absent_tiles, 1u) << "tile 7 is on rank 1 only";
  EXPECT_EQ(a.total(), 7u);
  const auto& b = m.ranks[1].missing;
  EXPECT_EQ(b.mma_start, 1u);
  EXPECT_EQ(b.absent_tiles, 1u) << "tile 3 is on rank 0 only";
  EXPECT_EQ(b.total(), 2u);
  EXPECT_EQ(m.overall.missing.total(), 9u);
  EXPECT_EQ(m.ranks[0].kernel_span_ns, -1) << "no kernel_end: span unknown, not 0";
  EXPECT_TRUE(std::isnan(m.ranks[0].link_busy_pct));
  // What is there still counts: rank 0's t3 latency 60 - 40, t2 50 - 30.
  EXPECT_EQ(m.ranks[0].tile_latency.count, 2u);
  EXPECT_EQ(m.ranks[0].ttfb_ns, us(5)) << "the chunk_send is a first byte too";

  const std::string text = tw::trace::format_metrics(m);
  EXPECT_TRUE(contains(text, "missing events: 9"));
  EXPECT_TRUE(contains(text, "rank 0: 1 mma_end"));
  EXPECT_TRUE(contains(text, "2 tile_landed"));
  EXPECT_TRUE(contains(text, "rank 1: 1 mma_start"));
  const std::string js = tw::trace::metrics_json(m);
  EXPECT_TRUE(contains(js, "\"kernel_span_ns\":null"));
  EXPECT_TRUE(contains(js, "\"total\":9"));
}

TEST(TraceMetrics, InvertedIntervalsAreCountedAndLeftOut) {
  std::vector<Event> v;
  v.push_back(ev(0, K::kKernelStart, 0, 0));
  tile(v, 0, 0, 50, 10, 60, 70);  // mma_end before mma_start
  v.push_back(ev(100, K::kKernelEnd, 0, 0));
  const Metrics m = tw::trace::compute_metrics(make(1, v));
  EXPECT_EQ(m.ranks[0].inverted, 1u);
  EXPECT_EQ(m.ranks[0].compute_ns, 0);
  EXPECT_EQ(m.ranks[0].comm_ns, us(10));
}

TEST(TraceMetrics, EmptyAndBadTraces) {
  const Metrics m = tw::trace::compute_metrics(make(1, {}));
  EXPECT_EQ(m.ranks[0].ttfb_ns, -1);
  EXPECT_TRUE(std::isnan(m.ranks[0].overlap_pct));
  EXPECT_EQ(m.overall.missing.total(), 0u);
  EXPECT_TRUE(contains(tw::trace::format_metrics(m), "missing events: none"));
  auto e = tw_test::catch_tw([] { tw::trace::compute_metrics(make(1, {ev(0, K::kMmaStart, 0, 3)})); });
  EXPECT_TRUE(contains(e.what(), "rank 3"));
  Event bad = ev(0, K::kMmaStart, 0, 0);
  bad.kind = 42;
  e = tw_test::catch_tw([&] { tw::trace::compute_metrics(make(1, {bad})); });
  EXPECT_TRUE(contains(e.what(), "unknown kind 42"));
}

// ------------------------------------------------------------------------------------ JSON
Trace skewed_partial() {
  auto per_rank = partial_per_rank();
  for (Event& e : per_rank[1]) e.t_ns += 5'000'000;
  tw::trace::ClockSync cs;
  cs.offset_ns = {0, 5'000'000};
  cs.residual_ns = 264;
  return tw::trace::make_trace(per_rank, cs, {3, 0});
}

TEST(TraceJson, RoundTripsEventsAndOffsets) {
  const Trace t = skewed_partial();
  ASSERT_EQ(t.dropped, 3u);
  const std::string text = tw::trace::to_perfetto_json(t);
  const Trace back = tw::trace::from_json(text);
  EXPECT_EQ(back.nranks, t.nranks);
  EXPECT_EQ(back.offset_ns, t.offset_ns);
  EXPECT_EQ(back.residual_ns, t.residual_ns);
  EXPECT_EQ(back.dropped, t.dropped);
  ASSERT_EQ(back.events.size(), t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    const Event &a = t.events[i], &b = back.events[i];
    EXPECT_EQ(std::tie(a.t_ns, a.id, a.rank, a.sm, a.kind), std::tie(b.t_ns, b.id, b.rank, b.sm, b.kind)) << i;
  }
  EXPECT_EQ(tw::trace::metrics_json(tw::trace::compute_metrics(back)),
            tw::trace::metrics_json(tw::trace::compute_metrics(t)));

  // and through a file
  char dir[] = "/tmp/tw_trace_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/t.json";
  tw::trace::save_trace_file(path, t);
  EXPECT_EQ(tw::trace::load_trace_file(path).events.size(), t.events.size());
  std::remove(path.c_str());
  rmdir(dir);
}

TEST(TraceJson, PerfettoTracksAndTimes) {
  const std::string text = tw::trace::to_perfetto_json(skewed_partial());
  const auto root = tw::trace::json::parse(text);
  const auto* evs = root.find("traceEvents");
  ASSERT_TRUE(evs && evs->type == tw::trace::json::Value::Type::kArray);
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::map<int64_t, std::string> process_names;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> slices;
  double min_ts = 1e300;
  int instants = 0;
  for (const auto& e : evs->a) {
    const std::string ph = e.find("ph")->s;
    const int64_t pid = tw::trace::json::as_int64(*e.find("pid"), "pid");
    if (ph == "M") {
      const std::string name = e.find("name")->s,
                        arg = e.find("args")->find("name") ? e.find("args")->find("name")->s : "";
      if (name == "process_name") process_names[pid] = arg;
      if (name == "thread_name") thread_names[{pid, tw::trace::json::as_int64(*e.find("tid"), "tid")}] = arg;
      continue;
    }
    const double ts = e.find("ts")->d;
    min_ts = std::min(min_ts, ts);
    if (ph == "X") slices[{pid, tw::trace::json::as_int64(*e.find("tid"), "tid")}].push_back({ts, e.find("dur")->d});
    if (ph == "i") ++instants;
  }
  EXPECT_EQ(process_names[1], "rank 0");
  EXPECT_EQ(process_names[2], "rank 1");
  bool c7 = false, m7 = false, c9 = false, m9 = false;
  for (const auto& [k, n] : thread_names) {
    c7 |= n == "SM 7 compute";
    m7 |= n == "SM 7 comm";
    c9 |= n == "SM 9 compute";
    m9 |= n == "SM 9 comm";
  }
  EXPECT_TRUE(c7 && m7 && c9 && m9) << text.substr(0, 2000);
  EXPECT_EQ(min_ts, 0.0) << "timestamps start at the earliest aligned event";
  size_t n_slices = 0;
  for (auto& [k, v] : slices) {  // slices of one track never overlap (viewers need nesting)
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i) EXPECT_LE(v[i - 1].first + v[i - 1].second, v[i].first + 1e-9);
    n_slices += v.size();
  }
  EXPECT_EQ(n_slices, 8u) << "2 ranks x 2 tiles x (compute, comm)";
  // kernel start/end (4) and the owners' reduce_done (2); partials_seen begins the owners' comm slices
  EXPECT_EQ(instants, 6);
  // Rank 1's tile 0 comm starts at 45 us on rank 0's clock, although rank 1 stamped 5045 us.
  EXPECT_TRUE(contains(text, "\"name\":\"tile 0 comm\",\"cat\":\"comm\",\"ph\":\"X\",\"ts\":45.000,\"dur\":17.000"));
  // The raw part keeps the full 64-bit stamps.
  EXPECT_TRUE(contains(text, "[" + std::to_string(kBase + 5'000'000 + 45'000) + ",0,1,9,3]"));
}

TEST(TraceJson, RejectsOtherFiles) {
  auto e = tw_test::catch_tw([] { tw::trace::from_json("{\"traceEvents\":[]}"); });
  EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "tilewire"));
  e = tw_test::catch_tw([] { tw::trace::from_json("{\"tilewire\": [1, 2"); });
  EXPECT_TRUE(contains(e.what(), "offset"));
  std::string t = tw::trace::to_perfetto_json(partial());
  const size_t at = t.find(",0,0,7,0]");  // rank 0's kernel_start -> kind 42
  ASSERT_NE(at, std::string::npos);
  t.replace(at, 9, ",0,0,7,42]");
  e = tw_test::catch_tw([&] { tw::trace::from_json(t); });
  EXPECT_TRUE(contains(e.what(), "out of range"));
}

// ------------------------------------------------------------------------------------ PNG
TEST(TracePlot, WritesAPng) {
  const std::string script = std::string(TILEWIRE_SOURCE_DIR) + "/scripts/plot_trace.py";
  ASSERT_EQ(access(script.c_str(), R_OK), 0) << script;
  if (std::system("python3 -c '' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed: no trace plot";
  char dir[] = "/tmp/tw_plot_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string json = std::string(dir) + "/t.json", png = std::string(dir) + "/t.png";
  tw::trace::save_trace_file(json, skewed_partial());
  const int st = std::system(("python3 '" + script + "' '" + json + "' -o '" + png + "' >/dev/null").c_str());
  const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::string bytes;
  if (rc == 0) {
    std::ifstream f(png, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::remove(json.c_str());
  std::remove(png.c_str());
  rmdir(dir);
  if (rc == 3) GTEST_SKIP() << "matplotlib is not installed for python3 (scripts/setup.sh installs it): no trace plot";
  ASSERT_EQ(rc, 0) << "plot_trace.py failed";
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace
