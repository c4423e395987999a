// tests/gpu/moe_test.cu — the MoE FFN (ops/moe.hpp) against a host reference, in both EP modes,
// on the test team (real ranks, or TILEWIRE_TEST_VIRTUAL=P virtual ones). Every rank builds every
// expert's weights and its own tokens from seeds.
//
//   Moe.MatchesTheReference  uniform, skewed and all-to-rank-0 routing, ranks with 40, 0, 23 and 1
//       tokens, some top-k slots -1; every element of the output against the reference below;
//       a second call on the same inputs gives the same bits. High throughput runs six times: in
//       sequence, with the overlap (MoeConfig::overlap), with the fused combine
//       (MoeConfig::fused_combine), with both, with the direct dispatch (MoeConfig::direct_dispatch)
//       alone and with the fused combine, and with the slot combine (MoeConfig::slot_combine: the
//       down GEMM storing each row into its token's rank); the fused calls must give the sequential
//       bits, except the slot combine's, whose roundings are its own (the reference and the
//       second call's bits hold it).
//       With the gate-up weights interleaved (MoeGateUp::kInterleaved8: the SwiGLU in the gate-up
//       GEMM's epilogue) in both modes, in sequence and with both fusions (which must give its
//       sequential bits), with the direct dispatch and the fused combine, and with the direct
//       dispatch and the slot combine, against the reference without h's rounding.
//   Moe.RepeatedExpertInATokenMatches  high throughput, a token naming an expert in two slots: the
//       reference, and the direct dispatch's bits equal the sequential call's.
//   Moe.DirectDispatchMustAgree  rank 0 makes the MoE without the direct dispatch, the others with
//       it: every rank throws kInvalidArgument naming direct_dispatch, and nothing hangs.
//   Moe.InterleaveGateUp  interleave_gate_up's reorder against the host's, bit for bit, and its
//       refusals (F % 8, overlap, null).
//   Moe.GraphReplayIsBitIdentical  forward captured in a CUDA graph and replayed three times over a
//       poisoned output: the eager call's bits each time (both modes, every fusion).
//   Moe.TooManyExpertRowsIsReported  high throughput with room for 3 (row, expert) pairs: a rank
//       that receives more fails its check() naming the limit, the others do not; an empty call
//       after it checks clean (in sequence and with each fusion).
//   Moe.RefusedRoutingThrowsOnEveryRank  high throughput, in sequence and with each fusion: rank 0
//       names an expert out of range; every rank's check() throws, nothing hangs, and the next
//       call on the same MoE matches the reference.
//   Moe.AllocationFailureThrowsOnEveryRank  the last rank cannot allocate its buffers: it throws
//       out of memory naming the buffer, every other rank kState naming it; a MoE made next works.
//
// The reference (host, fp64) follows the library's roundings where they decide a value: h = W1 x
// rounded to bf16 (gate = rows [0, F), up = rows [F, 2F)), act = SiLU(g) u rounded to bf16, then
//   out[t][c] = sum_j w_j sum_f W2_e[c][f] act_f       (e = topk_idx[t][j] >= 0)
// The GPU accumulates in fp32, so an element of h may round to the other neighbour (K 2^-24
// sum |x w| against bf16's half ulp 2^-9): that moves act_f by up to 2^-7 |g_f u_f|. Tolerance per
// output element: 2^-7 sum_j |w_j| sum_f |W2_e[c][f]| |g_f u_f| (those moves, act's and y's
// roundings) + 2^-8 |ref| (the output's rounding). Wrong routing, a lost slot or gate and up
// swapped move an element by about |ref|, far outside it. With kInterleaved8 h is not rounded
// (the epilogue forms act from the fp32 sums); the same tolerance holds.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/ops/moe.hpp"

