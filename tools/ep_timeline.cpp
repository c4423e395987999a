// The traced low-latency call's timeline (ep_timeline.hpp).
#include "ep_timeline.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "tilewire/ops/ep.hpp"

namespace tw::cli {
namespace {

using trace::Event;
using trace::EventKind;

constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();

struct Acc {
  uint64_t t0 = kNone;  // first send kernel_start
  uint64_t layout_max = 0, layout_end = 0, counts_out = kNone, counts_in = 0, first_row = kNone, last_row = 0, rows_in = 0,
           dispatch_end = 0, combine_start = kNone, combine_end = 0;
  std::map<uint32_t, uint64_t> layout_start;  // CTA -> mma_start
  bool has_layout = false, has_counts_in = false, has_rows_in = false, has_dispatch_end = false, has_combine_end = false;
};

bool is(const Event& e, EventKind k) { return e.kind == (uint8_t)k; }

}  // namespace

std::vector<EpTimeline> ep_timeline(const std::vector<Event>& aligned, int nranks) {
  std::vector<Acc> a(std::max(0, nranks));
  for (const Event& e : aligned) {
    if (e.rank >= a.size()) continue;
    Acc& r = a[e.rank];
    const uint32_t id = e.id;
    const bool dispatch_id = id < kEpTraceCombine;
    if (is(e, EventKind::kKernelStart) && dispatch_id) r.t0 = std::min(r.t0, e.t_ns);
    if (is(e, EventKind::kMmaStart) && id >= kEpTraceLayout && id < kEpTraceCounts) r.layout_start[id] = e.t_ns;
    if (is(e, EventKind::kMmaEnd) && id >= kEpTraceLayout && id < kEpTraceCounts) {
      r.has_layout = true;
      r.layout_end = std::max(r.layout_end, e.t_ns);
      const auto s = r.layout_start.find(id);
      if (s != r.layout_start.end() && e.t_ns >= s->second) r.layout_max = std::max(r.layout_max, e.t_ns - s->second);
    }
    if (is(e, EventKind::kChunkSend) && id == kEpTraceCounts) r.counts_out = std::min(r.counts_out, e.t_ns);
    if (is(e, EventKind::kChunkRecv) && id >= kEpTraceCounts) {
      r.has_counts_in = true;
      r.counts_in = std::max(r.counts_in, e.t_ns);
    }
    if (is(e, EventKind::kChunkSend) && dispatch_id) {
      r.first_row = std::min(r.first_row, e.t_ns);
      r.last_row = std::max(r.last_row, e.t_ns);
    }
    if (is(e, EventKind::kChunkRecv) && dispatch_id) {
      r.has_rows_in = true;
      r.rows_in = std::max(r.rows_in, e.t_ns);
    }
    if (is(e, EventKind::kKernelEnd) && dispatch_id) {
      r.has_dispatch_end = true;
      r.dispatch_end = std::max(r.dispatch_end, e.t_ns);
    }
    const bool combine_id = id >= kEpTraceCombine && id < kEpTraceLayout;
    if (is(e, EventKind::kChunkSend) && combine_id) r.combine_start = std::min(r.combine_start, e.t_ns);
    if (is(e, EventKind::kKernelEnd) && combine_id) {
      r.has_combine_end = true;
      r.combine_end = std::max(r.combine_end, e.t_ns);
    }
  }
  std::vector<EpTimeline> out;
  for (int q = 0; q < (int)a.size(); ++q) {
    const Acc& r = a[q];
    if (r.t0 == kNone) continue;
    const auto at = [&](bool have, uint64_t t) { return have && t != kNone && t >= r.t0 ? (double)(t - r.t0) / 1e3 : -1.0; };
    EpTimeline t;
    t.rank = q;
    t.layout_us = r.has_layout ? (double)r.layout_max / 1e3 : -1;
    t.layout_end_us = at(r.has_layout, r.layout_end);
    t.counts_out_us = at(true, r.counts_out);
    t.counts_in_us = at(r.has_counts_in, r.counts_in);
    t.first_row_us = at(true, r.first_row);
    t.last_row_us = at(r.first_row != kNone, r.last_row);
    t.rows_in_us = at(r.has_rows_in, r.rows_in);
    t.dispatch_end_us = at(r.has_dispatch_end, r.dispatch_end);
    t.combine_start_us = at(true, r.combine_start);
    t.combine_end_us = at(r.has_combine_end, r.combine_end);
    out.push_back(t);
  }
  return out;
}

std::string format_ep_timeline(const std::vector<EpTimeline>& t) {
  const auto f = [](double v) {
    char b[32];
    if (v < 0) std::snprintf(b, sizeof b, "%8s", "-");
    else std::snprintf(b, sizeof b, "%8.2f", v);
    return std::string(b);
  };
  std::string s =
      "# traced call, us after the rank's send started: layout (slowest CTA, its end), counts out (CTA 0) / in (last CTA),\n"
      "#   first row out, last CTA's first row out, rows in (last source), dispatch end, combine start / end\n"
      "# rank   layout  lay.end  cnt.out   cnt.in  row.out row.last   rows.in  disp.end  comb.st comb.end\n";
  for (const EpTimeline& x : t) {
    char r[16];
    std::snprintf(r, sizeof r, "# %4d ", x.rank);
    s += r + f(x.layout_us) + " " + f(x.layout_end_us) + " " + f(x.counts_out_us) + " " + f(x.counts_in_us) + " " +
         f(x.first_row_us) + " " + f(x.last_row_us) + " " + f(x.rows_in_us) + "  " + f(x.dispatch_end_us) + " " + f(x.combine_start_us) + " " +
         f(x.combine_end_us) + "\n";
  }
  return s;
}

}  // namespace tw::cli
