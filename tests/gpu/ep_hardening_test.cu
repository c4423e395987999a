// tests/gpu/ep_hardening_test.cu — ordinary calls that must not break the EP buffer.
//
//   EpHardening.ConfigAgreedAtCreation   one rank's EpConfig differs from its peers' in one field
//       (hidden, topk, max_tokens_per_rank, num_experts, payload, mode, num_sms in turn): every
//       rank's EpBuffer constructor throws kInvalidArgument naming that field, and the
//       communicator keeps working (a buffer with the same config on every rank is made after).
//   EpHardening.ReadsFollowCallOrder     a dispatch made on stream A behind a long kernel, then
//       num_recv(B) and check(B) on another stream B: they must report that dispatch (its row
//       count; its bad expert id), not the previous call's.
//   EpHardening.LowLatencyNumRecvRefused num_recv() on a low-latency buffer is refused with a
//       message that points to EpLowLatencyRecv::count.
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/device/ptx.cuh"
#include "tilewire/ops/ep.hpp"

namespace {
using namespace tw_test;

// Holds the stream for about `ns` nanoseconds.
__global__ void hold(uint64_t ns) {
  const uint64_t t0 = tw::ptx::globaltimer();
  while (tw::ptx::globaltimer() - t0 < ns) __nanosleep(1000);
}

tw::EpConfig base_config(int P) {
  tw::EpConfig c;
  c.max_tokens_per_rank = 64;
  c.hidden = 1024;
  c.topk = 4;
  c.num_experts = 8 * P;
  return c;
}

TEST(EpHardening, ConfigAgreedAtCreation) {
  TW_SKIP_UNLESS_RANKS(2);
  const int P = team_size();
  struct Change {
    const char* field;
    void (*apply)(tw::EpConfig&);
  };
  const Change changes[] = {
      {"hidden", [](tw::EpConfig& c) { c.hidden = 2048; }},
      {"topk", [](tw::EpConfig& c) { c.topk = 2; }},
      {"max_tokens_per_rank", [](tw::EpConfig& c) { c.max_tokens_per_rank = 32; }},
      {"num_experts", [](tw::EpConfig& c) { c.num_experts *= 2; }},
      {"payload", [](tw::EpConfig& c) { c.payload = tw::EpPayload::kFp8E4M3; }},
      {"mode", [](tw::EpConfig& c) { c.mode = tw::EpMode::kLowLatency; }},
      {"num_sms", [](tw::EpConfig& c) { c.num_sms = 8; }},
  };
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    for (const Change& ch : changes) {
      tw::EpConfig c = base_config(P);
      if (me == P - 1) ch.apply(c);
      const ::testing::AssertionResult r =
          throws_tw([&] { tw::EpBuffer b(comm, c); }, tw::Errc::kInvalidArgument, {ch.field, "rank"});
      if (!r) wrong[me].push_back(std::string(ch.field) + " differing on the last rank: " + r.message());
    }
    // The communicator still works: the same config everywhere makes a buffer that dispatches.
    tw::EpBuffer buf(comm, base_config(P));
    Stream s;
    const int N = 16;
    std::vector<int64_t> ids((size_t)N * 4);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int64_t)((i * 7 + (size_t)me) % (8 * (size_t)P));
    DeviceBuffer x((size_t)N * 1024 * 2), idx(ids.size() * 8), w(ids.size() * 4);
    fill(x.data(), tw::DType::kBFloat16, (size_t)N * 1024, Fill::kRandom, 5, me, s);
    fill(w.data(), tw::DType::kFloat32, ids.size(), Fill::kRandom, 6, me, s);
    upload(idx.data(), ids, s);
    comm.sync(s);
    comm.barrier();
    tw::EpDispatchArgs a;
    a.x = x.data(), a.num_tokens = N, a.topk_idx = idx.data(), a.topk_weights = static_cast<const float*>(w.data());
    buf.dispatch(a, s);
    buf.check(s);
    comm.barrier();
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(EpHardening, ReadsFollowCallOrder) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    const tw::EpConfig cfg = base_config(P);
    tw::EpBuffer buf(comm, cfg);
    Stream a, b;
    const int N = 48;
    // Call 1: every token to expert 0, so rank 0 receives N x P rows and the others none.
    // Call 2: the first N / 2 tokens to the next rank's first expert, the rest nowhere, so
    // every rank receives N / 2 rows: a count no rank had after call 1, at any P.
    std::vector<int64_t> first((size_t)N * cfg.topk, -1), second((size_t)N * cfg.topk, -1);
    for (int t = 0; t < N; ++t) {
      first[(size_t)t * cfg.topk] = 0;
      if (t < N / 2) second[(size_t)t * cfg.topk] = (int64_t)(8 * ((me + 1) % P));
    }
    DeviceBuffer x((size_t)N * cfg.hidden * 2), i1(first.size() * 8), i2(second.size() * 8), i3(second.size() * 8),
        w(first.size() * 4);
    fill(x.data(), tw::DType::kBFloat16, (size_t)N * cfg.hidden, Fill::kRandom, 7, me, a);
    fill(w.data(), tw::DType::kFloat32, first.size(), Fill::kRandom, 8, me, a);
    upload(i1.data(), first, a), upload(i2.data(), second, a);
    std::vector<int64_t> bad = second;
    if (me == P - 1) bad[3 * cfg.topk + 1] = cfg.num_experts + 5;
    upload(i3.data(), bad, a);
    comm.sync(a);
    comm.barrier();
    tw::EpDispatchArgs args;
    args.x = x.data(), args.num_tokens = N, args.topk_weights = static_cast<const float*>(w.data());
    args.topk_idx = i1.data();
    buf.dispatch(args, a);
    const int n1 = buf.num_recv(a);
    const int want1 = me == 0 ? N * P : 0;
    if (n1 != want1) wrong[me].push_back("first dispatch: " + std::to_string(n1) + " rows, expected " + std::to_string(want1));
    comm.barrier();
    // Call 2 on stream a behind a 200 ms kernel; the count is read on stream b.
    hold<<<1, 1, 0, a>>>(200ull * 1000 * 1000);
    args.topk_idx = i2.data();
    buf.dispatch(args, a);
    const int n2 = buf.num_recv(b);
    if (n2 != N / 2)
      wrong[me].push_back("num_recv on another stream: " + std::to_string(n2) + " rows, expected " + std::to_string(N / 2) +
                                     " (the previous call's count is " + std::to_string(want1) + ")");
    comm.sync(a);
    comm.barrier();
    // Call 3 with a bad expert id on the last rank, behind the same kernel; check() on stream b.
    hold<<<1, 1, 0, a>>>(200ull * 1000 * 1000);
    args.topk_idx = i3.data();
    buf.dispatch(args, a);
    const ::testing::AssertionResult r = throws_tw([&] { buf.check(b); }, tw::Errc::kInvalidArgument, {"wrote nothing"});
    if (!r) wrong[me].push_back(std::string("check on another stream after a bad dispatch: ") + r.message());
    comm.sync(a);
    comm.sync(b);
    comm.barrier();
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(EpHardening, LowLatencyNumRecvRefused) {
  TW_SKIP_UNLESS_GPUS(1);
  run_team([&](tw::Comm& comm) {
    tw::EpConfig cfg = base_config(comm.nranks());
    cfg.mode = tw::EpMode::kLowLatency;
    tw::EpBuffer buf(comm, cfg);
    Stream s;
    EXPECT_TRUE(throws_tw([&] { (void)buf.num_recv(s); }, tw::Errc::kInvalidArgument, {"low-latency", "count"}));
    comm.barrier();
  });
}

}  // namespace