namespace {
using namespace tw_test;

constexpr int kH = 256, kF = 128, kTopk = 4, kL = 8, kMaxTokens = 48;

int tokens_of(int rank) { return std::array<int, 4>{40, 0, 23, 1}[rank % 4]; }

enum class Routing { kUniform, kSkewed, kAllToRank0 };
const char* name(Routing r) { return r == Routing::kUniform ? "uniform" : r == Routing::kSkewed ? "skewed" : "all-to-rank-0"; }

float weight_value(uint64_t seed, int expert, size_t i) {
  return bf16_to_f32(f32_to_bf16(random_exact(seed, expert, i, tw::DType::kBFloat16)));
}

struct Tokens {
  int N = 0;
  std::vector<uint16_t> x;   // [N, H] bf16
  std::vector<int64_t> idx;  // [N, topk], distinct experts per token, some -1
  std::vector<float> w;      // [N, topk]
};

Tokens make_tokens(uint64_t seed, Routing routing, int rank, int P) {
  Tokens t;
  t.N = tokens_of(rank);
  const int E = kL * P;
  t.x.resize(size_t(t.N) * kH);
  for (size_t i = 0; i < t.x.size(); ++i) t.x[i] = f32_to_bf16(random_exact(seed, rank, i, tw::DType::kBFloat16));
  t.idx.assign(size_t(t.N) * kTopk, -1);
  for (int n = 0; n < t.N; ++n) {
    std::vector<int64_t> picked;
    for (int j = 0, tries = 0; j < kTopk && tries < 64; ++tries) {
      const uint64_t u = mix(seed + 3, rank, uint64_t(n) * 64 + tries);
      const double f = double(u % 1000003) / 1000003.0;
      const int64_t e = routing == Routing::kUniform ? int64_t(u % E)
                        : routing == Routing::kSkewed ? std::min<int64_t>(E - 1, int64_t(E * f * f * f))
                                                      : int64_t(u % kL);  // rank 0's experts only
      if (std::find(picked.begin(), picked.end(), e) != picked.end()) continue;
      picked.push_back(e);
      t.idx[size_t(n) * kTopk + j] = (u >> 40) % 7 == 0 ? -1 : e;
      ++j;
    }
  }
  t.w.resize(size_t(t.N) * kTopk);
  for (size_t i = 0; i < t.w.size(); ++i) t.w[i] = random_exact(seed + 5, rank, i, tw::DType::kFloat32);
  return t;
}

// Expert e's weights: W1 [2F, H], W2 [H, F], bf16 values as floats.
struct Expert {
  std::vector<float> w1, w2;
};
Expert expert_weights(uint64_t seed, int e) {
  Expert x;
  x.w1.resize(size_t(2) * kF * kH), x.w2.resize(size_t(kH) * kF);
  for (size_t i = 0; i < x.w1.size(); ++i) x.w1[i] = weight_value(seed + 11, e, i);
  for (size_t i = 0; i < x.w2.size(); ++i) x.w2[i] = weight_value(seed + 13, e, i);
  return x;
}

// out [N, H] reference and tolerance (header).
void reference(const Tokens& t, const std::vector<Expert>& experts, std::vector<double>* ref, std::vector<double>* tol,
               bool swiglu = false) {
  ref->assign(size_t(t.N) * kH, 0.0), tol->assign(size_t(t.N) * kH, 0.0);
  std::vector<double> h(2 * kF), act(kF), gu(kF);
  for (int n = 0; n < t.N; ++n)
    for (int j = 0; j < kTopk; ++j) {
      const int64_t e = t.idx[size_t(n) * kTopk + j];
      if (e < 0) continue;
      const Expert& x = experts[size_t(e)];
      const double w = t.w[size_t(n) * kTopk + j];
      for (int r = 0; r < 2 * kF; ++r) {
        double s = 0;
        for (int c = 0; c < kH; ++c) s += double(x.w1[size_t(r) * kH + c]) * bf16_to_f32(t.x[size_t(n) * kH + c]);
        h[r] = swiglu ? s : bf16_to_f32(f32_to_bf16(float(s)));
      }
      for (int f = 0; f < kF; ++f) {
        const double g = h[f], u = h[kF + f];
        act[f] = bf16_to_f32(f32_to_bf16(float(g / (1.0 + std::exp(-g)) * u)));
        gu[f] = std::fabs(g * u);
      }
      for (int c = 0; c < kH; ++c) {
        double s = 0, m = 0;
        for (int f = 0; f < kF; ++f) {
          s += double(x.w2[size_t(c) * kF + f]) * act[f];
          m += std::fabs(double(x.w2[size_t(c) * kF + f])) * gu[f];
        }
        (*ref)[size_t(n) * kH + c] += w * s;
        (*tol)[size_t(n) * kH + c] += std::fabs(w) * std::ldexp(m, -7);
      }
    }
  for (size_t i = 0; i < ref->size(); ++i) (*tol)[i] += std::ldexp(std::fabs((*ref)[i]), -8) + 1e-30;
}

// This rank's weights, [L, 2F, H] and [L, H, F] bf16 bits.
void rank_weights(const std::vector<Expert>& experts, int rank, std::vector<uint16_t>* w1, std::vector<uint16_t>* w2) {
  w1->clear(), w2->clear();
  for (int l = 0; l < kL; ++l) {
    const Expert& x = experts[size_t(rank) * kL + l];
    for (float v : x.w1) w1->push_back(f32_to_bf16(v));
    for (float v : x.w2) w2->push_back(f32_to_bf16(v));
  }
}

// Every expert of the team's layer (kL per rank, P ranks) for a seed.
std::vector<Expert> team_experts(uint64_t seed, int P) {
  std::vector<Expert> experts;
  for (int e = 0; e < kL * P; ++e) experts.push_back(expert_weights(seed, e));
  return experts;
}

// [L, 2F, H] rows reordered from gate-then-up to kInterleaved8 on the host (moe.hpp's formula).
std::vector<uint16_t> interleaved(const std::vector<uint16_t>& w1, int L, int F, int H) {
  std::vector<uint16_t> out(w1.size());
  for (int l = 0; l < L; ++l)
    for (int r = 0; r < 2 * F; ++r) {
      const int j = r / 16, half = (r / 8) % 2, i = r % 8;
      const size_t from = (size_t(l) * 2 * F + size_t(half) * F + 8 * j + i) * H, to = (size_t(l) * 2 * F + r) * H;
      std::copy(w1.begin() + long(from), w1.begin() + long(from) + H, out.begin() + long(to));
    }
  return out;
}

// This rank's weights on the device (the host bits kept until the object goes); w1i: the gate-up
// weights interleaved (kInterleaved8) on the host.
struct RankWeights {
  std::vector<uint16_t> h1, h2;
  DeviceBuffer w1, w2, w1i;
  RankWeights(const std::vector<Expert>& experts, int rank, cudaStream_t s)
      : h1(bits(experts, rank, true)), h2(bits(experts, rank, false)), w1(h1.size() * 2), w2(h2.size() * 2),
        w1i(h1.size() * 2) {
    upload(w1.data(), h1, s), upload(w2.data(), h2, s), upload(w1i.data(), interleaved(h1, kL, kF, kH), s);
  }

