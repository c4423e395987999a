// The EP buffer's host checks and sizes without a GPU (tilewire/ops/ep.hpp): every bad config
// field is refused with a reason that names it; the shapes the issue lists are accepted.
#include "cpu_util.hpp"
#include "tilewire/ops/ep.hpp"

namespace {
using tw::EpConfig;
using tw::EpPayload;
using tw_test::contains;

EpConfig good() {
  EpConfig c;
  c.max_tokens_per_rank = 4096;
  c.hidden = 7168;
  c.topk = 8;
  c.num_experts = 256;
  return c;
}

TEST(EpPlan, AcceptsTheShapesUsersRun) {
  for (int hidden : {2048, 2560, 4096, 7168, 8192})
    for (int P : {1, 2, 4, 8})
      for (EpPayload pay : {EpPayload::kBFloat16, EpPayload::kFp8E4M3}) {
        EpConfig c = good();
        c.hidden = hidden;
        c.payload = pay;
        const tw::Status s = tw::check_ep_config(c, P, 132 / P);
        EXPECT_TRUE(s.ok) << hidden << " x " << P << ": " << s.reason;
      }
  EpConfig c = good();
  c.topk = 16, c.num_experts = 512, c.max_tokens_per_rank = 8192;
  EXPECT_TRUE(tw::check_ep_config(c, 8, 16).ok);
  c.max_tokens_per_rank = 1;
  EXPECT_TRUE(tw::check_ep_config(c, 8, 16).ok);
}

TEST(EpPlan, RowAndScaleBytes) {
  EpConfig c = good();
  EXPECT_EQ(tw::ep_row_bytes(c), 7168u * 2);
  EXPECT_EQ(tw::ep_scale_bytes(c), 0u);
  c.payload = EpPayload::kFp8E4M3;
  EXPECT_EQ(tw::ep_row_bytes(c), 7168u);
  EXPECT_EQ(tw::ep_scale_bytes(c), 7168u / 128 * 4);
}

TEST(EpPlan, RejectsEachBadFieldWithItsName) {
  struct Case {
    const char* what;
    void (*edit)(EpConfig&);
    int P;
    const char* needle;
  };
  const Case cases[] = {
      {"no tokens", [](EpConfig& c) { c.max_tokens_per_rank = 0; }, 2, "max_tokens_per_rank 0"},
      {"too many tokens", [](EpConfig& c) { c.max_tokens_per_rank = tw::kEpMaxTokens + 1; }, 2, "max_tokens_per_rank"},
      {"hidden not 16-byte rows", [](EpConfig& c) { c.hidden = 7164; }, 2, "not a multiple of 16"},
      {"fp8 hidden not x128", [](EpConfig& c) { c.payload = EpPayload::kFp8E4M3, c.hidden = 7200; }, 2, "multiple of 128"},
      {"hidden zero", [](EpConfig& c) { c.hidden = 0; }, 2, "hidden 0"},
      {"topk too large", [](EpConfig& c) { c.topk = 17; }, 2, "topk 17"},
      {"topk zero", [](EpConfig& c) { c.topk = 0; }, 2, "topk 0"},
      {"too many experts", [](EpConfig& c) { c.num_experts = 1024; }, 2, "num_experts 1024"},
      {"experts not a multiple of ranks", [](EpConfig& c) { c.num_experts = 250; }, 8, "not a multiple of the 8 ranks"},
      {"alignment", [](EpConfig& c) { c.expert_alignment = 0; }, 2, "expert_alignment 0"},
      {"sms beyond the budget", [](EpConfig& c) { c.num_sms = 40; }, 2, "num_sms 40"},
  };
  for (const Case& k : cases) {
    EpConfig c = good();
    k.edit(c);
    const tw::Status s = tw::check_ep_config(c, k.P, 33);
    EXPECT_FALSE(s.ok) << k.what;
    EXPECT_TRUE(contains(s.reason, k.needle)) << k.what << ": " << s.reason;
    EXPECT_TRUE(contains(s.reason, "EpBuffer")) << s.reason;
  }
}

}  // namespace

