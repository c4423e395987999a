// compute_metrics and its two printers. Definitions: tilewire/trace/trace.hpp (and docs/tracing.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "json.hpp"
#include "spans.hpp"
#include "tilewire/trace/trace.hpp"

namespace tw::trace {
namespace {

using detail::IdEvents;
using detail::Span;
using Iv = std::pair<int64_t, int64_t>;  // [begin, end], ns from the trace's first event

// Sorted, disjoint union of closed intervals (touching ones merge).
std::vector<Iv> merge(std::vector<Iv> v) {
  std::sort(v.begin(), v.end());
  std::vector<Iv> out;
  for (const Iv& x : v) {
    if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

int64_t measure(const std::vector<Iv>& u) {
  int64_t s = 0;
  for (const Iv& x : u) s += x.second - x.first;
  return s;
}

// |A ∩ B| for two merged unions.
int64_t intersection(const std::vector<Iv>& a, const std::vector<Iv>& b) {
  int64_t s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return s;
}

// Nearest rank: sorted[ceil(p/100 * n) - 1].
Percentiles percentiles(std::vector<int64_t> v) {
  Percentiles p;
  p.count = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    size_t k = (size_t)std::ceil(q / 100.0 * (double)v.size());
    return v[std::clamp<size_t>(k, 1, v.size()) - 1];
  };
  p.p50_ns = at(50);
  p.p99_ns = at(99);
  p.max_ns = v.back();
  return p;
}

double pct(int64_t num, int64_t den) { return den > 0 ? 100.0 * (double)num / (double)den : std::nan(""); }

void add(Missing& a, const Missing& b) {
  a.mma_start += b.mma_start;
  a.mma_end += b.mma_end;
  a.comm_start += b.comm_start;
  a.tile_landed += b.tile_landed;
  a.absent_tiles += b.absent_tiles;
  a.chunk_send += b.chunk_send;
  a.chunk_recv += b.chunk_recv;
  a.kernel_start += b.kernel_start;
  a.kernel_end += b.kernel_end;
}

// Optional minimum / maximum.
struct Min {
  bool set = false;
  int64_t v = 0;
  void take(int64_t x) { v = set ? std::min(v, x) : x, set = true; }
};
struct Max {
  bool set = false;
  int64_t v = 0;
  void take(int64_t x) { v = set ? std::max(v, x) : x, set = true; }
};

}  // namespace

Metrics compute_metrics(const Trace& trace) {
  const std::vector<Event> ev = trace.align();
  const std::vector<detail::RankEvents> ranks = detail::group_by_rank(ev, trace.nranks);
  const uint64_t t0 = ev.empty() ? 0 : ev.front().t_ns;
  auto rel = [&](uint64_t t) { return (int64_t)(t - t0); };

  bool fused = false;  // a fused GEMM + communication trace: every tile is expected to land
  std::set<uint32_t> all_tiles, all_chunks;
  for (const Event& e : ev) {
    const auto k = (EventKind)e.kind;
    if (k >= EventKind::kPartialLeave && k <= EventKind::kTileLanded) fused = true;
    if (detail::is_tile_kind(k)) all_tiles.insert(e.id);
    if (detail::is_chunk_kind(k)) all_chunks.insert(e.id);
  }

  Metrics m;
  m.nranks = trace.nranks;
  m.events = ev.size();
  m.dropped = trace.dropped;
  m.residual_ns = trace.residual_ns;
  RankMetrics& all = m.overall;
  all.rank = -1;
  all.events = ev.size();
  all.tiles = all_tiles.size();
  all.chunks = all_chunks.size();
  std::vector<int64_t> pooled;
  Min g_start, g_first_byte;
  Max g_end, g_last_mma, g_last_comm;
  int64_t span_sum = 0, comm_on_spans = 0;
  bool any_span = false;

  for (int r = 0; r < trace.nranks; ++r) {
    const detail::RankEvents& R = ranks[r];
    RankMetrics rm;
    rm.rank = r;
    rm.events = R.events;
    rm.tiles = R.tiles.size();
    rm.chunks = R.chunks.size();
    Missing& miss = rm.missing;
    std::vector<Iv> comp, comm;
    std::vector<int64_t> lat;
    Min first_byte;
    Max last_mma, last_comm;
    auto keep = [&](const Span& s, std::vector<Iv>& into) {
      if (s.end < s.begin)
        ++rm.inverted;
      else
        into.emplace_back(rel(s.begin), rel(s.end));
    };

    for (const auto& [id, t] : R.tiles) {
      const bool hs = t.has(EventKind::kMmaStart), he = t.has(EventKind::kMmaEnd);
      const bool landed = t.has(EventKind::kTileLanded);
      const bool comm_start = detail::comm_start_kind(t) != EventKind::kCount;
      if (hs && !he) ++miss.mma_end;
      if (he && !hs) ++miss.mma_start;
      if (landed && !comm_start) ++miss.comm_start;
      if (fused && !landed && (hs || he || comm_start)) ++miss.tile_landed;
      Span s;
      if (detail::compute_span(t, &s)) keep(s, comp);
      if (detail::tile_comm_span(t, &s)) keep(s, comm);
      if (he) last_mma.take(rel(t.latest(EventKind::kMmaEnd)));
      if (landed) last_comm.take(rel(t.latest(EventKind::kTileLanded)));
      if (t.has(EventKind::kPartialLeave)) first_byte.take(rel(t.earliest(EventKind::kPartialLeave)));
      if (he && landed) {
        const int64_t d = rel(t.latest(EventKind::kTileLanded)) - rel(t.latest(EventKind::kMmaEnd));
        if (d < 0)
          ++rm.inverted;
        else
          lat.push_back(d);
      }
    }
    for (const auto& [id, c] : R.chunks) {
      const bool hs = c.has(EventKind::kChunkSend), hr = c.has(EventKind::kChunkRecv);
      if (hs && !hr) ++miss.chunk_recv;
      if (hr && !hs) ++miss.chunk_send;
      Span s;
      if (detail::chunk_comm_span(c, &s)) keep(s, comm);
      if (hs) first_byte.take(rel(c.earliest(EventKind::kChunkSend)));
      if (hr) last_comm.take(rel(c.latest(EventKind::kChunkRecv)));
    }
    for (const auto& [id, se] : R.ctas) {
      if (se.first > se.second) miss.kernel_end += se.first - se.second;
      if (se.second > se.first) miss.kernel_start += se.second - se.first;
    }
    if (R.events > 0 && R.ctas.empty()) ++miss.kernel_start, ++miss.kernel_end;  // no kernel events at all
    if (fused)
      for (uint32_t id : all_tiles)
        if (!R.tiles.count(id)) ++miss.absent_tiles;

    const std::vector<Iv> uc = merge(std::move(comp)), um = merge(std::move(comm));
    rm.compute_ns = measure(uc);
    rm.comm_ns = measure(um);
    rm.hidden_ns = intersection(uc, um);
    rm.overlap_pct = pct(rm.hidden_ns, rm.comm_ns);
    if (R.has_kernel_start && R.has_kernel_end) {
      const int64_t a = rel(R.kernel_start), b = rel(R.kernel_end);
      if (b < a)
        ++rm.inverted;
      else
        rm.kernel_span_ns = b - a;
    }
    rm.link_busy_pct = rm.kernel_span_ns >= 0 ? pct(rm.comm_ns, rm.kernel_span_ns) : std::nan("");
    if (R.has_kernel_start && first_byte.set) {
      const int64_t d = first_byte.v - rel(R.kernel_start);
      if (d < 0)
        ++rm.inverted;
      else
        rm.ttfb_ns = d;
    }
    if (last_mma.set && last_comm.set) rm.exposed_comm_ns = std::max<int64_t>(0, last_comm.v - last_mma.v);
    rm.tile_latency = percentiles(lat);

    // overall accumulators
    if (R.has_kernel_start) g_start.take(rel(R.kernel_start));
    if (R.has_kernel_end) g_end.take(rel(R.kernel_end));
    if (first_byte.set) g_first_byte.take(first_byte.v);
    if (last_mma.set) g_last_mma.take(last_mma.v);
    if (last_comm.set) g_last_comm.take(last_comm.v);
    if (rm.kernel_span_ns >= 0) {
      any_span = true;
      span_sum += rm.kernel_span_ns;
      comm_on_spans += rm.comm_ns;
    }
    all.compute_ns += rm.compute_ns;
    all.comm_ns += rm.comm_ns;
    all.hidden_ns += rm.hidden_ns;
    all.inverted += rm.inverted;
    add(all.missing, rm.missing);
    pooled.insert(pooled.end(), lat.begin(), lat.end());
    m.ranks.push_back(rm);
  }

  all.overlap_pct = pct(all.hidden_ns, all.comm_ns);
  all.link_busy_pct = any_span ? pct(comm_on_spans, span_sum) : std::nan("");
  if (g_start.set && g_end.set && g_end.v >= g_start.v) all.kernel_span_ns = g_end.v - g_start.v;
  if (g_start.set && g_first_byte.set && g_first_byte.v >= g_start.v) all.ttfb_ns = g_first_byte.v - g_start.v;
  if (g_last_mma.set && g_last_comm.set) all.exposed_comm_ns = std::max<int64_t>(0, g_last_comm.v - g_last_mma.v);
  all.tile_latency = percentiles(std::move(pooled));
  return m;
}

// ------------------------------------------------------------------------------ printers
namespace {

std::string ns_or_null(int64_t v) { return v < 0 ? "null" : std::to_string(v); }

std::string missing_json(const Missing& x) {
  std::ostringstream o;
  o << "{\"mma_start\":" << x.mma_start << ",\"mma_end\":" << x.mma_end << ",\"comm_start\":" << x.comm_start
    << ",\"tile_landed\":" << x.tile_landed << ",\"absent_tiles\":" << x.absent_tiles
    << ",\"chunk_send\":" << x.chunk_send << ",\"chunk_recv\":" << x.chunk_recv
    << ",\"kernel_start\":" << x.kernel_start << ",\"kernel_end\":" << x.kernel_end << ",\"total\":" << x.total()
    << "}";
  return o.str();
}

std::string rank_json(const RankMetrics& r) {
  std::ostringstream o;
  o << "{";
  if (r.rank >= 0) o << "\"rank\":" << r.rank << ",";
  o << "\"events\":" << r.events << ",\"tiles\":" << r.tiles << ",\"chunks\":" << r.chunks
    << ",\"kernel_span_ns\":" << ns_or_null(r.kernel_span_ns) << ",\"ttfb_ns\":" << ns_or_null(r.ttfb_ns)
    << ",\"compute_ns\":" << r.compute_ns << ",\"comm_ns\":" << r.comm_ns << ",\"hidden_ns\":" << r.hidden_ns
    << ",\"overlap_pct\":" << json::num(r.overlap_pct, 2) << ",\"link_busy_pct\":" << json::num(r.link_busy_pct, 2)
    << ",\"exposed_comm_ns\":" << ns_or_null(r.exposed_comm_ns)
    << ",\"tile_latency_ns\":{\"count\":" << r.tile_latency.count << ",\"p50\":" << ns_or_null(r.tile_latency.p50_ns)
    << ",\"p99\":" << ns_or_null(r.tile_latency.p99_ns) << ",\"max\":" << ns_or_null(r.tile_latency.max_ns)
    << "},\"missing\":" << missing_json(r.missing) << ",\"inverted\":" << r.inverted << "}";
  return o.str();
}

std::string us(int64_t ns) {
  if (ns < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", (double)ns / 1000.0);
  return b;
}
std::string pc(double v) {
  if (!std::isfinite(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f", v);
  return b;
}

std::string missing_text(const Missing& x) {
  std::string s;
  auto item = [&](uint64_t n, const char* what) {
    if (n) s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  item(x.mma_start, "mma_start");
  item(x.mma_end, "mma_end");
  item(x.comm_start, "comm start (partial_leave/partials_seen/reduce_done)");
  item(x.tile_landed, "tile_landed");
  item(x.absent_tiles, "absent tiles");
  item(x.chunk_send, "chunk_send");
  item(x.chunk_recv, "chunk_recv");
  item(x.kernel_start, "kernel_start");
  item(x.kernel_end, "kernel_end");
  return s;
}

}  // namespace

std::string metrics_json(const Metrics& m) {
  std::ostringstream o;
  o << "{\"nranks\":" << m.nranks << ",\"events\":" << m.events << ",\"dropped\":" << m.dropped
    << ",\"residual_ns\":" << m.residual_ns << ",\"overall\":" << rank_json(m.overall) << ",\"ranks\":[";
  for (size_t i = 0; i < m.ranks.size(); ++i) o << (i ? "," : "") << rank_json(m.ranks[i]);
  o << "]}";
  return o.str();
}

std::string format_metrics(const Metrics& m) {
  std::ostringstream o;
  o << "tilewire trace: " << m.nranks << " rank" << (m.nranks == 1 ? "" : "s") << ", " << m.events << " events, "
    << m.dropped << " dropped, clocks aligned to +-" << us(m.residual_ns) << " us\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%5s %10s %10s %10s %10s %10s %8s %8s %10s %6s %10s %10s %10s\n", "rank", "span_us",
                "ttfb_us", "compute_us", "comm_us", "hidden_us", "overlap%", "busy%", "exposed_us", "ids", "lat_p50_us",
                "lat_p99_us", "lat_max_us");
  o << line;
  auto row = [&](const RankMetrics& r) {
    const std::string name = r.rank < 0 ? "all" : std::to_string(r.rank);
    std::snprintf(line, sizeof(line), "%5s %10s %10s %10s %10s %10s %8s %8s %10s %6llu %10s %10s %10s\n", name.c_str(),
                  us(r.kernel_span_ns).c_str(), us(r.ttfb_ns).c_str(), us(r.compute_ns).c_str(), us(r.comm_ns).c_str(),
                  us(r.hidden_ns).c_str(), pc(r.overlap_pct).c_str(), pc(r.link_busy_pct).c_str(),
                  us(r.exposed_comm_ns).c_str(), (unsigned long long)(r.tiles + r.chunks),
                  us(r.tile_latency.p50_ns).c_str(), us(r.tile_latency.p99_ns).c_str(),
                  us(r.tile_latency.max_ns).c_str());
    o << line;
  };
  for (const RankMetrics& r : m.ranks) row(r);
  if (m.nranks > 1) row(m.overall);
  if (m.overall.missing.total() == 0) {
    o << "missing events: none\n";
  } else {
    o << "missing events: " << m.overall.missing.total() << "\n";
    for (const RankMetrics& r : m.ranks)
      if (r.missing.total()) o << "  rank " << r.rank << ": " << missing_text(r.missing) << "\n";
  }
  if (m.overall.inverted) o << "inverted intervals (end before start, left out): " << m.overall.inverted << "\n";
  if (m.dropped)
    o << "WARNING: " << m.dropped << " events dropped (trace buffer full): metrics describe part of the run\n";
  return o.str();
}

}  // namespace tw::trace