 private:
  static std::vector<uint16_t> bits(const std::vector<Expert>& experts, int rank, bool first) {
    std::vector<uint16_t> a, b;
    rank_weights(experts, rank, &a, &b);
    return first ? a : b;
  }
};

// One call's inputs and output on the device: x, topk_idx (`idx`, or t.idx), topk_weights, out.
struct CallBuffers {
  DeviceBuffer x, idx, w, out;
  CallBuffers(const Tokens& t, const std::vector<int64_t>& topk, cudaStream_t s)
      : x(std::max<size_t>(t.x.size() * 2, 16)),
        idx(std::max<size_t>(t.idx.size() * 8, 16)),
        w(std::max<size_t>(t.w.size() * 4, 16)),
        out(std::max<size_t>(size_t(t.N) * kH * 2, 16)) {
    upload(x.data(), t.x, s), upload(idx.data(), topk, s), upload(w.data(), t.w, s);
  }
  CallBuffers(const Tokens& t, cudaStream_t s) : CallBuffers(t, t.idx, s) {}
  tw::MoeArgs args(const Tokens& t, const RankWeights& rw, bool swiglu = false) const {
    tw::MoeArgs a;
    a.x = x.data(), a.num_tokens = t.N, a.topk_idx = idx.data(), a.topk_weights = static_cast<const float*>(w.data());
    a.w_gate_up = swiglu ? rw.w1i.data() : rw.w1.data(), a.w_down = rw.w2.data(), a.out = out.data();
    return a;
  }
};

// The configurations the tests run: high throughput in sequence, with the overlap, with the fused
// combine, with both; low latency; and with the gate-up weights interleaved (swiglu), in sequence and
// with both fusions, in both modes.
struct Variant {
  tw::EpMode mode;
  bool overlap = false;
  bool fused_combine = false;
  bool swiglu = false;  // MoeGateUp::kInterleaved8
  bool direct = false;  // MoeConfig::direct_dispatch
  bool slots = false;   // MoeConfig::slot_combine (with direct): its own roundings, so its own bits
  bool fused() const { return overlap || fused_combine || direct; }
  bool sequential_bits() const { return fused() && !slots; }  // must give the sequential call's bits
  std::string name() const {
    return std::string(tw::ep_mode_name(mode)) + (overlap ? " overlapped" : "") +
           (fused_combine ? " fused-combine" : "") + (swiglu ? " swiglu" : "") + (direct ? " direct" : "") +
           (slots ? " slot-combine" : "");
  }
};
constexpr Variant kHtVariants[] = {{tw::EpMode::kHighThroughput, false, false},
                                   {tw::EpMode::kHighThroughput, true, false},
                                   {tw::EpMode::kHighThroughput, false, true},
                                   {tw::EpMode::kHighThroughput, true, true},
                                   {tw::EpMode::kHighThroughput, false, false, false, true},
                                   {tw::EpMode::kHighThroughput, false, true, false, true},
                                   {tw::EpMode::kHighThroughput, false, false, false, true, true}};
// A sequential variant before the fused ones of the same swiglu: their bits are checked against it.
constexpr Variant kVariants[] = {kHtVariants[0],
                                 kHtVariants[1],
                                 kHtVariants[2],
                                 kHtVariants[3],
                                 kHtVariants[4],
                                 kHtVariants[5],
                                 kHtVariants[6],
                                 {tw::EpMode::kLowLatency, false, false},
                                 {tw::EpMode::kHighThroughput, false, false, true},
                                 {tw::EpMode::kHighThroughput, true, true, true},
                                 {tw::EpMode::kHighThroughput, false, true, true, true},
                                 {tw::EpMode::kHighThroughput, false, false, true, true, true},
                                 {tw::EpMode::kLowLatency, false, false, true}};

tw::MoeConfig moe_config(const Variant& v, int P) {
  tw::MoeConfig c;
  c.ep.mode = v.mode, c.ep.max_tokens_per_rank = kMaxTokens, c.ep.hidden = kH, c.ep.topk = kTopk;
  c.ep.num_experts = kL * P;
  c.ffn = kF;
  c.overlap = v.overlap;
  c.fused_combine = v.fused_combine;
  c.direct_dispatch = v.direct;
  c.slot_combine = v.slots;
  c.gate_up = v.swiglu ? tw::MoeGateUp::kInterleaved8 : tw::MoeGateUp::kGateThenUp;
  return c;
}

std::string compare(const std::vector<uint16_t>& got, const std::vector<double>& ref, const std::vector<double>& tol) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = bf16_to_f32(got[i]);
    if (!(std::fabs(v - ref[i]) <= tol[i]))
      return "out[" + std::to_string(i / kH) + "][" + std::to_string(i % kH) + "] = " + std::to_string(v) +
             ", reference " + std::to_string(ref[i]) + " (tolerance " + std::to_string(tol[i]) + ")";
  }
  return "";
}