// ------------------------------------------------------------------ the window's layout
#include <algorithm>
#include <utility>
#include <vector>

#include "ops/ep/geometry.hpp"

namespace {
using Region = std::pair<size_t, size_t>;  // [offset, offset + bytes)

// "" when every region is 256-byte aligned, inside [0, total) and disjoint from the others.
std::string check_regions(std::vector<Region> r, size_t total) {
  std::sort(r.begin(), r.end());
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].first % 256) return "region at " + std::to_string(r[i].first) + " is not 256-byte aligned";
    if (r[i].first + r[i].second > total) return "region at " + std::to_string(r[i].first) + " runs past the window";
    if (i && r[i - 1].first + r[i - 1].second > r[i].first) return "regions at " + std::to_string(r[i - 1].first) + " and " +
                                                                   std::to_string(r[i].first) + " overlap";
  }
  return "";
}

TEST(EpPlan, HighThroughputWindowRegionsAreDisjoint) {
  for (int P : {1, 2, 3, 8})
    for (EpPayload pay : {EpPayload::kBFloat16, EpPayload::kFp8E4M3}) {
      EpConfig c = good();
      c.payload = pay, c.num_experts = 64 * P, c.max_tokens_per_rank = 1000;
      const auto g = tw::ops::ep::geometry(c, P, P - 1, 24);
      const size_t cap = (size_t)P * 1000, flags = (size_t)P * 24 * 8;
      EXPECT_GE(g.slot_bytes, 16 + 4u * (P + 64));
      EXPECT_EQ(g.slot_bytes % 16, 0u);
      EXPECT_EQ(check_regions({{g.off_slots, P * g.slot_bytes}, {g.off_done, flags}, {g.off_cstart, flags},
                               {g.off_cdone, flags}, {g.off_dstart, flags}, {g.off_rsrc, cap * 4}, {g.off_rtok, cap * 4},
                               {g.off_ridx, cap * c.topk * 4}, {g.off_rw, cap * c.topk * 4},
                               {g.off_rscale, cap * tw::ep_scale_bytes(c)}, {g.off_rx, cap * tw::ep_row_bytes(c)},
                               {g.off_cw, cap * 4}, {g.off_cy, cap * c.hidden * 2}},
                              g.total),
                "")
          << "P = " << P;
      // The flags and slots (zeroed at creation) come before every data region.
      EXPECT_LE(std::max(g.off_cdone, g.off_dstart) + flags, g.off_rsrc);
    }
}

TEST(EpPlan, ExpertMajorAreaIsInTheWindowAndDisjoint) {
  for (int P : {1, 2, 8}) {
    EpConfig c = good();
    c.num_experts = 16 * P, c.max_tokens_per_rank = 700;
    const auto none = tw::ops::ep::geometry(c, P, 0, 24);
    EXPECT_EQ(none.xrows, 0);
    c.expert_major_rows = 3000;
    ASSERT_TRUE(tw::check_ep_config(c, P, 132).ok);
    const auto g = tw::ops::ep::geometry(c, P, 0, 24);
    const size_t cap = (size_t)P * 700, flags = (size_t)P * 24 * 8;
    EXPECT_EQ(g.xrows, 3000);
    EXPECT_EQ(g.E, 16 * P);
    // A count slot carries every expert's count after the receiver's own.
    EXPECT_GE(g.slot_bytes, 16 + 4u * (P + 16 + 16 * P));
    EXPECT_EQ(g.off_rx, none.off_rx);
    EXPECT_GE(g.total, none.total + 3000 * tw::ep_row_bytes(c) + cap * c.topk * 4);
    EXPECT_EQ(check_regions({{g.off_slots, P * g.slot_bytes}, {g.off_done, flags}, {g.off_cstart, flags},
                             {g.off_cdone, flags}, {g.off_dstart, flags}, {g.off_rsrc, cap * 4}, {g.off_rtok, cap * 4},
                             {g.off_ridx, cap * c.topk * 4}, {g.off_rw, cap * c.topk * 4},
                             {g.off_rx, cap * tw::ep_row_bytes(c)}, {g.off_cw, cap * 4},
                             {g.off_cy, cap * c.hidden * 2}, {g.off_xpos, cap * c.topk * 4},
                             {g.off_xg, 3000 * tw::ep_row_bytes(c)}},
                            g.total),
              "")
        << "P = " << P;
  }
}

