// The emulated GIN's chaos knobs (src/runtime/gin_emu.hpp), read from the environment when a
// virtual team in nodes is made: defaults, values, and the clamps that keep the proxy sane.
#include <gtest/gtest.h>

#include "cpu_util.hpp"
#include "runtime/gin_emu.hpp"

namespace {
using tw_test::ScopedEnv;

TEST(GinEmuChaos, DefaultsReorderButDoNotDelay) {
  ScopedEnv a("TILEWIRE_GIN_EMU_SEED", nullptr), b("TILEWIRE_GIN_EMU_REORDER", nullptr),
      c("TILEWIRE_GIN_EMU_DELAY_US", nullptr), d("TILEWIRE_GIN_EMU_LATE_SIGNAL_US", nullptr),
      e("TILEWIRE_GIN_EMU_SLOW_FLUSH_US", nullptr);
  const tw::GinEmuChaos k = tw::GinEmuChaos::from_env();
  EXPECT_EQ(k.seed, 1u);
  EXPECT_EQ(k.reorder, 8);  // puts unordered among themselves, even without knobs
  EXPECT_EQ(k.delay_us, 0);
  EXPECT_EQ(k.late_signal_us, 0);
  EXPECT_EQ(k.slow_flush_us, 0);
}

TEST(GinEmuChaos, KnobsAreReadAndClamped) {
  ScopedEnv a("TILEWIRE_GIN_EMU_SEED", "77"), b("TILEWIRE_GIN_EMU_REORDER", "0"),
      c("TILEWIRE_GIN_EMU_DELAY_US", "-5"), d("TILEWIRE_GIN_EMU_LATE_SIGNAL_US", "200"),
      e("TILEWIRE_GIN_EMU_SLOW_FLUSH_US", "300");
  const tw::GinEmuChaos k = tw::GinEmuChaos::from_env();
  EXPECT_EQ(k.seed, 77u);
  EXPECT_EQ(k.reorder, 1);   // 0 or less: in the order posted
  EXPECT_EQ(k.delay_us, 0);  // no negative delays
  EXPECT_EQ(k.late_signal_us, 200);
  EXPECT_EQ(k.slow_flush_us, 300);
}

TEST(GinEmuChaos, MalformedKnobIsRefusedByName) {
  ScopedEnv a("TILEWIRE_GIN_EMU_DELAY_US", "fast");
  try {
    (void)tw::GinEmuChaos::from_env();
    ADD_FAILURE() << "a malformed knob was accepted";
  } catch (const tw::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TILEWIRE_GIN_EMU_DELAY_US"), std::string::npos) << e.what();
  }
}

}  // namespace
