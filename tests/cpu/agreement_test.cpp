// The protocol record every rank of a communicator must agree on (src/runtime/agreement.hpp):
// encoding, hashing, and the message that names the first knob two ranks disagree on.
#include "cpu_util.hpp"
#include "runtime/agreement.hpp"
#include "../scoped_env.hpp"

namespace {
namespace ag = tw::agreement;
using tw_test::contains;

ag::Record record(const char* relay_pct) {
  return {{"tilewire version", "0.1.0"}, {"TILEWIRE_RELAY_PACE_PCT", relay_pct}, {"SM count (agreed)", "66"}};
}

TEST(Agreement, EncodeDecodeRoundTrip) {
  const ag::Record r = record("60");
  const ag::Record back = ag::decode(ag::encode(r));
  ASSERT_EQ(back.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(back[i].name, r[i].name);
    EXPECT_EQ(back[i].value, r[i].value);
  }
}

TEST(Agreement, HashSeesEveryKnob) {
  EXPECT_EQ(ag::hash(record("60")), ag::hash(record("60")));
  EXPECT_NE(ag::hash(record("60")), ag::hash(record("61")));
  ag::Record longer = record("60");
  longer.push_back({"PDL", "1"});
  EXPECT_NE(ag::hash(record("60")), ag::hash(longer));
}

TEST(Agreement, NamesTheKnobAndBothValues) {
  EXPECT_EQ(ag::first_disagreement({record("60"), record("60"), record("60")}), "");
  const std::string why = ag::first_disagreement({record("60"), record("60"), record("80")});
  EXPECT_TRUE(contains(why, "TILEWIRE_RELAY_PACE_PCT")) << why;
  EXPECT_TRUE(contains(why, "rank 0 has '60'")) << why;
  EXPECT_TRUE(contains(why, "rank 2 has '80'")) << why;
  ag::Record extra = record("60");
  extra.push_back({"PDL", "0"});
  const std::string absent = ag::first_disagreement({record("60"), extra});
  EXPECT_TRUE(contains(absent, "PDL: rank 0 has '(absent)', rank 1 has '0'")) << absent;
}

TEST(Agreement, EnvironmentKnobsShapeKernelsOnly) {
  tw_test::ScopedEnv pace("TILEWIRE_RELAY_PACE_PCT", "73"), timeout("TILEWIRE_TIMEOUT_MS", "1234");
  const ag::Record r = ag::environment_knobs();
  bool pace_seen = false;
  for (const ag::Knob& k : r) {
    EXPECT_NE(k.name, "TILEWIRE_TIMEOUT_MS") << "a bound on waits is not protocol: ranks may differ";
    if (k.name == "TILEWIRE_RELAY_PACE_PCT") {
      pace_seen = true;
      EXPECT_EQ(k.value, "73");
    }
  }
  EXPECT_TRUE(pace_seen) << "the relay's pacing shapes its kernel: every rank must agree on it";
  EXPECT_GT(r.size(), 10u);
}

// TILEWIRE_CHECK_CALLS adds a host collective to every call: a rank that checks while its peers
// do not would wait for them in vain, so the setting itself is agreed at creation.
TEST(Agreement, CallCheckIsAgreed) {
  tw_test::ScopedEnv check("TILEWIRE_CHECK_CALLS", "1");
  bool seen = false;
  for (const ag::Knob& k : ag::environment_knobs())
    if (k.name == "TILEWIRE_CHECK_CALLS") seen = k.value == "1";
  EXPECT_TRUE(seen);
}

// The call record (Comm::agree_on_call): a buffer at another offset of the same window is named
// with both places.
TEST(Agreement, CallRecordNamesTheBufferPlace) {
  auto call = [](const char* send) {
    return ag::Record{{"op", "allreduce"}, {"count", "4099"}, {"dtype", "float32"}, {"send", send}, {"recv", "window 2 offset 0"}};
  };
  EXPECT_EQ(ag::first_disagreement({call("window 1 offset 0"), call("window 1 offset 0")}), "");
  const std::string why = ag::first_disagreement({call("window 1 offset 0"), call("window 1 offset 16396")});
  EXPECT_EQ(why, "send: rank 0 has 'window 1 offset 0', rank 1 has 'window 1 offset 16396'");
}

}  // namespace
