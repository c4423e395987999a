// tests/gpu/ep_test.cu — MoE dispatch and combine (tilewire/ops/ep.hpp) against a host reference
// built from the same inputs. Every rank generates every rank's inputs from seeds (so each can
// build the whole reference itself), on the test team (real ranks or TILEWIRE_TEST_VIRTUAL).
//
//   Ep.DispatchCombineMatchTheReference   per routing (uniform, skewed, all to rank 0) and payload
//       (bf16 at hidden 2048 and 7168, fp8 at 7168), and two cases at the limits (8192 tokens on a
//       rank, top-16 of up to 512 experts; fp8 at hidden 8192): ranks with 0, 97, 256 and 300 tokens,
//       some top-k entries -1 and some tokens with all -1. Layout counts exact; received rows,
//       scales, local ids, weights and sources bitwise in (source rank, source token) order;
//       per-expert counts with alignment padding exact; combine (weighted and not) bitwise
//       against a fixed-order fp32 host sum; a second dispatch + combine bit-identical.
//   Ep.BadInputWritesNothing    bad configs refused at creation; a wrong payload and too many
//       tokens refused before launch; an expert id out of range on one rank makes check() throw
//       on every rank and leaves every rank's received rows untouched. The slot combine's calls
//       are refused on a buffer made without combine_slots, that config without expert-major
//       places, and after a dispatch that did not store rows at their places.
//   Ep.GraphReplayIsBitIdentical  dispatch + combine captured in a CUDA graph, replayed three times
//       over poisoned outputs: rows and output bit-identical to the eager calls.
//   EpDeathTest.PeerNeverJoins  rank 0 dispatches alone: its wait ends in the diagnostic (on a
//       virtual team with each rank's last call: rank 0's dispatch, none on rank 1).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common.cuh"
#include "tilewire/ops/ep.hpp"

