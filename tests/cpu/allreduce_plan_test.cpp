// All-reduce planning without a GPU (ops/allreduce.hpp): algorithm choice, argument checks with
// their reasons, algorithm names.
#include <cstdint>

#include "cpu_util.hpp"
#include "tilewire/ops/allreduce.hpp"

namespace {
using tw::AllReduceAlgo;
using tw::AllReduceArgs;
using tw::DType;
using tw_test::contains;

constexpr size_t kMax = 512 * 1024;  // TILEWIRE_ONESHOT_MAX_BYTES' default

// Fake, never dereferenced device addresses with chosen alignment.
void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }
constexpr uintptr_t kSend = 0x7f0000000000, kRecv = 0x7f0001000000;

AllReduceArgs args(uintptr_t send, uintptr_t recv, size_t count, DType t = DType::kBFloat16,
                   AllReduceAlgo a = AllReduceAlgo::kAuto) {
  return AllReduceArgs{at(send), at(recv), count, t, a};
}

TEST(AllReducePlan, ChoosesOneShotUpToTheLimitThenTwoShot) {
  for (int p : {1, 2, 4, 8}) {
    EXPECT_EQ(tw::choose_allreduce_algo(0, p, kMax), AllReduceAlgo::kOneShot);
    EXPECT_EQ(tw::choose_allreduce_algo(16, p, kMax), AllReduceAlgo::kOneShot);
    EXPECT_EQ(tw::choose_allreduce_algo(kMax - 1, p, kMax), AllReduceAlgo::kOneShot);
    EXPECT_EQ(tw::choose_allreduce_algo(kMax, p, kMax), AllReduceAlgo::kOneShot) << "the limit is inclusive";
    EXPECT_EQ(tw::choose_allreduce_algo(kMax + 1, p, kMax), AllReduceAlgo::kTwoShot);
    EXPECT_EQ(tw::choose_allreduce_algo(size_t{1} << 30, p, kMax), AllReduceAlgo::kTwoShot);
  }
  EXPECT_EQ(tw::choose_allreduce_algo(64 << 10, 2, 32 << 10), AllReduceAlgo::kTwoShot) << "follows the limit given";
}

TEST(AllReducePlan, AcceptsValidArguments) {
  for (DType t : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    EXPECT_TRUE(tw::check_allreduce_args(args(kSend, kRecv, 1 << 20, t), 2, kMax).ok);
    EXPECT_TRUE(tw::check_allreduce_args(args(kSend, kSend, 7, t), 2, kMax).ok) << "in-place";
  }
  EXPECT_TRUE(tw::check_allreduce_args(args(kSend, kSend + 2048, 1024), 2, kMax).ok) << "adjacent, no overlap";
  EXPECT_TRUE(
      tw::check_allreduce_args(args(kSend, kRecv, kMax / 2, DType::kBFloat16, AllReduceAlgo::kOneShot), 2, kMax).ok)
      << "one-shot exactly at the limit";
  EXPECT_TRUE(tw::check_allreduce_args(args(kSend, kRecv, 8, DType::kFloat32, AllReduceAlgo::kTwoShot), 8, kMax).ok)
      << "two-shot may be forced for small sizes";
}

TEST(AllReducePlan, CountZeroIsANoOpWhateverThePointers) {
  EXPECT_TRUE(tw::check_allreduce_args(args(0, 0, 0), 2, kMax).ok);
  EXPECT_TRUE(tw::check_allreduce_args(args(kSend + 8, kSend + 4, 0), 2, kMax).ok);
}

struct Reject {
  const char* what;
  AllReduceArgs a;
  int nranks;
  const char* reason;  // a substring of Status::reason
};

TEST(AllReducePlan, RejectsWithAReason) {
  const Reject cases[] = {
      {"null send", args(0, kRecv, 16), 2, "send is null"},
      {"null recv", args(kSend, 0, 16), 2, "recv is null"},
      {"send misaligned by 8", args(kSend + 8, kRecv, 16), 2, "send is not 16-byte aligned"},
      {"recv misaligned by 8", args(kSend, kRecv + 8, 16), 2, "recv is not 16-byte aligned"},
      {"partial overlap", args(kSend, kSend + 16, 1024), 2, "overlap"},
      {"partial overlap, recv first", args(kSend + 16, kSend, 1024), 2, "overlap"},
      {"one-shot forced above the staging", args(kSend, kRecv, kMax / 2 + 8, DType::kBFloat16, AllReduceAlgo::kOneShot),
       2, "one-shot"},
      {"unknown dtype", args(kSend, kRecv, 16, static_cast<DType>(9)), 2, "dtype"},
      {"count * size overflows", args(kSend, kRecv, SIZE_MAX / 2 + 1, DType::kFloat32), 2, "overflow"},
      {"no ranks", args(kSend, kRecv, 16), 0, "no ranks"},
  };
  for (const Reject& c : cases) {
    const tw::Status s = tw::check_allreduce_args(c.a, c.nranks, kMax);
    EXPECT_FALSE(s.ok) << c.what;
    EXPECT_FALSE(static_cast<bool>(s)) << c.what;
    EXPECT_TRUE(contains(s.reason, c.reason)) << c.what;
  }
}

