// The traced call's timeline (tools/ep_timeline.hpp) from a hand-made event list:
// every phase read off the right kind and id range, relative to each rank's first send CTA.
#include <gtest/gtest.h>

#include <vector>

#include "ep_timeline.hpp"
#include "tilewire/ops/ep.hpp"

namespace {

using tw::trace::Event;
using tw::trace::EventKind;

Event ev(int rank, EventKind k, uint32_t id, uint64_t t_ns) {
  Event e{};
  e.t_ns = t_ns, e.id = id, e.rank = (uint16_t)rank, e.kind = (uint8_t)k;
  return e;
}

TEST(EpTimeline, PhasesFromTheirEvents) {
  const uint64_t b = 1'000'000;  // rank 1's clock starts later: everything is relative to its own start
  std::vector<Event> v;
  for (int r = 0; r < 2; ++r) {
    const uint64_t o = r * b;
    for (uint32_t cta = 0; cta < 2; ++cta) {
      v.push_back(ev(r, EventKind::kKernelStart, cta, o + 100 + cta * 50));
      v.push_back(ev(r, EventKind::kMmaStart, tw::kEpTraceLayout + cta, o + 200 + cta * 50));
      v.push_back(ev(r, EventKind::kMmaEnd, tw::kEpTraceLayout + cta, o + 1200 + cta * 500));  // 1.0, 1.45 us
      v.push_back(ev(r, EventKind::kChunkRecv, tw::kEpTraceCounts + cta, o + 3000 + cta * 100));
      v.push_back(ev(r, EventKind::kChunkSend, cta, o + 3500 + cta * 10));
      v.push_back(ev(r, EventKind::kKernelEnd, cta, o + 20100 + cta));  // the receive's CTAs
      v.push_back(ev(r, EventKind::kChunkSend, tw::kEpTraceCombine + cta, o + 21000 + cta));
      v.push_back(ev(r, EventKind::kKernelEnd, tw::kEpTraceCombine + cta, o + 30100 - cta));
    }
    v.push_back(ev(r, EventKind::kChunkSend, tw::kEpTraceCounts, o + 2100));
    v.push_back(ev(r, EventKind::kChunkRecv, 0, o + 15100));  // rows of source 0
    v.push_back(ev(r, EventKind::kChunkRecv, 1, o + 18100));  // rows of source 1
  }
  const std::vector<tw::cli::EpTimeline> t = tw::cli::ep_timeline(v, 2);
  ASSERT_EQ(t.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(t[r].rank, r);
    EXPECT_DOUBLE_EQ(t[r].layout_us, 1.45);
    EXPECT_DOUBLE_EQ(t[r].layout_end_us, 1.6);
    EXPECT_DOUBLE_EQ(t[r].counts_out_us, 2.0);
    EXPECT_DOUBLE_EQ(t[r].counts_in_us, 3.0);
    EXPECT_DOUBLE_EQ(t[r].first_row_us, 3.4);
    EXPECT_DOUBLE_EQ(t[r].last_row_us, 3.41);
    EXPECT_DOUBLE_EQ(t[r].rows_in_us, 18.0);
    EXPECT_DOUBLE_EQ(t[r].dispatch_end_us, 20.001);
    EXPECT_DOUBLE_EQ(t[r].combine_start_us, 20.9);
    EXPECT_DOUBLE_EQ(t[r].combine_end_us, 30.0);
  }
  EXPECT_NE(tw::cli::format_ep_timeline(t).find("#    1 "), std::string::npos);
}

TEST(EpTimeline, MissingPhasesReadAsAbsent) {
  // A high-throughput trace: kernels and rows, none of the send's setup markers.
  const std::vector<Event> v = {ev(0, EventKind::kKernelStart, 0, 500), ev(0, EventKind::kChunkSend, 0, 900),
                                ev(0, EventKind::kChunkSend, 1, 1700), ev(0, EventKind::kKernelEnd, 0, 4500)};
  const std::vector<tw::cli::EpTimeline> t = tw::cli::ep_timeline(v, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].layout_us, -1);
  EXPECT_EQ(t[0].counts_out_us, -1);
  EXPECT_EQ(t[0].counts_in_us, -1);
  EXPECT_DOUBLE_EQ(t[0].first_row_us, 0.4);
  EXPECT_DOUBLE_EQ(t[0].last_row_us, 1.2);  // CTA 1 waited 0.8 us longer for the counts
  EXPECT_DOUBLE_EQ(t[0].dispatch_end_us, 4.0);
  EXPECT_EQ(t[0].combine_end_us, -1);
  EXPECT_NE(tw::cli::format_ep_timeline(t).find("row.last"), std::string::npos);
  // No kernel_start on a rank: no entry for it.
  EXPECT_TRUE(tw::cli::ep_timeline({ev(0, EventKind::kChunkSend, 0, 5)}, 1).empty());
}

}  // namespace