// combine_slots: a bf16 row per (token, slot) of this rank's tokens, disjoint from everything else;
// its done flags are zeroed at creation with the others (before the first data region).
TEST(EpPlan, SlotRowsAreInTheWindowAndDisjoint) {
  for (int P : {1, 2, 8}) {
    EpConfig c = good();
    c.num_experts = 16 * P, c.max_tokens_per_rank = 700, c.expert_major_rows = 3000;
    const auto none = tw::ops::ep::geometry(c, P, 0, 24);
    c.combine_slots = true;
    ASSERT_TRUE(tw::check_ep_config(c, P, 132).ok);
    const auto g = tw::ops::ep::geometry(c, P, 0, 24);
    const size_t cap = (size_t)P * 700, flags = (size_t)P * 24 * 8, slots = (size_t)700 * c.topk * c.hidden * 2;
    EXPECT_GE(g.total, none.total + slots);
    EXPECT_LE(g.off_sdone + flags, g.off_rsrc);
    EXPECT_EQ(check_regions({{g.off_slots, P * g.slot_bytes}, {g.off_done, flags}, {g.off_cstart, flags},
                             {g.off_cdone, flags}, {g.off_dstart, flags}, {g.off_sdone, flags}, {g.off_rsrc, cap * 4},
                             {g.off_rtok, cap * 4}, {g.off_ridx, cap * c.topk * 4}, {g.off_rw, cap * c.topk * 4},
                             {g.off_rx, cap * tw::ep_row_bytes(c)}, {g.off_cw, cap * 4},
                             {g.off_cy, cap * c.hidden * 2}, {g.off_xpos, cap * c.topk * 4},
                             {g.off_xg, 3000 * tw::ep_row_bytes(c)}, {g.off_sy, slots}},
                            g.total),
              "")
        << "P = " << P;
  }
  EpConfig c = good();
  c.combine_slots = true;  // without the expert-major area its rows have no places to come back from
  const auto s = tw::check_ep_config(c, 8, 132);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("combine_slots needs expert_major_rows > 0"), std::string::npos) << s.reason;
}

TEST(EpPlan, ExpertMajorRowsNeedHighThroughputBf16) {
  EpConfig c = good();
  c.expert_major_rows = -1;
  auto s = tw::check_ep_config(c, 8, 132);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("expert_major_rows -1"), std::string::npos) << s.reason;
  c.expert_major_rows = 100;
  EXPECT_TRUE(tw::check_ep_config(c, 8, 132).ok);
  c.payload = EpPayload::kFp8E4M3;
  s = tw::check_ep_config(c, 8, 132);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("bf16"), std::string::npos) << s.reason;
  c.payload = EpPayload::kBFloat16, c.mode = tw::EpMode::kLowLatency, c.max_tokens_per_rank = 128;
  s = tw::check_ep_config(c, 8, 132);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("high-throughput"), std::string::npos) << s.reason;
}

