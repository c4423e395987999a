// The ops' needs of every communicator (src/runtime/needs.hpp): the all-reduce family and the
// fused GEMM register theirs at static initialization, and the all-reduce's is sized from the
// team's shape, CommConfig and its knobs as the one-shot kernel addresses it.
#include <gtest/gtest.h>

#include <string>

#include "../scoped_env.hpp"
#include "ops/allreduce/state.hpp"
#include "runtime/needs.hpp"
#include "tilewire/runtime/errors.hpp"

namespace {

const tw::Need* need_of(const std::string& owner) {
  for (const tw::Need& n : tw::needs())
    if (owner == n.owner) return &n;
  return nullptr;
}

std::string agreed(const tw::NeedRequest& r, const std::string& name) {
  for (const auto& k : r.agree)
    if (k.name == name) return k.value;
  return "(absent)";
}

TEST(Needs, OpsRegisterTheirs) {
  ASSERT_NE(need_of("all-reduce"), nullptr);
  ASSERT_NE(need_of("fused GEMM"), nullptr);
}

TEST(Needs, AllReduceStagingFromConfigAndKnobs) {
  const tw::Need* n = need_of("all-reduce");
  ASSERT_NE(n, nullptr);
  tw_test::ScopedEnv blocks("TILEWIRE_ONESHOT_BLOCKS", "24");
  tw::CommConfig cfg;
  cfg.oneshot_max_bytes = 64 << 10;
  const tw::CommShape shape{4, 4, 132, false, &cfg};
  const tw::NeedRequest r = n->fn(shape);
  // Per (parity, source): 64 KiB rounded up to whole 16-byte lines of each of the 24 blocks, x 2
  // (an LL line carries 8 payload bytes in 16).
  const size_t per = (65536 + 16 * 24 - 1) / (16 * 24) * (16 * 24);
  EXPECT_EQ(r.control_bytes, 2 * 4 * 2 * per);
  EXPECT_EQ(r.local_bytes, sizeof(uint32_t) * tw::ops::kOneShotMaxBlocks);
  EXPECT_EQ(r.grid_blocks, 24);
  EXPECT_EQ(agreed(r, "CommConfig.oneshot_max_bytes"), "65536");
  EXPECT_EQ(agreed(r, "one-shot blocks"), "24");
  ASSERT_NE(r.record, nullptr);
  const auto* k = static_cast<const tw::ops::AllReduceKnobs*>(r.record.get());
  EXPECT_EQ(k->oneshot_blocks, 24);
  EXPECT_EQ(k->staging_bytes, r.control_bytes);
  // The one-shot maximum the op reports back (oneshot_max_bytes): staging / (4 x lsa_size).
  EXPECT_EQ(k->staging_bytes / (4 * 4), per);
}

TEST(Needs, AllReduceClampsBlocksToTheBudget) {
  const tw::Need* n = need_of("all-reduce");
  ASSERT_NE(n, nullptr);
  tw::CommConfig cfg;
  {  // the default (unset) is clamped to a virtual rank's budget
    tw_test::ScopedEnv blocks("TILEWIRE_ONESHOT_BLOCKS", nullptr);
    const tw::NeedRequest r = n->fn(tw::CommShape{8, 8, 16, true, &cfg});
    EXPECT_LE(r.grid_blocks, 16);
  }
  {  // a setting beyond it is refused, naming the knob
    tw_test::ScopedEnv blocks("TILEWIRE_ONESHOT_BLOCKS", "64");
    try {
      n->fn(tw::CommShape{8, 8, 16, true, &cfg});
      FAIL() << "64 one-shot blocks on a 16-SM budget were accepted";
    } catch (const tw::Error& e) {
      EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("TILEWIRE_ONESHOT_BLOCKS=64"), std::string::npos) << e.what();
    }
  }
  {  // on a real rank the same setting is only bounded by the kernel's own limit
    tw_test::ScopedEnv blocks("TILEWIRE_ONESHOT_BLOCKS", "400");
    EXPECT_EQ(n->fn(tw::CommShape{8, 8, 132, false, &cfg}).grid_blocks, tw::ops::kOneShotMaxBlocks);
  }
}

}  // namespace
