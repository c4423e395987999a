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