TEST(EpPlan, GinStagingRegionsAreDisjointAndMirrorTheReceiveRegions) {
  for (int P : {2, 9, 16})
    for (EpPayload pay : {EpPayload::kBFloat16, EpPayload::kFp8E4M3}) {
      EpConfig c = good();
      c.payload = pay, c.num_experts = 16 * P, c.max_tokens_per_rank = 700;
      const auto lsa = tw::ops::ep::geometry(c, P, 1, 24, false);
      const auto g = tw::ops::ep::geometry(c, P, 1, 24, true);
      const size_t cap = (size_t)P * 700, flags = (size_t)P * 24 * 8;
      EXPECT_FALSE(lsa.gin);
      EXPECT_TRUE(g.gin);
      // The receive regions are where the LSA path has them: a GIN put lands on the same offsets.
      EXPECT_EQ(g.off_rx, lsa.off_rx);
      EXPECT_EQ(g.off_cy, lsa.off_cy);
      EXPECT_GT(g.total, lsa.total);
      EXPECT_EQ(check_regions({{g.off_slots, P * g.slot_bytes}, {g.off_done, flags}, {g.off_cstart, flags},
                               {g.off_cdone, flags}, {g.off_dstart, flags}, {g.off_rsrc, cap * 4}, {g.off_rtok, cap * 4},
                               {g.off_ridx, cap * c.topk * 4}, {g.off_rw, cap * c.topk * 4},
                               {g.off_rscale, cap * tw::ep_scale_bytes(c)}, {g.off_rx, cap * tw::ep_row_bytes(c)},
                               {g.off_cw, cap * 4}, {g.off_cy, cap * c.hidden * 2}, {g.off_sslots, P * g.slot_bytes},
                               {g.off_srsrc, cap * 4}, {g.off_srtok, cap * 4}, {g.off_sridx, cap * c.topk * 4},
                               {g.off_srw, cap * c.topk * 4}, {g.off_srscale, cap * tw::ep_scale_bytes(c)},
                               {g.off_srx, cap * tw::ep_row_bytes(c)}, {g.off_scw, cap * 4},
                               {g.off_scy, cap * c.hidden * 2}},
                              g.total),
                "")
          << "P = " << P;
      // Four signals per source, one per phase, none shared.
      tw::ops::ep::Geometry s = g;
      s.sig = 100;
      EXPECT_EQ(s.signal(tw::ops::ep::Geometry::kSigCounts, 0), 100);
      EXPECT_EQ(s.signal(tw::ops::ep::Geometry::kSigCombineRows, P - 1), 100 + 4 * P - 1);
    }
}

TEST(EpPlan, LowLatencyWindowRegionsAreDisjoint) {
  for (int P : {1, 2, 3, 8})
    for (EpPayload pay : {EpPayload::kBFloat16, EpPayload::kFp8E4M3}) {
      EpConfig c = good();
      c.mode = tw::EpMode::kLowLatency, c.payload = pay, c.num_experts = 32 * P, c.max_tokens_per_rank = 256;
      const auto g = tw::ops::ep::ll::geometry(c, P, 0, 16);
      // One receive block and one combine block of [L][P x max_tokens] rows; count slots hold
      // every expert's count.
      const size_t rows = (size_t)32 * P * 256, flags = 2 * (size_t)P * 16 * 8;
      EXPECT_EQ(g.cap, P * 256);
      EXPECT_GE(g.slot_bytes, 16 + 4 * (size_t)c.num_experts);
      EXPECT_EQ(check_regions({{g.off_slots, 2 * P * g.slot_bytes}, {g.off_done, flags}, {g.off_cdone, flags},
                               {g.off_meta, 3 * rows * 4}, {g.off_scales, rows * g.nsc * 4}, {g.off_rows, rows * g.row_bytes},
                               {g.off_y, rows * c.hidden * 2}},
                              g.total),
                "")
          << "P = " << P;
      // Each row's source rank, token and slot: three int32 arrays of every row, back to back.
      EXPECT_EQ(g.meta(0, 0), g.off_meta);
      EXPECT_EQ(g.meta(1, 0), g.off_meta + rows * 4);
      EXPECT_EQ(g.meta(2, rows - 1) + 4, g.off_meta + 3 * rows * 4);
      // Slots and flags come first: creation zeroes [0, off_meta).
      EXPECT_LE(g.off_cdone + flags, g.off_meta);
      EXPECT_EQ(g.done(g.off_done, 1, P - 1, 15) + 8, g.off_done + flags);
    }
}