namespace {
using namespace tw_test;
using tw::EpPayload;


enum class Routing { kUniform, kSkewed, kAllToRank0 };
const char* name(Routing r) { return r == Routing::kUniform ? "uniform" : r == Routing::kSkewed ? "skewed" : "all-to-rank-0"; }

struct Case {
  int hidden;
  EpPayload payload;
  Routing routing;
  uint64_t seed;
  int topk = 8, L = 32;                              // experts per token; experts per rank
  int max_tokens = 320;
  std::array<int, 4> tokens = {256, 0, 97, 300};     // rank r sends tokens[r % 4]
};

// One rank's inputs, generated the same on every host thread.
struct Input {
  int N = 0;
  std::vector<uint8_t> x;        // [N, row_bytes]
  std::vector<float> scales;     // fp8: [N, H / 128]
  std::vector<int64_t> idx;      // [N, topk]
  std::vector<float> w;          // [N, topk]
};

Input make_input(const Case& c, int rank, int P) {
  Input in;
  in.N = c.tokens[rank % 4];
  const int E = c.L * P;
  const size_t rb = c.payload == EpPayload::kBFloat16 ? (size_t)c.hidden * 2 : (size_t)c.hidden;
  in.x.resize((size_t)in.N * rb);
  for (size_t i = 0; i < in.x.size(); i += 8) {
    const uint64_t v = mix(c.seed, rank, i / 8);
    std::memcpy(in.x.data() + i, &v, std::min<size_t>(8, in.x.size() - i));
  }
  for (int t = 0; t < in.N; ++t) {  // rank- and token-coded first bytes of each row
    uint8_t* row = in.x.data() + (size_t)t * rb;
    row[0] = (uint8_t)rank, row[1] = (uint8_t)(t & 0xFF), row[2] = (uint8_t)(t >> 8);
  }
  if (c.payload == EpPayload::kFp8E4M3) {
    in.scales.resize((size_t)in.N * c.hidden / 128);
    for (size_t i = 0; i < in.scales.size(); ++i) in.scales[i] = random_exact(c.seed + 7, rank, i, tw::DType::kFloat32);
  }
  in.idx.assign((size_t)in.N * c.topk, -1);
  in.w.resize((size_t)in.N * c.topk);
  for (int t = 0; t < in.N; ++t) {
    const uint64_t h = mix(c.seed + 11, rank, (uint64_t)t);
    if (h % 17 == 0) continue;  // a token with no expert at all
    std::vector<int64_t> picked;
    for (int j = 0, tries = 0; j < c.topk && tries < 64; ++tries) {
      const uint64_t u = mix(c.seed + 13, rank, (uint64_t)t * 64 + tries);
      int64_t e;
      if (c.routing == Routing::kUniform) e = (int64_t)(u % E);
      else if (c.routing == Routing::kSkewed) {
        const double f = (double)(u % 1000003) / 1000003.0;
        e = std::min<int64_t>(E - 1, (int64_t)(E * f * f * f));
      } else e = (int64_t)(u % c.L);  // every expert on rank 0
      if (std::find(picked.begin(), picked.end(), e) != picked.end()) continue;
      picked.push_back(e);
      in.idx[(size_t)t * c.topk + j] = (u >> 40) % 9 == 0 ? -1 : e;  // some entries -1
      ++j;
    }
  }
  for (size_t i = 0; i < in.w.size(); ++i) in.w[i] = random_exact(c.seed + 17, rank, i, tw::DType::kFloat32);
  return in;
}

// What rank d must receive: rows in (source rank, source token) order.
struct Expected {
  std::vector<int> src_rank, src_token;
  std::vector<uint8_t> x;
  std::vector<float> scales, w;
  std::vector<int32_t> idx;
  std::vector<int> per_expert;  // padded
};

bool goes_to(const Input& in, int t, int d, int topk, int L) {
  for (int j = 0; j < topk; ++j) {
    const int64_t e = in.idx[(size_t)t * topk + j];
    if (e >= 0 && e / L == d) return true;
  }
  return false;
}

Expected expect_at(const std::vector<Input>& all, const Case& c, int d, int alignment) {
  Expected x;
  const size_t nsc = c.payload == EpPayload::kFp8E4M3 ? c.hidden / 128 : 0;
  const size_t row_bytes = c.payload == EpPayload::kBFloat16 ? (size_t)c.hidden * 2 : (size_t)c.hidden;
  x.per_expert.assign(c.L, 0);
  for (size_t s = 0; s < all.size(); ++s)
    for (int t = 0; t < all[s].N; ++t) {
      for (int j = 0; j < c.topk; ++j) {
        const int64_t e = all[s].idx[(size_t)t * c.topk + j];
        if (e >= 0 && e / c.L == d) ++x.per_expert[e % c.L];
      }
      if (!goes_to(all[s], t, d, c.topk, c.L)) continue;
      x.src_rank.push_back((int)s);
      x.src_token.push_back(t);
      x.x.insert(x.x.end(), all[s].x.begin() + (size_t)t * row_bytes, all[s].x.begin() + (size_t)(t + 1) * row_bytes);
      for (size_t k = 0; k < nsc; ++k) x.scales.push_back(all[s].scales[(size_t)t * nsc + k]);
      for (int j = 0; j < c.topk; ++j) {
        const int64_t e = all[s].idx[(size_t)t * c.topk + j];
        const bool here = e >= 0 && e / c.L == d;
        x.idx.push_back(here ? (int32_t)(e % c.L) : -1);
        x.w.push_back(here ? all[s].w[(size_t)t * c.topk + j] : 0.0f);
      }
    }
  for (int& n : x.per_expert) n = (n + alignment - 1) / alignment * alignment;
  return x;
}

// Rank d's combine input: row r of y (bf16 bits) and its weight.
uint16_t y_bits(uint64_t seed, int d, size_t r, int col, int H) {
  return f32_to_bf16(random_exact(seed + 23, d, r * H + col, tw::DType::kBFloat16));
}
float y_weight(uint64_t seed, int d, size_t r) { return random_exact(seed + 29, d, r, tw::DType::kFloat32); }


// "" or the first difference of two arrays, by name.
template <class T>
std::string diff(const char* what, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return std::string(what) + ": " + std::to_string(got.size()) + " elements, expected " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) return std::string(what) + ": first difference at " + std::to_string(i);
  return "";
}

