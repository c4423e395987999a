// tests/gpu/allreduce_test.cu — tw::allreduce, tw::reduce_scatter and tw::all_gather against host
// references, one rank per visible GPU (Comm::run_local).
//
//   AllReduceExact   small-integer inputs, so every sum is exact in every dtype: results must equal
//                    the host sum bit for bit. counts {1, 7, 1000003, 64M} x {out-of-place,
//                    in-place} x {auto, oneshot (where it fits the staging), twoshot}, per dtype
//                    and per two-shot variant (TILEWIRE_TWOSHOT_VARIANT unset / "load").
//   AllReduceRandom  non-integer inputs against an fp64 host sum, within a per-dtype tolerance.
//   ReduceScatter / AllGather   exact, per dtype.
// Everywhere: every rank's result is bit-identical, and bytes past the result stay poisoned.
#include <tuple>

#include "common.cuh"

namespace {
using namespace tw_test;
using tw::AllReduceAlgo;
using tw::DType;

constexpr uint64_t kSeed = 0x7157A11;
constexpr AllReduceAlgo kAlgos[] = {AllReduceAlgo::kAuto, AllReduceAlgo::kOneShot, AllReduceAlgo::kTwoShot};

std::string label(DType t, size_t count, bool in_place, AllReduceAlgo a) {
  return std::string(name(t)) + " count " + std::to_string(count) + (in_place ? " in-place " : " out-of-place ") +
         name(a);
}

// ------------------------------------------------------------------------------- exact
class AllReduceExact : public ::testing::TestWithParam<std::tuple<DType, const char*>> {};

TEST_P(AllReduceExact, MatchesHostSumBitForBit) {
  TW_SKIP_UNLESS_GPUS(1);
  const DType dt = std::get<0>(GetParam());
  const std::string variant = std::get<1>(GetParam());
  // Set on this thread before the ranks start: every rank must pick the same kernel.
  ScopedEnv env("TILEWIRE_TWOSHOT_VARIANT", variant == "default" ? nullptr : variant.c_str());
  const int P = team_size();
  const size_t es = tw::dtype_size(dt);
  std::vector<Bytes> got(P);  // one slot per rank, compared after comm.barrier()
  Bytes want;

  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    const size_t os_max = tw::oneshot_max_bytes(comm);  // a forced one-shot must fit the staging
    Stream s;
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000003}, size_t{64} << 20}) {
      if (count > max_test_count()) continue;  // same on every rank
      const size_t bytes = count * es;
      const uint64_t seed = kSeed + count;
      tw::Window send = comm.alloc_window(bytes), recv = comm.alloc_window(bytes);
      if (r == 0) want = exact_sum(dt, count, seed, P);
      comm.barrier();  // rank 0 took its time: no device wait may start before this
      for (bool in_place : {false, true}) {
        for (AllReduceAlgo algo : kAlgos) {
          if (algo == AllReduceAlgo::kOneShot && bytes > os_max) continue;  // same on every rank
          const std::string what = label(dt, count, in_place, algo) + " variant " + variant;
          void* in = in_place ? recv.data() : send.data();
          const tw::AllReduceArgs args{in, recv.data(), count, dt, algo};
          if (algo == AllReduceAlgo::kAuto) {
            EXPECT_EQ(tw::resolve_allreduce_algo(comm, args),
                      bytes <= os_max ? AllReduceAlgo::kOneShot : AllReduceAlgo::kTwoShot)
                << what << ": auto picks one-shot up to " << os_max << " bytes";
          }
          poison(recv.data(), recv.bytes(), s);
          fill(in, dt, count, Fill::kSmallInt, seed, r, s);
          tw::allreduce(comm, args, s);
          comm.sync(s);
          got[r] = to_host(recv.data(), recv.bytes(), s);
          comm.barrier();  // every got[] is complete
          EXPECT_EQ(compare_exact(got[r], want, dt, count), "") << what << ", rank " << r;
          EXPECT_EQ(check_fill(got[r], bytes, recv.bytes(), kPoison, "past the result"), "") << what;
          if (r == 0) {
            EXPECT_EQ(compare_ranks(got, bytes), "") << what;
          }
          comm.barrier();  // nobody refills before everyone has compared
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AllReduceExact,
                         ::testing::Combine(::testing::Values(DType::kBFloat16, DType::kFloat16, DType::kFloat32),
                                            ::testing::Values("default", "load")),
                         [](const auto& info) {
                           return std::string(name(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
                         });

// ------------------------------------------------------------------------------ random
class AllReduceRandom : public ::testing::TestWithParam<DType> {};

// Inputs are random values exactly representable in the dtype (host_ref.hpp: random_exact), so
// the fp64 host sum of the very same values is the reference. Tolerance: fp32 sums in rank order
// err by at most (P-1) * 2^-24 * sum|x|; bf16/fp16 results are additionally rounded once to the
// dtype, within half an ulp; we allow 2 ulps (bf16: relative error <= 2^-7 < 1e-2).
TEST_P(AllReduceRandom, WithinToleranceOfFp64Sum) {
  TW_SKIP_UNLESS_GPUS(1);
  const DType dt = GetParam();
  const int P = team_size();
  const size_t es = tw::dtype_size(dt);
  const int sig_bits = mantissa_bits(dt) + 1;
  std::vector<Bytes> got(P);
  std::vector<double> ref, abs_sum;

  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    const size_t os_max = tw::oneshot_max_bytes(comm);
    Stream s;
    for (size_t count : {size_t{7}, size_t{65539}, size_t{1000003}}) {
      const size_t bytes = count * es;
      const uint64_t seed = kSeed ^ (count << 8);
      tw::Window send = comm.alloc_window(bytes), recv = comm.alloc_window(bytes);
      if (r == 0) {
        ref.assign(count, 0.0);
        abs_sum.assign(count, 0.0);
        for (int q = 0; q < P; ++q) {
          const Bytes x = host_inputs(Fill::kRandom, dt, count, seed, q);
          for (size_t i = 0; i < count; ++i) {
            const double v = from_bits(dt, elem(x, dt, i));
            ref[i] += v;
            abs_sum[i] += std::fabs(v);
          }
        }
      }
      comm.barrier();
      for (bool in_place : {false, true}) {
        for (AllReduceAlgo algo : kAlgos) {
          if (algo == AllReduceAlgo::kOneShot && bytes > os_max) continue;
          const std::string what = label(dt, count, in_place, algo);
          void* in = in_place ? recv.data() : send.data();
          poison(recv.data(), recv.bytes(), s);
          fill(in, dt, count, Fill::kRandom, seed, r, s);
          tw::allreduce(comm, tw::AllReduceArgs{in, recv.data(), count, dt, algo}, s);
          comm.sync(s);
          got[r] = to_host(recv.data(), recv.bytes(), s);
          comm.barrier();
          size_t bad = 0, first = 0;
          double first_got = 0;
          for (size_t i = 0; i < count; ++i) {
            const double g = from_bits(dt, elem(got[r], dt, i));
            double tol = P * std::ldexp(abs_sum[i], -24);
            if (dt != DType::kFloat32) tol += 2 * ulp(ref[i], sig_bits);
            if (!(std::fabs(g - ref[i]) <= tol) && bad++ == 0) first = i, first_got = g;
          }
          EXPECT_EQ(bad, 0u) << what << ", rank " << r << ": first at " << first << " got " << first_got
                             << ", fp64 reference " << ref[first];
          EXPECT_EQ(check_fill(got[r], bytes, recv.bytes(), kPoison, "past the result"), "") << what;
          if (r == 0) {
            EXPECT_EQ(compare_ranks(got, bytes), "") << what;
          }
          comm.barrier();
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AllReduceRandom, ::testing::Values(DType::kBFloat16, DType::kFloat16, DType::kFloat32),
                         [](const auto& info) { return std::string(name(info.param)); });

// ---------------------------------------------------------------- reduce-scatter, all-gather
class ReduceScatterAllGather : public ::testing::TestWithParam<DType> {};

constexpr size_t kRsAgCounts[] = {1, 7, 1000003, (size_t{1} << 24) + 5};

// Rank r's recv (plain device memory) = sum over ranks q of send_q[r*count, (r+1)*count).
TEST_P(ReduceScatterAllGather, ReduceScatterExact) {
  TW_SKIP_UNLESS_GPUS(1);
  const DType dt = GetParam();
  const size_t es = tw::dtype_size(dt);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank(), P = comm.nranks();
    Stream s;
    for (size_t count : kRsAgCounts) {
      const uint64_t seed = kSeed * 3 + count;
      tw::Window send = comm.alloc_window(count * P * es);
      DeviceBuffer recv(count * es + 64);  // 64 bytes of slack must stay poisoned
      const Bytes want = exact_sum(dt, count, seed, P, /*first=*/(uint64_t)r * count);
      comm.barrier();
      poison(recv.data(), recv.bytes, s);
      fill(send.data(), dt, count * P, Fill::kSmallInt, seed, r, s);
      tw::reduce_scatter(comm, send.data(), recv.data(), count, dt, s);
      comm.sync(s);
      const Bytes got = to_host(recv.data(), recv.bytes, s);
      const std::string what = std::string(name(dt)) + " reduce_scatter count " + std::to_string(count);
      EXPECT_EQ(compare_exact(got, want, dt, count), "") << what << ", rank " << r;
      EXPECT_EQ(check_fill(got, count * es, recv.bytes, kPoison, "past the result"), "") << what;
      comm.barrier();  // peers have stopped reading my send window before it is freed
    }
  });
}

// Every rank's recv window = send_0 | send_1 | ... | send_{P-1}, bit-identical on all ranks.
TEST_P(ReduceScatterAllGather, AllGatherExact) {
  TW_SKIP_UNLESS_GPUS(1);
  const DType dt = GetParam();
  const size_t es = tw::dtype_size(dt);
  std::vector<Bytes> got(team_size());
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank(), P = comm.nranks();
    Stream s;
    for (size_t count : kRsAgCounts) {
      const uint64_t seed = kSeed * 5 + count;
      DeviceBuffer send(count * es);
      tw::Window recv = comm.alloc_window(count * P * es);
      Bytes want;
      for (int q = 0; q < P; ++q) {
        const Bytes x = host_inputs(Fill::kRandom, dt, count, seed, q);
        want.insert(want.end(), x.begin(), x.end());
      }
      comm.barrier();
      poison(recv.data(), recv.bytes(), s);
      fill(send.data(), dt, count, Fill::kRandom, seed, r, s);
      tw::all_gather(comm, send.data(), recv.data(), count, dt, s);
      comm.sync(s);
      got[r] = to_host(recv.data(), recv.bytes(), s);
      comm.barrier();
      const std::string what = std::string(name(dt)) + " all_gather count " + std::to_string(count);
      EXPECT_EQ(compare_exact(got[r], want, dt, count * P), "") << what << ", rank " << r;
      EXPECT_EQ(check_fill(got[r], count * P * es, recv.bytes(), kPoison, "past the result"), "") << what;
      if (r == 0) {
        EXPECT_EQ(compare_ranks(got, count * P * es), "") << what;
      }
      comm.barrier();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReduceScatterAllGather,
                         ::testing::Values(DType::kBFloat16, DType::kFloat16, DType::kFloat32),
                         [](const auto& info) { return std::string(name(info.param)); });

}  // namespace