TEST(EpPlan, LowLatencyGinStagingIsDisjointAndSized) {
  for (int P : {2, 3, 16})
    for (EpPayload pay : {EpPayload::kBFloat16, EpPayload::kFp8E4M3}) {
      EpConfig c = good();
      c.mode = tw::EpMode::kLowLatency, c.payload = pay, c.num_experts = 16 * P, c.max_tokens_per_rank = 128;
      const auto plain = tw::ops::ep::ll::geometry(c, P, 1, 16);
      const auto g = tw::ops::ep::ll::geometry(c, P, 1, 16, /*gin=*/true);
      EXPECT_FALSE(plain.gin);
      EXPECT_EQ(plain.off_srows, 0u);
      EXPECT_EQ(plain.off_cy, 0u);
      EXPECT_TRUE(g.gin);
      // The receiver's regions do not move; the staging follows them.
      EXPECT_EQ(g.off_rows, plain.off_rows);
      EXPECT_EQ(g.off_y, plain.off_y);
      const size_t rows = (size_t)g.L * P * 128, flags = 2 * (size_t)P * 16 * 8, pairs = (size_t)128 * c.topk;
      EXPECT_EQ(check_regions({{g.off_slots, 2 * P * g.slot_bytes}, {g.off_done, flags}, {g.off_cdone, flags},
                               {g.off_meta, 3 * rows * 4}, {g.off_scales, rows * g.nsc * 4}, {g.off_rows, rows * g.row_bytes},
                               {g.off_y, rows * c.hidden * 2}, {g.off_sslots, 2 * P * g.slot_bytes},
                               {g.off_smeta, 3 * 2 * pairs * 4}, {g.off_sscales, 2 * pairs * g.nsc * 4},
                               {g.off_srows, 2 * pairs * g.row_bytes}, {g.off_cy, pairs * c.hidden * 2}},
                              g.total),
                "")
          << "P = " << P;
      // The last pair of the last parity ends inside the staging rows; the last landing row
      // inside the landing block; six signals per source (phase x call parity).
      EXPECT_EQ((g.spair(1, 128 * c.topk - 1) + 1) * g.row_bytes, 2 * pairs * g.row_bytes);
      EXPECT_EQ(g.cyrow(127, c.topk - 1) + 1, pairs);
      // The staged (source, token, slot) of the last pair of the last parity: the end of the staging's meta.
      EXPECT_EQ(g.smeta(2, 1, 128 * c.topk - 1) + 4, g.off_smeta + 3 * 2 * pairs * 4);
      EXPECT_EQ(g.smeta(1, 0, 0), g.off_smeta + 2 * pairs * 4);
      auto s = g;
      s.sig = 40;
      EXPECT_EQ(s.signal(tw::ops::ep::ll::Geo::kSigCounts, 0, 0), 40);
      EXPECT_EQ(s.signal(tw::ops::ep::ll::Geo::kSigCounts, 1, 0), 40 + P);  // the other parity
      EXPECT_EQ(s.signal(tw::ops::ep::ll::Geo::kSigCombine, 1, P - 1), 40 + 6 * P - 1);
    }
}

// num_sms 0: the high-throughput kernels take 24 CTAs (or the budget, if smaller), the
// low-latency ones the whole budget.
TEST(EpPlan, DefaultSmsPerMode) {
  EpConfig c = good();
  EXPECT_EQ(tw::ep_default_sms(c, 132), tw::kEpDefaultSms);
  EXPECT_EQ(tw::ep_default_sms(c, 16), 16);
  c.mode = tw::EpMode::kLowLatency;
  EXPECT_EQ(tw::ep_default_sms(c, 132), 132);
  EXPECT_EQ(tw::ep_default_sms(c, 16), 16);
}
}  // namespace

// The layout kernel keeps a token's destination ranks in a 32-bit mask: a communicator of more
// than 32 ranks would drop the tokens for ranks 32 and up (while counting them per expert), so
// the config is refused there with a reason that names the limit.
TEST(EpPlan, RefusesMoreRanksThanTheRoutingMaskHolds) {
  EpConfig c = good();
  EXPECT_TRUE(tw::check_ep_config(c, 32, 4).ok) << "256 experts on 32 ranks";
  for (int P : {33, 40, 64}) {
    c.num_experts = 8 * P;  // a multiple of P, at most 512
    const tw::Status s = tw::check_ep_config(c, P, 2);
    EXPECT_FALSE(s.ok) << P << " ranks";
    EXPECT_TRUE(contains(s.reason, "32")) << s.reason;
  }
}