TEST(Ep, DispatchCombineMatchTheReference) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<Case> cases;
  uint64_t seed = 1000;
  for (Routing r : {Routing::kUniform, Routing::kSkewed, Routing::kAllToRank0}) {
    cases.push_back({2048, EpPayload::kBFloat16, r, seed++});
    cases.push_back({7168, EpPayload::kBFloat16, r, seed++});
    cases.push_back({7168, EpPayload::kFp8E4M3, r, seed++});
  }
  // The limits users run: 8192 tokens on a rank, top-16 of up to 512 experts, hidden 8192.
  // TILEWIRE_TEST_EP_LIMITS=0 leaves these two out: on virtual nodes, whose windows are host
  // memory, they move over a GiB per rank through the emulated GIN (27-60 s per run), so the
  // many-seed GIN runs take them under their first seed only (scripts/gpu_run.sh gin).
  const char* limits = std::getenv("TILEWIRE_TEST_EP_LIMITS");
  if (limits && std::string(limits) == "0") {
    std::printf("[ ep limits ] the 8192-token and hidden-8192 cases left out (TILEWIRE_TEST_EP_LIMITS=0)\n");
  } else {
    Case big{4096, EpPayload::kBFloat16, Routing::kUniform, seed++};
    big.topk = 16, big.L = 512 / std::max(P, 1) >= 16 ? 512 / P : 16, big.max_tokens = 8192, big.tokens = {8192, 1, 0, 2500};
    cases.push_back(big);
    Case wide{8192, EpPayload::kFp8E4M3, Routing::kSkewed, seed++};
    wide.max_tokens = 512, wide.tokens = {512, 300, 7, 0};
    cases.push_back(wide);
  }
  std::vector<std::vector<std::string>> wrong(P);
  // Every rank's combine rows of the current round, each written by its rank before the barrier
  // ahead of the combine and read by every rank's reference after it: a rank's reference then
  // reads its peers' rows instead of hashing them again.
  std::vector<std::vector<uint16_t>> ys(P);
  const auto report = [&] {  // also when the team fails: what was found wrong before says why
    for (int q = 0; q < P; ++q)
      for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
  };
  try {
    run_team([&](tw::Comm& comm) {
      const int me = comm.rank();
      std::vector<std::string>& bad = wrong[me];
      Stream s;
      for (const Case& c : cases) {
        const std::string label = std::string(name(c.routing)) + " hidden " + std::to_string(c.hidden) +
                                  (c.payload == EpPayload::kBFloat16 ? " bf16" : " fp8") + ": ";
        tw::EpConfig cfg;
        cfg.max_tokens_per_rank = c.max_tokens;
        cfg.hidden = c.hidden;
        cfg.topk = c.topk;
        cfg.num_experts = c.L * P;
        cfg.payload = c.payload;
        cfg.expert_alignment = c.routing == Routing::kSkewed ? 4 : 1;
        tw::EpBuffer buf(comm, cfg);
        std::vector<Input> all;
        for (int q = 0; q < P; ++q) all.push_back(make_input(c, q, P));
        const Input& in = all[me];
        const size_t rb = tw::ep_row_bytes(cfg), nsc = tw::ep_scale_bytes(cfg) / 4;
        DeviceBuffer x(std::max<size_t>(in.x.size(), 16)), sc(std::max<size_t>(in.scales.size() * 4, 16)),
            idx(std::max<size_t>(in.idx.size() * 8, 16)), w(std::max<size_t>(in.w.size() * 4, 16));
        upload(x.data(), in.x, s), upload(sc.data(), in.scales, s), upload(idx.data(), in.idx, s),
            upload(w.data(), in.w, s);
        tw::EpDispatchArgs a;
        a.x = x.data();
        a.x_scales = nsc ? static_cast<const float*>(sc.data()) : nullptr;
        a.payload = c.payload;
        a.num_tokens = in.N;
        a.topk_idx = idx.data();
        a.topk_weights = static_cast<const float*>(w.data());
        const Expected want = expect_at(all, c, me, cfg.expert_alignment);
        const int n_want = (int)want.src_rank.size();
        // Combine's buffers, for as many rows as the buffer can receive. Every allocation is made
        // before the barrier: a faster rank's first dispatch must not spin while this rank allocates
        // (on a virtual team the ranks share the device).
        DeviceBuffer yd(std::max<size_t>((size_t)cfg.max_tokens_per_rank * P * c.hidden * 2, 16)),
            ywd(std::max<size_t>((size_t)cfg.max_tokens_per_rank * P * 4, 16)), out(std::max<size_t>((size_t)in.N * c.hidden * 2, 16));
        comm.sync(s);
        comm.barrier();
        for (int round = 0; round < 2; ++round) {
          const tw::EpRecv r = buf.dispatch(a, s);
          buf.check(s);
          const int n = buf.num_recv(s);
          // A wrong count is reported and the rank goes on: it must keep making the team's calls.
          if (n != n_want)
            bad.push_back(label + "received " + std::to_string(n) + " rows, expected " + std::to_string(n_want));
          // Layout of this rank's own tokens.
          const tw::EpLayoutView lv = buf.layout_view();
          std::vector<int> tpr(P, 0), tpe(cfg.num_experts, 0);
          std::vector<uint8_t> inr((size_t)in.N * P, 0);
          for (int t = 0; t < in.N; ++t) {
            for (int d = 0; d < P; ++d) {
              inr[(size_t)t * P + d] = goes_to(in, t, d, c.topk, c.L);
              tpr[d] += inr[(size_t)t * P + d];
            }
            for (int j = 0; j < c.topk; ++j)
              if (in.idx[(size_t)t * c.topk + j] >= 0) ++tpe[in.idx[(size_t)t * c.topk + j]];
          }
          for (const std::string& e :
               {diff("tokens_per_rank", download<int>(lv.tokens_per_rank, P, s), tpr),
                diff("tokens_per_expert", download<int>(lv.tokens_per_expert, cfg.num_experts, s), tpe),
                diff("token_in_rank", download<uint8_t>(lv.token_in_rank, inr.size(), s), inr),
                diff("recv x", download<uint8_t>(r.x, (size_t)n * rb, s), want.x),
                diff("recv scales", download<float>(r.x_scales, (size_t)n * nsc, s), want.scales),
                diff("recv topk_idx", download<int32_t>(r.topk_idx, (size_t)n * c.topk, s), want.idx),
                diff("recv topk_weights", download<float>(r.topk_weights, (size_t)n * c.topk, s), want.w),
                diff("recv src_rank", download<int32_t>(r.src_rank, n, s), want.src_rank),
                diff("recv src_token", download<int32_t>(r.src_token, n, s), want.src_token),
                diff("recv tokens_per_expert", download<int>(r.tokens_per_expert, c.L, s), want.per_expert)})
            if (!e.empty()) bad.push_back(label + "round " + std::to_string(round) + ": " + e);
          // Combine: this rank's y rows and weights; the reference sums every rank's rows of each
          // of this rank's tokens in rank order.
          const bool weighted = round == 1;
          std::vector<uint16_t>& y = ys[me];
          y.assign((size_t)n * c.hidden, 0);
          std::vector<float> yw(n);
          for (int row = 0; row < n; ++row) {
            for (int col = 0; col < c.hidden; ++col)
              y[(size_t)row * c.hidden + col] = y_bits(c.seed, me, row, col, c.hidden);
            yw[row] = y_weight(c.seed, me, row);
          }
          upload(yd.data(), y, s), upload(ywd.data(), yw, s);
          poison(out.data(), out.bytes, s);
          // Every rank's copies are done before any rank's combine waits for its peers: on a
          // virtual team the ranks share the device, and compute-sanitizer orders a copy behind
          // a running kernel (a peer's spinning combine would stall this rank's upload).
          comm.sync(s);
          comm.barrier();
          buf.combine(yd.data(), weighted ? static_cast<const float*>(ywd.data()) : nullptr, out.data(), s);
          std::vector<uint16_t> ref((size_t)in.N * c.hidden);
          std::vector<std::vector<int>> row_at(P);  // row of (me, t) at rank d: after every earlier source's rows
          for (int d = 0; d < P; ++d) {
            row_at[d].assign(in.N, -1);
            int k = 0;
            for (int q = 0; q < P; ++q)
              for (int t = 0; t < all[q].N; ++t)
                if (goes_to(all[q], t, d, c.topk, c.L)) {
                  if (q == me) row_at[d][t] = k;
                  ++k;
                }
          }
          for (int t = 0; t < in.N; ++t)
            for (int col = 0; col < c.hidden; ++col) {
              float acc = 0.0f;
              for (int d = 0; d < P; ++d) {
                const int k = row_at[d][t];
                if (k < 0) continue;
                // ys[d] holds rank d's rows (y_bits), as many as it received: a wrong count
                // there (reported by rank d) must not take this read past them.
                const size_t at = (size_t)k * c.hidden + col;
                const float v = bf16_to_f32(at < ys[d].size() ? ys[d][at] : y_bits(c.seed, d, k, col, c.hidden));
                acc = weighted ? std::fma(y_weight(c.seed, d, k), v, acc) : acc + v;
              }
              ref[(size_t)t * c.hidden + col] = f32_to_bf16(acc);
            }
          const std::vector<uint16_t> got = download<uint16_t>(out.data(), (size_t)in.N * c.hidden, s);
          if (std::string e = diff(weighted ? "combine (weighted)" : "combine", got, ref); !e.empty())
            bad.push_back(label + e);
          comm.barrier();  // every rank has read its rows before the next dispatch overwrites them
        }
      }
    });
  } catch (...) {
    report();
    throw;
  }
  report();
}

