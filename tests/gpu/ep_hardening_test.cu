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
//   EpHardening.LowLatencyCheckAfterReceive  a low-latency dispatch whose routing has a bad expert
//       id on the last rank: check() between dispatch_send and dispatch_recv refuses on every rank
//       alike (a peer's verdict arrives with its counts); after dispatch_recv it throws on every
//       rank that the dispatch wrote nothing.
//   EpHardening.LowLatencyDuplicateExpertRefused  the last rank's token 3 names one expert three
//       times and its token 9 one twice: after dispatch_recv every rank's check() throws (the last
//       rank naming the first repeat, topk_idx[3][2]), no rank's receive counts anything, and the
//       next good dispatch works.
//   EpHardening.EmptyRankAndMixedWeights  the last rank receives no rows and combines with y and
//       weights null (an empty tensor's data pointer); of the others, even ranks pass weights and
//       odd ones none. Every rank's output matches the host reference bitwise (weight x row,
//       rounded once; 1 x row where the expert rank passed none; zeros for tokens routed
//       nowhere). Then rank 0, which did receive rows, passes y null: its check() names the
//       mistake, the rows it owed come back as zeros, and no rank waits. Then the first round
//       again with the layout reused: no error left over, the same outputs.
#include <cmath>
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/ops/ep.hpp"