TEST(AllReducePlan, OneShotRejectionSaysHowToFixIt) {
  const tw::Status s =
      tw::check_allreduce_args(args(kSend, kRecv, kMax, DType::kFloat32, AllReduceAlgo::kOneShot), 2, kMax);
  ASSERT_FALSE(s.ok);
  EXPECT_TRUE(contains(s.reason, std::to_string(kMax * 4)));  // the size asked for
  EXPECT_TRUE(contains(s.reason, std::to_string(kMax)));      // the limit
  EXPECT_TRUE(contains(s.reason, "TILEWIRE_ONESHOT_MAX_BYTES"));
}

TEST(AllReducePlan, AlgoNames) {
  EXPECT_STREQ(tw::algo_name(AllReduceAlgo::kAuto), "auto");
  EXPECT_STREQ(tw::algo_name(AllReduceAlgo::kOneShot), "oneshot");
  EXPECT_STREQ(tw::algo_name(AllReduceAlgo::kTwoShot), "twoshot");
  for (AllReduceAlgo a : {AllReduceAlgo::kAuto, AllReduceAlgo::kOneShot, AllReduceAlgo::kTwoShot})
    EXPECT_EQ(tw::parse_algo(tw::algo_name(a)), a);
  EXPECT_EQ(tw::parse_algo("one-shot"), AllReduceAlgo::kOneShot);
  EXPECT_EQ(tw::parse_algo("1"), AllReduceAlgo::kOneShot);
  EXPECT_EQ(tw::parse_algo("two-shot"), AllReduceAlgo::kTwoShot);
  EXPECT_EQ(tw::parse_algo("2"), AllReduceAlgo::kTwoShot);
  for (const char* bad : {"", "three", "ring", "0", "one shot"}) EXPECT_FALSE(tw::parse_algo(bad).has_value()) << bad;
}

// reduce_scatter / all_gather: sizes that overflow once multiplied by the ranks, send and recv
// that overlap (neither op runs in place), and the ordinary rejections, each with its reason.
TEST(AllReducePlan, ScatterGatherArguments) {
  using tw::ScatterGather;
  for (ScatterGather op : {ScatterGather::kReduceScatter, ScatterGather::kAllGather}) {
    const char* name = op == ScatterGather::kReduceScatter ? "reduce_scatter" : "all_gather";
    auto check = [&](uintptr_t s, uintptr_t r, size_t n, int P, DType t = DType::kBFloat16) {
      return tw::check_scatter_gather_args(op, at(s), at(r), n, t, P);
    };
    EXPECT_TRUE(check(kSend, kRecv, 1000, 8).ok) << name;
    EXPECT_TRUE(check(0, 0, 0, 8).ok) << name << ": zero elements: nothing to do, nothing written";
    const tw::Status over = check(kSend, kRecv, SIZE_MAX / 2 / 4 + 1, 4);
    EXPECT_FALSE(over.ok) << name;
    EXPECT_TRUE(contains(over.reason, "overflows")) << over.reason;
    EXPECT_TRUE(contains(over.reason, name)) << over.reason;
    // The bigger side is count x ranks elements: recv inside send (reduce-scatter) or send inside
    // recv (all-gather) overlaps; so does the same pointer.
    const size_t n = 4096;
    const uintptr_t inside = op == ScatterGather::kReduceScatter ? kSend + n * 2 : kRecv + n * 2;
    const tw::Status o1 = op == ScatterGather::kReduceScatter ? check(kSend, inside, n, 4) : check(inside, kRecv, n, 4);
    EXPECT_FALSE(o1.ok) << name;
    EXPECT_TRUE(contains(o1.reason, "overlap")) << o1.reason;
    EXPECT_FALSE(check(kSend, kSend, n, 2).ok) << name << ": in place is refused";
    // Just past the bigger side: disjoint.
    const tw::Status ok = op == ScatterGather::kReduceScatter ? check(kSend, kSend + n * 2 * 4, n, 4)
                                                              : check(kRecv + n * 2 * 4, kRecv, n, 4);
    EXPECT_TRUE(ok.ok) << name << ": " << ok.reason;
    EXPECT_FALSE(check(kSend + 8, kRecv, n, 4).ok) << name << ": misaligned send";
    EXPECT_FALSE(check(kSend, 0, n, 4).ok) << name << ": null recv";
    EXPECT_FALSE(check(kSend, kRecv, n, 0).ok) << name << ": no ranks";
    EXPECT_FALSE(check(kSend, kRecv, n, 4, static_cast<DType>(9)).ok) << name << ": unknown dtype";
  }
}

}  // namespace