TEST(Ep, BadInputWritesNothing) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    std::vector<std::string>& bad = wrong[me];
    Stream s;
    tw::EpConfig cfg;
    cfg.max_tokens_per_rank = 64;
    cfg.hidden = 1024;
    cfg.topk = 4;
    cfg.num_experts = 8 * P;
    auto expect = [&](const char* what, const std::function<void()>& f, tw::Errc code, std::vector<const char*> needles) {
      if (const ::testing::AssertionResult r = throws_tw(f, code, needles); !r) bad.push_back(std::string(what) + ": " + r.message());
    };
    {
      tw::EpConfig c = cfg;
      c.hidden = 1020;  // 2040-byte rows
      expect("hidden", [&] { tw::EpBuffer b(comm, c); }, tw::Errc::kInvalidArgument, {"not a multiple of 16"});
      c = cfg, c.topk = 17;
      expect("topk", [&] { tw::EpBuffer b(comm, c); }, tw::Errc::kInvalidArgument, {"topk 17"});
    }
    tw::EpBuffer buf(comm, cfg);
    const int N = 48;
    DeviceBuffer x((size_t)N * cfg.hidden * 2), idx((size_t)N * cfg.topk * 8), w((size_t)N * cfg.topk * 4);
    fill(x.data(), tw::DType::kBFloat16, (size_t)N * cfg.hidden, Fill::kRandom, 3, me, s);
    std::vector<int64_t> ids((size_t)N * cfg.topk);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int64_t)(mix(5, me, i) % cfg.num_experts);
    upload(idx.data(), ids, s);
    fill(w.data(), tw::DType::kFloat32, (size_t)N * cfg.topk, Fill::kRandom, 4, me, s);
    tw::EpDispatchArgs a;
    a.x = x.data(), a.num_tokens = N, a.topk_idx = idx.data(), a.topk_weights = static_cast<const float*>(w.data());
    comm.sync(s);
    comm.barrier();  // every rank's allocations are made before any rank's kernel waits for it
    const tw::EpRecv r = buf.dispatch(a, s);  // a good one: where the rows land
    buf.check(s);
    const size_t rx_bytes = (size_t)r.capacity * cfg.hidden * 2;
    poison(r.x, rx_bytes, s);
    tw::EpDispatchArgs wrong_payload = a;
    wrong_payload.payload = EpPayload::kFp8E4M3;
    expect("payload", [&] { buf.dispatch(wrong_payload, s); }, tw::Errc::kInvalidArgument, {"payload", "fp8", "bf16"});
    tw::EpDispatchArgs too_many = a;
    too_many.num_tokens = 65;
    expect("tokens", [&] { buf.dispatch(too_many, s); }, tw::Errc::kInvalidArgument, {"65 tokens", "at most 64"});
    // An expert id out of range on the last rank: every rank's check() throws, nothing lands.
    if (me == P - 1) {
      ids[7 * cfg.topk + 2] = cfg.num_experts + 3;
      upload(idx.data(), ids, s);
    }
    comm.sync(s);
    comm.barrier();
    buf.dispatch(a, s);
    const std::string val = std::to_string(cfg.num_experts + 3);
    if (me == P - 1)
      expect("bad id", [&] { buf.check(s); }, tw::Errc::kInvalidArgument, {"topk_idx[7][2]", val.c_str(), "wrote nothing"});
    else
      expect("bad id (peer)", [&] { buf.check(s); }, tw::Errc::kInvalidArgument,
             {(std::string("rank ") + std::to_string(P - 1)).c_str(), "wrote nothing"});
    const std::vector<uint8_t> rows = download<uint8_t>(r.x, rx_bytes, s);
    if (std::any_of(rows.begin(), rows.end(), [](uint8_t b) { return b != kPoison; }))
      bad.push_back("the rejected dispatch wrote received rows");
    if (buf.num_recv(s) != 0) bad.push_back("the rejected dispatch reported rows received");
    // A combine after the rejected dispatch: no rows to return, every rank completes it and
    // writes nothing (GIN peers are sent empty shares, not shares of an earlier call's layout).
    DeviceBuffer out((size_t)N * cfg.hidden * 2);
    poison(out.data(), out.bytes, s);
    comm.sync(s);
    comm.barrier();
    buf.combine(r.x, nullptr, out.data(), s);
    expect("combine after the rejected dispatch", [&] { buf.check(s); }, tw::Errc::kInvalidArgument, {"wrote nothing"});
    const std::vector<uint8_t> o = download<uint8_t>(out.data(), out.bytes, s);
    if (std::any_of(o.begin(), o.end(), [](uint8_t b) { return b != kPoison; }))
      bad.push_back("the combine after the rejected dispatch wrote its output");
    // The slot combine: refused on a buffer made without it, without the expert-major places it
    // comes back from, and after a dispatch that did not store rows at their places.
    DeviceBuffer targets(sizeof(void*) * 256);
    void** tg = static_cast<void**>(targets.data());
    const float* wp = static_cast<const float*>(w.data());
    expect("slot_targets without combine_slots", [&] { buf.slot_targets(tg, 256, s); }, tw::Errc::kInvalidArgument,
           {"EpBuffer::slot_targets", "without EpConfig::combine_slots"});
    expect("combine_slots without combine_slots", [&] { buf.combine_slots(idx.data(), tw::EpIndex::kInt64, wp, out.data(), s); },
           tw::Errc::kInvalidArgument, {"EpBuffer::combine_slots", "without EpConfig::combine_slots"});
    {
      tw::EpConfig c = cfg;
      c.combine_slots = true;
      expect("combine_slots without places", [&] { tw::EpBuffer b(comm, c); }, tw::Errc::kInvalidArgument,
             {"combine_slots needs expert_major_rows > 0"});
      c.expert_major_rows = 256;
      tw::EpBuffer slots(comm, c);
      expect("slot_targets before a dispatch", [&] { slots.slot_targets(tg, 256, s); }, tw::Errc::kInvalidArgument,
             {"dispatch(EpExpertPlaces)"});
      comm.sync(s);
      comm.barrier();
      slots.dispatch(a, s);  // rows to the receive area, not to their places
      expect("slot_targets after a plain dispatch", [&] { slots.slot_targets(tg, 256, s); }, tw::Errc::kInvalidArgument,
             {"dispatch(EpExpertPlaces)"});
      expect("combine_slots after a plain dispatch",
             [&] { slots.combine_slots(idx.data(), tw::EpIndex::kInt64, wp, out.data(), s); }, tw::Errc::kInvalidArgument,
             {"dispatch(EpExpertPlaces)"});
      comm.sync(s);
      comm.barrier();  // no rank frees its buffer while a peer's dispatch still stores into it
    }
    comm.barrier();
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

