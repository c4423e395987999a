// MoE FFN config checks without a GPU (ops/moe.hpp check_moe_config): each refusal names the
// field; a valid config of either EP mode passes; the overlap leaves the GEMM's preparation an SM.
#include <string>

#include "cpu_util.hpp"
#include "tilewire/ops/moe.hpp"

namespace {
using tw_test::contains;

tw::MoeConfig valid(tw::EpMode mode) {
  tw::MoeConfig c;
  c.ep.mode = mode, c.ep.max_tokens_per_rank = 128, c.ep.hidden = 7168, c.ep.topk = 8, c.ep.num_experts = 256;
  c.ffn = 2048;
  return c;
}

TEST(MoePlan, AcceptsBothModes) {
  for (tw::EpMode m : {tw::EpMode::kHighThroughput, tw::EpMode::kLowLatency}) {
    const tw::Status s = tw::check_moe_config(valid(m), 8, 16);
    EXPECT_TRUE(s.ok) << s.reason;
  }
}

TEST(MoePlan, RefusesWithTheReason) {
  struct Case {
    std::string want;
    tw::MoeConfig c;
  };
  std::vector<Case> cases;
  auto with = [&](const std::string& want, auto edit) {
    tw::MoeConfig c = valid(tw::EpMode::kLowLatency);
    edit(c);
    cases.push_back({want, c});
  };
  with("ffn 0 must be a positive multiple of 8", [](tw::MoeConfig& c) { c.ffn = 0; });
  with("ffn 2044 must be", [](tw::MoeConfig& c) { c.ffn = 2044; });
  with("payload fp8 is not built", [](tw::MoeConfig& c) { c.ep.payload = tw::EpPayload::kFp8E4M3; });
  with("num_experts 250 is not a multiple", [](tw::MoeConfig& c) { c.ep.num_experts = 250; });
  with("topk 0", [](tw::MoeConfig& c) { c.ep.topk = 0; });
  with("rows_hint -1", [](tw::MoeConfig& c) { c.gemm.rows_hint = -1; });
  with("max_expert_rows -5 is negative", [](tw::MoeConfig& c) { c.max_expert_rows = -5; });
  with("gate_up 7 is not a MoeGateUp", [](tw::MoeConfig& c) { c.gate_up = tw::MoeGateUp(7); });
  with("ep.expert_major_rows 64 is the MoE's to set", [](tw::MoeConfig& c) {
    c.ep.mode = tw::EpMode::kHighThroughput, c.ep.expert_major_rows = 64;
  });
  with("ep.combine_slots is the MoE's to set", [](tw::MoeConfig& c) { c.ep.combine_slots = true; });
  with("slot_combine needs direct_dispatch", [](tw::MoeConfig& c) {
    c.ep.mode = tw::EpMode::kHighThroughput, c.slot_combine = true;
  });
  with("slot_combine's down GEMM (GroupedEpilogue::kRowTargets) is built for the 64x128pp and 128x256coop", [](tw::MoeConfig& c) {
    c.ep.mode = tw::EpMode::kHighThroughput, c.slot_combine = c.direct_dispatch = true;
    c.gemm.tile = tw::GroupedTile::k64x256pp;
  });
  for (const Case& k : cases) {
    const tw::Status s = tw::check_moe_config(k.c, 8, 16);
    EXPECT_FALSE(s.ok) << k.want;
    EXPECT_TRUE(contains(s.reason, "moe: ")) << s.reason;
    EXPECT_TRUE(contains(s.reason, k.want)) << "want '" << k.want << "' in: " << s.reason;
  }
}

// The overlap's dispatch CTAs and the GEMM's preparation must all be resident: num_sms <= budget - 1
// (0: the default, which the MoE caps there). The low-latency mode ignores the flag.
TEST(MoePlan, OverlapLeavesTheGemmPreparationAnSm) {
  tw::MoeConfig c = valid(tw::EpMode::kHighThroughput);
  c.overlap = true;
  EXPECT_TRUE(tw::check_moe_config(c, 8, 16).ok);
  c.ep.num_sms = 15;
  EXPECT_TRUE(tw::check_moe_config(c, 8, 16).ok);
  c.ep.num_sms = 16;
  const tw::Status s = tw::check_moe_config(c, 8, 16);
  EXPECT_FALSE(s.ok);
  EXPECT_TRUE(contains(s.reason, "overlap with ep.num_sms 16 needs an SM budget of at least 17")) << s.reason;
  c.overlap = false;
  EXPECT_TRUE(tw::check_moe_config(c, 8, 16).ok) << "without the overlap the dispatch may take the whole budget";
  c = valid(tw::EpMode::kLowLatency);
  c.overlap = true;
  c.ep.num_sms = 16;
  EXPECT_TRUE(tw::check_moe_config(c, 8, 16).ok) << "low latency ignores the overlap";
}

}  // namespace

// Every combination of the fusions is a valid config, in both modes (low latency ignores them),
// except the overlap with the direct dispatch in the high-throughput mode (two layouts of the
// receive) and the slot combine without the direct dispatch (no places to come back from), which
// are refused saying so.
TEST(MoePlan, EveryFusionCombinationIsValid) {
  for (tw::EpMode m : {tw::EpMode::kHighThroughput, tw::EpMode::kLowLatency})
    for (int bits = 0; bits < 32; ++bits) {
      tw::MoeConfig c = valid(m);
      c.overlap = bits & 1, c.fused_combine = bits & 2, c.direct_dispatch = bits & 8, c.slot_combine = bits & 16;
      c.gate_up = bits & 4 ? tw::MoeGateUp::kInterleaved8 : tw::MoeGateUp::kGateThenUp;
      const tw::Status s = tw::check_moe_config(c, 8, 16);
      if (m == tw::EpMode::kHighThroughput && c.overlap && c.direct_dispatch) {
        EXPECT_FALSE(s.ok) << "fusions " << bits;
        EXPECT_TRUE(contains(s.reason, "direct_dispatch and overlap")) << s.reason;
      } else if (m == tw::EpMode::kHighThroughput && c.slot_combine && !c.direct_dispatch) {
        EXPECT_FALSE(s.ok) << "fusions " << bits;
        EXPECT_TRUE(contains(s.reason, "slot_combine needs direct_dispatch")) << s.reason;
      } else {
        EXPECT_TRUE(s.ok) << "fusions " << bits << ": " << s.reason;
      }
    }
}