TEST(Moe, MatchesTheReference) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  uint64_t seed = 80;
  const std::vector<Expert> experts = team_experts(seed, P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    const RankWeights rw(experts, me, s);
    std::vector<std::vector<uint16_t>> sequential(6);  // high throughput's bits per routing and swiglu
    for (const Variant& v : kVariants) {
      tw::MoE moe(comm, moe_config(v, P));
      for (Routing routing : {Routing::kUniform, Routing::kSkewed, Routing::kAllToRank0}) {
        const std::string at = v.name() + " " + name(routing) + ": ";
        const Tokens t = make_tokens(seed + int(routing), routing, me, P);
        std::vector<double> ref, tol;
        reference(t, experts, &ref, &tol, v.swiglu);
        const CallBuffers cb(t, s);
        tw::MoeArgs a = cb.args(t, rw, v.swiglu);
        const size_t seq = size_t(routing) + (v.swiglu ? 3 : 0);
        std::vector<uint16_t> first;
        for (int call = 0; call < 2; ++call) {
          poison(cb.out.data(), cb.out.bytes, s);
          comm.sync(s);
          comm.barrier();
          moe.forward(a, s);
          moe.check(s);
          const std::vector<uint16_t> got = download<uint16_t>(cb.out.data(), size_t(t.N) * kH, s);
          if (call == 0) {
            first = got;
            const std::string why = compare(got, ref, tol);
            if (!why.empty()) wrong[me].push_back(at + why);
            if (v.mode == tw::EpMode::kHighThroughput && !v.fused()) sequential[seq] = got;
            if (v.sequential_bits() && got != sequential[seq])
              wrong[me].push_back(at + "the bits differ from the sequential high-throughput call's");
          } else if (got != first) {
            wrong[me].push_back(at + "the second call's bits differ from the first's");
          }
        }
      }
      comm.sync(s);
      comm.barrier();
    }
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(Moe, GraphReplayIsBitIdentical) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  std::vector<std::string> wrong(P);
  const uint64_t seed = 90;
  const std::vector<Expert> experts = team_experts(seed, P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    const RankWeights rw(experts, me, s);
    for (const Variant& v : kVariants) {
      tw::MoE moe(comm, moe_config(v, P));
      const Tokens t = make_tokens(seed, Routing::kUniform, me, P);
      const CallBuffers cb(t, s);
      tw::MoeArgs a = cb.args(t, rw, v.swiglu);
      poison(cb.out.data(), cb.out.bytes, s);  // as before each replay (a rank with no tokens writes none of it)
      comm.sync(s);
      comm.barrier();
      moe.forward(a, s);
      const std::vector<uint8_t> eager = download<uint8_t>(cb.out.data(), cb.out.bytes, s);
      comm.barrier();
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      TW_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      moe.forward(a, s);
      TW_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      TW_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int rep = 0; rep < 3; ++rep) {
        poison(cb.out.data(), cb.out.bytes, s);
        comm.sync(s);
        comm.barrier();
        TW_CUDA_CHECK(cudaGraphLaunch(exec, s));
        if (download<uint8_t>(cb.out.data(), cb.out.bytes, s) != eager)
          wrong[me] += v.name() + " replay " + std::to_string(rep) + ": output differs; ";
        comm.barrier();
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      comm.sync(s);
      comm.barrier();
    }
  });
  for (int q = 0; q < P; ++q) EXPECT_EQ(wrong[q], "") << "rank " << q;
}

}  // namespace