// dispatch + combine captured into a CUDA graph (thread-local capture: the ranks may be threads)
// and replayed, with the received rows and the output poisoned before each replay: bit-identical
// to the eager calls.
TEST(Ep, GraphReplayIsBitIdentical) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    tw::EpConfig cfg;
    cfg.max_tokens_per_rank = 128, cfg.hidden = 2048, cfg.topk = 4, cfg.num_experts = 8 * P;
    tw::EpBuffer buf(comm, cfg);
    const int N = 100 + me;
    DeviceBuffer x((size_t)N * cfg.hidden * 2), idx((size_t)N * cfg.topk * 8), w((size_t)N * cfg.topk * 4),
        out((size_t)N * cfg.hidden * 2);
    fill(x.data(), tw::DType::kBFloat16, (size_t)N * cfg.hidden, Fill::kSmallInt, 21, me, s);
    fill(w.data(), tw::DType::kFloat32, (size_t)N * cfg.topk, Fill::kRandom, 22, me, s);
    std::vector<int64_t> ids((size_t)N * cfg.topk);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i % 5 == 4) ? -1 : (int64_t)(mix(23, me, i) % cfg.num_experts);
    upload(idx.data(), ids, s);
    tw::EpDispatchArgs a;
    a.x = x.data(), a.num_tokens = N, a.topk_idx = idx.data(), a.topk_weights = static_cast<const float*>(w.data());
    comm.sync(s);
    comm.barrier();  // every rank's allocations are made before any rank's kernel waits for it
    const tw::EpRecv r = buf.dispatch(a, s);
    buf.combine(r.x, nullptr, out.data(), s);  // y = the received rows: out = n_t x
    const int n = buf.num_recv(s);
    const std::vector<uint8_t> rows0 = download<uint8_t>(r.x, (size_t)n * cfg.hidden * 2, s);
    const std::vector<uint8_t> out0 = download<uint8_t>(out.data(), out.bytes, s);
    comm.barrier();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    TW_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    buf.dispatch(a, s);
    buf.combine(r.x, nullptr, out.data(), s);
    TW_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    TW_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      poison(r.x, (size_t)r.capacity * cfg.hidden * 2, s);
      poison(out.data(), out.bytes, s);
      comm.sync(s);
      comm.barrier();  // every rank's poison is down before any replay writes into its window
      TW_CUDA_CHECK(cudaGraphLaunch(exec, s));
      if (download<uint8_t>(r.x, (size_t)n * cfg.hidden * 2, s) != rows0) wrong[me] += "replay " + std::to_string(rep) + ": rows; ";
      if (download<uint8_t>(out.data(), out.bytes, s) != out0) wrong[me] += "replay " + std::to_string(rep) + ": out; ";
      comm.barrier();
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
  for (int q = 0; q < P; ++q) EXPECT_EQ(wrong[q], "") << "rank " << q;
}