namespace {
using namespace tw_test;

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
    void (*apply)(tw::EpConfig&, int default_sms);
  };
  const Change changes[] = {
      {"hidden", [](tw::EpConfig& c, int) { c.hidden = 2048; }},
      {"topk", [](tw::EpConfig& c, int) { c.topk = 2; }},
      {"max_tokens_per_rank", [](tw::EpConfig& c, int) { c.max_tokens_per_rank = 32; }},
      {"num_experts", [](tw::EpConfig& c, int) { c.num_experts *= 2; }},
      {"payload", [](tw::EpConfig& c, int) { c.payload = tw::EpPayload::kFp8E4M3; }},
      {"mode", [](tw::EpConfig& c, int) { c.mode = tw::EpMode::kLowLatency; }},
      {"num_sms", [](tw::EpConfig& c, int def) { c.num_sms = def > 1 ? def - 1 : def + 1; }},
  };
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    for (const Change& ch : changes) {
      tw::EpConfig c = base_config(P);
      if (me == P - 1) ch.apply(c, tw::ep_default_sms(c, comm.sm_count()));
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
    hold_stream(a, 200ull * 1000 * 1000);
    args.topk_idx = i2.data();
    buf.dispatch(args, a);
    const int n2 = buf.num_recv(b);
    if (n2 != N / 2)
      wrong[me].push_back("num_recv on another stream: " + std::to_string(n2) + " rows, expected " + std::to_string(N / 2) +
                                     " (the previous call's count is " + std::to_string(want1) + ")");
    comm.sync(a);
    comm.barrier();
    // Call 3 with a bad expert id on the last rank, behind the same kernel; check() on stream b.
    hold_stream(a, 200ull * 1000 * 1000);
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

TEST(EpHardening, LowLatencyCheckAfterReceive) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    tw::EpConfig cfg = base_config(P);
    cfg.mode = tw::EpMode::kLowLatency;
    tw::EpBuffer buf(comm, cfg);
    Stream s;
    const int N = 16;
    std::vector<int64_t> ids((size_t)N * cfg.topk, -1);
    for (int t = 0; t < N; ++t) ids[(size_t)t * cfg.topk] = (int64_t)((t * 5 + me) % cfg.num_experts);
    if (me == P - 1) ids[2 * cfg.topk] = cfg.num_experts + 1;
    DeviceBuffer x((size_t)N * cfg.hidden * 2), idx(ids.size() * 8);
    fill(x.data(), tw::DType::kBFloat16, (size_t)N * cfg.hidden, Fill::kRandom, 12, me, s);
    upload(idx.data(), ids, s);
    comm.sync(s);
    comm.barrier();
    tw::EpLowLatencyArgs a;
    a.x = x.data(), a.num_tokens = N, a.topk_idx = idx.data();
    buf.dispatch_send(a, s);
    if (const auto r = throws_tw([&] { buf.check(s); }, tw::Errc::kInvalidArgument, {"dispatch_recv"}); !r)
      wrong[me].push_back(std::string("check() before dispatch_recv: ") + r.message());
    buf.dispatch_recv(s);
    if (const auto r = throws_tw([&] { buf.check(s); }, tw::Errc::kInvalidArgument, {"wrote nothing"}); !r)
      wrong[me].push_back(std::string("check() after dispatch_recv: ") + r.message());
    comm.sync(s);
    comm.barrier();
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(EpHardening, LowLatencyDuplicateExpertRefused) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    tw::EpConfig cfg = base_config(P);
    cfg.mode = tw::EpMode::kLowLatency;
    tw::EpBuffer buf(comm, cfg);
    Stream s;
    const int N = 16, E = cfg.num_experts;
    std::vector<int64_t> good((size_t)N * cfg.topk);
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < cfg.topk; ++j) good[(size_t)t * cfg.topk + j] = (int64_t)((t * 3 + me + j * (E / cfg.topk)) % E);
    std::vector<int64_t> dup = good;
    // Token 3 names its first expert three times and token 9 twice: the verdict is the first
    // repeat in (token, slot) order, on every run.
    if (me == P - 1) {
      dup[3 * cfg.topk + 2] = dup[3 * cfg.topk + 3] = dup[3 * cfg.topk + 0];
      dup[9 * cfg.topk + 1] = dup[9 * cfg.topk + 0];
    }
    DeviceBuffer x((size_t)N * cfg.hidden * 2), i1(dup.size() * 8), i2(good.size() * 8);
    fill(x.data(), tw::DType::kBFloat16, (size_t)N * cfg.hidden, Fill::kRandom, 13, me, s);
    upload(i1.data(), dup, s), upload(i2.data(), good, s);
    comm.sync(s);
    comm.barrier();
    tw::EpLowLatencyArgs a;
    a.x = x.data(), a.num_tokens = N, a.topk_idx = i1.data();
    buf.dispatch_send(a, s);
    const tw::EpLowLatencyRecv r = buf.dispatch_recv(s);
    const std::vector<const char*> needles =
        me == P - 1 ? std::vector<const char*>{"topk_idx[3][2]", "repeats", "wrote nothing"}
                    : std::vector<const char*>{"wrote nothing"};
    if (const auto res = throws_tw([&] { buf.check(s); }, tw::Errc::kInvalidArgument, needles); !res)
      wrong[me].push_back(std::string("check() after the refused dispatch: ") + res.message());
    const std::vector<int> counts = download<int>(r.count, cfg.num_experts / P, s);
    for (size_t l = 0; l < counts.size(); ++l)
      if (counts[l] != 0) wrong[me].push_back("the refused dispatch counted " + std::to_string(counts[l]) + " rows for local expert " + std::to_string(l));
    comm.sync(s);
    comm.barrier();
    // The buffer still works: a good dispatch, every rank's rows counted (expert e's rows at rank e / L).
    a.topk_idx = i2.data();
    buf.dispatch_send(a, s);
    const tw::EpLowLatencyRecv r2 = buf.dispatch_recv(s);
    try {
      buf.check(s);
    } catch (const tw::Error& e) {
      wrong[me].push_back(std::string("check() after a good dispatch threw: ") + e.what());
    }
    const int L = cfg.num_experts / P;
    std::vector<int> want(L, 0);
    for (int q = 0; q < P; ++q)
      for (int t = 0; t < N; ++t)
        for (int j = 0; j < cfg.topk; ++j) {
          const int e = (t * 3 + q + j * (E / cfg.topk)) % E;
          if (e / L == me) ++want[e % L];
        }
    if (download<int>(r2.count, L, s) != want) wrong[me].push_back("the good dispatch after the refused one counted wrong");
    comm.sync(s);
    comm.barrier();
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(EpHardening, EmptyRankAndMixedWeights) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  constexpr uint64_t kSeedY = 0xE3, kSeedW = 0xE5;
  constexpr int N = 48, H = 1024;
  // Source q's tokens t < N / 2 go to rank d = (q + 1) % P (its first expert) unless d is the last
  // rank; the other tokens go nowhere. So rank d receives N / 2 rows (token r of rank d - 1 at
  // row r), except the last rank, which receives none.
  const auto dest = [&](int q) { return (q + 1) % P == P - 1 ? -1 : (q + 1) % P; };
  const auto y_val = [&](int d, int r, int col) { return random_exact(kSeedY, d, (uint64_t)r * H + col, tw::DType::kBFloat16); };
  const auto w_val = [&](int d, int r) { return random_exact(kSeedW, d, (uint64_t)r, tw::DType::kFloat32); };
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    const tw::EpConfig cfg = base_config(P);
    tw::EpBuffer buf(comm, cfg);
    Stream s;
    std::vector<int64_t> ids((size_t)N * cfg.topk, -1);
    for (int t = 0; t < N / 2; ++t)
      if (dest(me) >= 0) ids[(size_t)t * cfg.topk] = (int64_t)(8 * dest(me));
    const bool receives = P > 1 && me != P - 1;  // rank me - 1 sends to me
    std::vector<uint16_t> y((size_t)(N / 2) * H);
    std::vector<float> w(N / 2);
    for (int r = 0; r < N / 2; ++r) {
      for (int col = 0; col < H; ++col) y[(size_t)r * H + col] = f32_to_bf16(y_val(me, r, col));
      w[r] = w_val(me, r);
    }
    DeviceBuffer x((size_t)N * H * 2), idx(ids.size() * 8), tw_((size_t)N * cfg.topk * 4), yd(y.size() * 2), wd(w.size() * 4),
        out((size_t)N * H * 2);
    fill(x.data(), tw::DType::kBFloat16, (size_t)N * H, Fill::kRandom, 9, me, s);
    fill(tw_.data(), tw::DType::kFloat32, (size_t)N * cfg.topk, Fill::kRandom, 10, me, s);
    upload(idx.data(), ids, s), upload(yd.data(), y, s), upload(wd.data(), w, s);
    comm.sync(s);
    comm.barrier();
    tw::EpDispatchArgs a;
    a.x = x.data(), a.num_tokens = N, a.topk_idx = idx.data(), a.topk_weights = static_cast<const float*>(tw_.data());
    for (int phase = 0; phase < 3; ++phase) {
      const std::string label = phase == 0 ? "empty rank, mixed weights: "
                                : phase == 1 ? "rank 0 without y: "
                                             : "again, the layout reused: ";
      a.reuse_layout = phase == 2;  // no layout() in between: the last combine's mistake must not stick
      buf.dispatch(a, s);
      buf.check(s);
      const int n = buf.num_recv(s);
      if (n != (receives ? N / 2 : 0)) wrong[me].push_back(label + std::to_string(n) + " rows received");
      poison(out.data(), out.bytes, s);
      comm.sync(s);
      comm.barrier();
      const bool no_y = !receives || (phase == 1 && me == 0);
      const bool weighted = me % 2 == 0 && !no_y;
      buf.combine(no_y ? nullptr : yd.data(), weighted ? static_cast<const float*>(wd.data()) : nullptr, out.data(), s);
      if (phase == 1 && me == 0 && receives) {
        const ::testing::AssertionResult r = throws_tw([&] { buf.check(s); }, tw::Errc::kInvalidArgument, {"y is null", "24 rows"});
        if (!r) wrong[me].push_back(label + "check(): " + r.message());
      } else {
        try {
          buf.check(s);
        } catch (const tw::Error& e) {
          wrong[me].push_back(label + "check() threw: " + e.what());
        }
      }
      // Reference: token t's row went to d = dest(me), where it is row t.
      const int d = dest(me);
      const bool zeros = d < 0 || (phase == 1 && d == 0);
      std::vector<uint16_t> ref((size_t)N * H, 0);
      for (int t = 0; t < N / 2 && !zeros; ++t)
        for (int col = 0; col < H; ++col) {
          const float wt = d % 2 == 0 ? w_val(d, t) : 1.0f;
          ref[(size_t)t * H + col] = f32_to_bf16(std::fma(wt, y_val(d, t, col), 0.0f));
        }
      const std::vector<uint16_t> got = download<uint16_t>(out.data(), (size_t)N * H, s);
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != ref[i] && bad++ == 0) first = i;
      if (bad) wrong[me].push_back(label + std::to_string(bad) + " output elements differ, first at " + std::to_string(first));
      comm.barrier();
    }
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

}  // namespace