namespace {

// High throughput with buffers for 3 (row, expert) pairs: a rank that receives more computes
// nothing and says so in check() (that rank only); a later call within the buffers checks clean.
TEST(Moe, TooManyExpertRowsIsReported) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  std::vector<std::string> wrong(P);
  const uint64_t seed = 95;
  const std::vector<Expert> experts = team_experts(seed, P);
  std::vector<Tokens> all;
  for (int q = 0; q < P; ++q) all.push_back(make_tokens(seed, Routing::kUniform, q, P));
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    const RankWeights rw(experts, me, s);
    for (const Variant& v : kHtVariants) {
      tw::MoeConfig cfg = moe_config(v, P);
      cfg.max_expert_rows = 3;
      tw::MoE moe(comm, cfg);
      const std::string at = v.name() + ": ";
      int pairs = 0;  // (row, local expert) pairs this rank receives
      for (int q = 0; q < P; ++q)
        for (int64_t e : all[q].idx) pairs += e >= 0 && e / kL == me;
      const Tokens& t = all[me];
      const CallBuffers cb(t, s);
      tw::MoeArgs a = cb.args(t, rw);
      comm.sync(s);
      comm.barrier();
      moe.forward(a, s);
      try {
        moe.check(s);
        if (pairs > 3) wrong[me] += at + "received " + std::to_string(pairs) + " pairs and check() did not throw; ";
      } catch (const tw::Error& e) {
        if (pairs <= 3) wrong[me] += at + "check() threw with " + std::to_string(pairs) + " pairs: " + e.what();
        else if (std::string(e.what()).find("max_expert_rows 3") == std::string::npos)
          wrong[me] += at + "the message does not name the limit: " + e.what();
      }
      // Every rank past its check() before any rank launches again: on a virtual team under
      // compute-sanitizer, check()'s copy back waits for the whole device, where a faster peer's
      // next dispatch would spin for this rank.
      comm.barrier();
      a.num_tokens = 0;  // nothing anywhere: within the buffers
      moe.forward(a, s);
      try {
        moe.check(s);
      } catch (const tw::Error& e) {
        wrong[me] += at + "an empty call still fails: " + e.what();
      }
      comm.sync(s);
      comm.barrier();
    }
  });
  for (int q = 0; q < P; ++q) EXPECT_EQ(wrong[q], "") << "rank " << q;
}