// Rank 0 dispatches; the others never do. Its wait for their counts ends in the diagnostic.
[[noreturn]] void lone_dispatch_child() {
  alarm(40);
  setenv("TILEWIRE_TIMEOUT_MS", "500", 1);
  try {
    auto body = [](tw::Comm& comm) {
      tw::EpConfig cfg;
      cfg.max_tokens_per_rank = 16, cfg.hidden = 256, cfg.topk = 2, cfg.num_experts = 2 * comm.nranks();
      tw::EpBuffer buf(comm, cfg);
      if (comm.rank() != 0) {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return;
      }
      Stream s;
      DeviceBuffer x(16 * 256 * 2), idx(16 * 2 * 8), w(16 * 2 * 4);
      TW_CUDA_CHECK(cudaMemsetAsync(idx.data(), 0, idx.bytes, s));
      tw::EpDispatchArgs a;
      a.x = x.data(), a.num_tokens = 16, a.topk_idx = idx.data(), a.topk_weights = static_cast<const float*>(w.data());
      try {
        buf.dispatch(a, s);
        comm.sync(s);
      } catch (const tw::Error& e) {
        std::fprintf(stderr, "%s: %s\n", tw::errc_name(e.code()), e.what());
        std::fflush(stderr);
        _exit(e.code() == tw::Errc::kTimeout ? 3 : 4);
      }
      _exit(5);
    };
    if (virtual_ranks() > 0) tw::Comm::run_virtual(0, std::max(2, virtual_ranks()), body);
    else tw::Comm::run_local({}, body);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
  }
  _exit(6);
}

TEST(EpDeathTest, PeerNeverJoins) {
  TW_SKIP_UNLESS_RANKS(2);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // On a virtual team the diagnostic also lists each rank's last call entered: rank 1 made none.
  const std::string want = std::string("waited [0-9]+ ms in 'ep.dispatch.counts'") +
                           (virtual_ranks() > 0 ? ".*last calls entered: rank 0: EpBuffer::dispatch \\(call 1\\), rank 1: none" : "");
  EXPECT_EXIT(lone_dispatch_child(), ::testing::ExitedWithCode(3), want.c_str());
}

}  // namespace