// A refused routing: no rank's dispatch writes rows, every rank's check() throws, and with the
// overlap the GEMM beside the dispatch is released (nothing waits for rows that never come); the
// next call is good.
TEST(Moe, RefusedRoutingThrowsOnEveryRank) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  std::vector<std::string> wrong(P);
  const uint64_t seed = 97;
  const std::vector<Expert> experts = team_experts(seed, P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    const RankWeights rw(experts, me, s);
    for (const Variant& v : kHtVariants) {
      const std::string at = v.name() + ": ";
      tw::MoE moe(comm, moe_config(v, P));
      const Tokens t = make_tokens(seed, Routing::kUniform, me, P);
      std::vector<double> ref, tol;
      reference(t, experts, &ref, &tol);
      std::vector<int64_t> bad = t.idx;
      if (me == 0) bad[0] = int64_t(kL) * P;  // one past the last expert (rank 0 has 40 tokens)
      const CallBuffers cb(t, bad, s);
      tw::MoeArgs a = cb.args(t, rw);
      comm.sync(s);
      comm.barrier();
      moe.forward(a, s);
      try {
        moe.check(s);
        wrong[me] += at + "check() did not throw after rank 0's bad expert id; ";
      } catch (const tw::Error& e) {
        if (std::string(e.what()).find("rank 0") == std::string::npos)
          wrong[me] += at + "the message does not name rank 0: " + e.what() + "; ";
      }
      comm.barrier();
      upload(cb.idx.data(), t.idx, s);
      poison(cb.out.data(), cb.out.bytes, s);
      comm.sync(s);
      comm.barrier();
      moe.forward(a, s);
      try {
        moe.check(s);
      } catch (const tw::Error& e) {
        wrong[me] += at + "the good call after it fails: " + e.what() + "; ";
      }
      const std::string why = compare(download<uint16_t>(cb.out.data(), size_t(t.N) * kH, s), ref, tol);
      if (!why.empty()) wrong[me] += at + "the good call after it: " + why + "; ";
      comm.sync(s);
      comm.barrier();
    }
  });
  for (int q = 0; q < P; ++q) EXPECT_EQ(wrong[q], "") << "rank " << q;
}

// A rank that cannot make its buffers (the last rank asks for 2^30 expert rows, hundreds of GB):
// it throws its out-of-memory error naming the buffer, every other rank throws kState naming that
// rank, and no rank holds a MoE whose first dispatch would wait for a peer that never comes. The
// communicator stays usable: a MoE made next matches the reference.
TEST(Moe, AllocationFailureThrowsOnEveryRank) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  std::vector<std::string> wrong(P);
  const uint64_t seed = 99;
  const std::vector<Expert> experts = team_experts(seed, P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank(), last = P - 1;
    Stream s;
    tw::MoeConfig cfg = moe_config(kHtVariants[0], P);
    if (me == last) cfg.max_expert_rows = 1 << 30;
    try {
      tw::MoE moe(comm, cfg);
      wrong[me] += "the MoE was made although rank " + std::to_string(last) + " could not allocate; ";
    } catch (const tw::Error& e) {
      const std::string what = e.what();
      if (me == last && (e.code() != tw::Errc::kCuda || what.find("out of device memory for its buffer") == std::string::npos))
        wrong[me] += "the failing rank's error does not say what it could not allocate: " + what + "; ";
      if (me != last && (e.code() != tw::Errc::kState || what.find("rank " + std::to_string(last)) == std::string::npos))
        wrong[me] += "the error does not name rank " + std::to_string(last) + ": " + what + "; ";
    }
    const RankWeights rw(experts, me, s);
    tw::MoE moe(comm, moe_config(kHtVariants[0], P));
    const Tokens t = make_tokens(seed, Routing::kUniform, me, P);
    std::vector<double> ref, tol;
    reference(t, experts, &ref, &tol);
    const CallBuffers cb(t, s);
    const tw::MoeArgs a = cb.args(t, rw);
    poison(cb.out.data(), cb.out.bytes, s);
    comm.sync(s);
    comm.barrier();
    moe.forward(a, s);
    try {
      moe.check(s);
      const std::string why = compare(download<uint16_t>(cb.out.data(), size_t(t.N) * kH, s), ref, tol);
      if (!why.empty()) wrong[me] += "the MoE made after it: " + why + "; ";
    } catch (const tw::Error& e) {
      wrong[me] += std::string("the MoE made after it fails: ") + e.what() + "; ";
    }
    comm.sync(s);
    comm.barrier();
  });
  for (int q = 0; q < P; ++q) EXPECT_EQ(wrong[q], "") << "rank " << q;
}

// High throughput lets a token name an expert twice (each slot is its own pair): every third
// token's slot 1 repeats its slot 0. In sequence, with the direct dispatch (the row stored once at
// the first slot's place, copied to the second's), with it and the fused combine, and with it and
// the slot combine (both slots' rows come back): the reference on every element, and the fused
// variants but the slot combine the sequential bits.
TEST(Moe, RepeatedExpertInATokenMatches) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  const uint64_t seed = 97;
  const std::vector<Expert> experts = team_experts(seed, P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    const RankWeights rw(experts, me, s);
    Tokens t = make_tokens(seed, Routing::kUniform, me, P);
    for (int n = 0; n < t.N; n += 3)
      if (t.idx[size_t(n) * kTopk] >= 0) t.idx[size_t(n) * kTopk + 1] = t.idx[size_t(n) * kTopk];
    std::vector<double> ref, tol;
    reference(t, experts, &ref, &tol);
    const CallBuffers cb(t, s);
    std::vector<uint16_t> sequential;
    for (const Variant& v : {kHtVariants[0], kHtVariants[4], kHtVariants[5], kHtVariants[6]}) {
      tw::MoE moe(comm, moe_config(v, P));
      poison(cb.out.data(), cb.out.bytes, s);
      comm.sync(s);
      comm.barrier();
      moe.forward(cb.args(t, rw), s);
      moe.check(s);
      const std::vector<uint16_t> got = download<uint16_t>(cb.out.data(), size_t(t.N) * kH, s);
      const std::string why = compare(got, ref, tol);
      if (!why.empty()) wrong[me].push_back(v.name() + ": " + why);
      if (!v.fused()) sequential = got;
      else if (v.sequential_bits() && got != sequential) wrong[me].push_back(v.name() + ": the bits differ from the sequential call's");
      comm.sync(s);
      comm.barrier();
    }
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(Moe, DirectDispatchMustAgree) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    tw::MoeConfig cfg = moe_config(kHtVariants[4], P);
    cfg.direct_dispatch = me != 0;
    try {
      tw::MoE moe(comm, cfg);
      wrong[me] = "the MoE was made";
    } catch (const tw::Error& e) {
      if (e.code() != tw::Errc::kInvalidArgument || std::string(e.what()).find("direct_dispatch differs") == std::string::npos)
        wrong[me] = std::string("not the expected error: ") + e.what();
    }
  });
  for (int q = 0; q < P; ++q) EXPECT_EQ(wrong[q], "") << "rank " << q;
}

TEST(Moe, InterleaveGateUp) {
  TW_SKIP_UNLESS_SM90();
  const int L = 3, F = 40, H = 24;  // F: 5 blocks of 8 per half, so the last interleaved block of 16 is whole
  std::vector<uint16_t> w(size_t(L) * 2 * F * H);
  for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(random_exact(7, 0, i, tw::DType::kBFloat16));
  Stream s;
  DeviceBuffer dw(w.size() * 2), dout(w.size() * 2);
  upload(dw.data(), w, s);
  poison(dout.data(), dout.bytes, s);
  tw::interleave_gate_up(dw.data(), dout.data(), L, F, H, s);
  EXPECT_TRUE(download<uint16_t>(dout.data(), w.size(), s) == interleaved(w, L, F, H)) << "the rows differ from the host's";
  auto refused = [&](const void* in, void* out, int f, const std::string& want) {
    try {
      tw::interleave_gate_up(in, out, L, f, H, s);
      ADD_FAILURE() << "no error; wanted one naming " << want;
    } catch (const tw::Error& e) {
      EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused(dw.data(), dout.data(), 12, "F 12");
  refused(dw.data(), static_cast<char*>(dw.data()) + 16, F, "overlaps");
  refused(nullptr, dout.data(), F, "w is null");
}

}  // namespace
