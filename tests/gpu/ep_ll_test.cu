// tests/gpu/ep_ll_test.cu — the low-latency EP mode against a host reference (every rank builds
// every rank's inputs from seeds).
//
//   Ep.LowLatencyMatchesTheReference   bf16 and fp8 (quantized by the send; the reference
//       quantizes on the host with its own e4m3 rounding), hidden 2048 and 7168, uniform and
//       skewed routing, ranks with 64, 0, 37 and 1 tokens, some top-k entries -1: per-expert
//       counts exact, each expert's rows, scales and sources bitwise in (source rank, source
//       token) order; combine_recv bitwise against the fixed-order fp32 sum over the top-k slots;
//       three steps in a row, the last two bit-identical to the first; twice more on 2 SMs, where
//       the ranks of 64 and 37 tokens send with warps and the rank of 1 token with the copy
//       engine, in the same call (from 4 ranks on). Token 0 of each rank starts
//       with a scale group of 1e-37 and zeros (fp8: 448 / amax would overflow to inf there). Before each step the last
//       step's receive (rows, scales, sources) and the combine block are poisoned up to each
//       expert's count, the rows the step reads (the receive
//       block is this rank's until its next dispatch_send, the combine block from its
//       dispatch_recv on); step 1 writes y straight into the combine block
//       (EpLowLatencyRecv::y, no copy in combine_send), steps 0 and 2 pass it from elsewhere.
//   Ep.LowLatencyBackToBackSteps  200 steps with no host synchronization or barrier between them:
//       x alternates between two inputs, one rank in turn is held back ~20 us before its send,
//       every third step skips its combine, the others alternate y written into the combine
//       block and y copied in. Each combined output (identity experts: sum_j w x) goes to its
//       own slot and is compared bitwise with the host at the end: a row of a neighbouring step
//       read or overwritten shows up.
//   Ep.LowLatencyLargestLayout  the send's layout at its largest shared memory (about 512 experts,
//       top-8, 1024 tokens: 128 KiB of it beside the kernel's static arrays), then a second,
//       smaller buffer, then the first again: counts per expert and the combined output
//       (small integers times quarters: exact) against the host.
//   Ep.LowLatencyTwelveExpertsPerToken  top-12 with some slots -1 (the combine's path for more
//       than 8 slots): counts per expert and the combined output of identity experts (small
//       integers times quarters: exact) against the host, two steps.
//   Ep.LowLatencyGraphReplayAndSkippedCombine  a step without combine, then a whole step (send,
//       receive, the expert's rows copied into the combine block, combine): then that step is
//       captured in a CUDA graph and replayed three times over a poisoned receive block, counts
//       and output. Counts, every expert's rows and the output are bit-identical to the eager
//       step's on every replay (the receive block's address is fixed, so the graph's copy into
//       it stays right).
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common.cuh"
#include "ep_identity.hpp"
#include "tilewire/ops/ep.hpp"

namespace {
using namespace tw_test;
using tw::EpPayload;

constexpr int kMaxTokens = 64, kTopk = 8, kL = 32;  // experts per rank

// The buffer of these tests: low latency, kMaxTokens tokens, top-kTopk of kL experts per rank.
tw::EpConfig ll_config(int H, int P, EpPayload payload = EpPayload::kBFloat16, int num_sms = 0) {
  tw::EpConfig cfg;
  cfg.mode = tw::EpMode::kLowLatency;
  cfg.max_tokens_per_rank = kMaxTokens, cfg.hidden = H, cfg.topk = kTopk, cfg.num_experts = kL * P;
  cfg.payload = payload, cfg.num_sms = num_sms;
  return cfg;
}

int tokens_of(int rank) { return std::array<int, 4>{64, 0, 37, 1}[rank % 4]; }

struct Input {
  int N = 0;
  std::vector<uint16_t> x;    // [N, H] bf16 bits
  std::vector<int64_t> idx;   // [N, topk], distinct experts per token
  std::vector<float> w;       // [N, topk]
};

Input make_input(uint64_t seed, bool skewed, int H, int rank, int P) {
  Input in;
  in.N = tokens_of(rank);
  const int E = kL * P;
  in.x.resize((size_t)in.N * H);
  for (size_t i = 0; i < in.x.size(); ++i) in.x[i] = f32_to_bf16(random_exact(seed, rank, i, tw::DType::kBFloat16));
  // Token 0's first 128 columns: 1e-37 and zeros. In fp8, 448 / amax overflows there; the scale
  // group must come out as saturated values and zeros, not NaN.
  for (int c = 0; c < 128 && in.N > 0 && H >= 128; ++c) in.x[c] = c % 2 ? uint16_t(0) : f32_to_bf16(1e-37f);
  in.idx.assign((size_t)in.N * kTopk, -1);
  for (int t = 0; t < in.N; ++t) {
    std::vector<int64_t> picked;
    for (int j = 0, tries = 0; j < kTopk && tries < 64; ++tries) {
      const uint64_t u = mix(seed + 3, rank, (uint64_t)t * 64 + tries);
      const double f = (double)(u % 1000003) / 1000003.0;
      const int64_t e = skewed ? std::min<int64_t>(E - 1, (int64_t)(E * f * f * f)) : (int64_t)(u % E);
      if (std::find(picked.begin(), picked.end(), e) != picked.end()) continue;
      picked.push_back(e);
      in.idx[(size_t)t * kTopk + j] = (u >> 40) % 7 == 0 ? -1 : e;
      ++j;
    }
  }
  in.w.resize((size_t)in.N * kTopk);
  for (size_t i = 0; i < in.w.size(); ++i) in.w[i] = random_exact(seed + 5, rank, i, tw::DType::kFloat32);
  return in;
}

// e4m3 (bias 7, 3 mantissa bits, max 448, subnormals k x 2^-9), round to nearest even, saturating
// to +-448: written from the format's definition, independent of CUDA's conversion.
uint8_t e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs((double)f);
  if (a >= 448.0) return sign | 0x7E;
  if (a < std::ldexp(1.0, -6)) return sign | (uint8_t)std::nearbyint(a * 512.0);  // 8 becomes the min normal
  int e = 0;
  const double m = std::frexp(a, &e) * 2.0 - 1.0;  // a = (1 + m) 2^(e - 1)
  --e;
  int q = (int)std::nearbyint(m * 8.0);
  if (q == 8) q = 0, ++e;
  if (e > 8 || (e == 8 && q > 6)) return sign | 0x7E;
  return sign | (uint8_t)(((e + 7) << 3) | q);
}


uint16_t y_bits(uint64_t seed, int d, size_t row, int col, int H) {
  return f32_to_bf16(random_exact(seed + 9, d, row * H + col, tw::DType::kBFloat16));
}

TEST(Ep, LowLatencyMatchesTheReference) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  struct Case {
    int H;
    EpPayload payload;
    bool skewed;
    uint64_t seed;
    int num_sms = 0;  // 2: the ranks of 64 and 37 tokens (more than 16 per CTA) take the warp
                      // send, the rank of 1 token the copy engine's, in the same call (P >= 4)
  };
  const Case cases[] = {{2048, EpPayload::kBFloat16, false, 71}, {7168, EpPayload::kBFloat16, true, 72},
                        {7168, EpPayload::kFp8E4M3, false, 73}, {2048, EpPayload::kFp8E4M3, true, 74},
                        {2048, EpPayload::kBFloat16, false, 75, 2}, {2048, EpPayload::kFp8E4M3, false, 76, 2}};
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    std::vector<std::string>& bad = wrong[me];
    Stream s;
    for (const Case& c : cases) {
      const std::string label = std::string(c.payload == EpPayload::kFp8E4M3 ? "fp8" : "bf16") + " hidden " +
                                std::to_string(c.H) + (c.skewed ? " skewed" : " uniform") +
                                (c.num_sms ? " on " + std::to_string(c.num_sms) + " SMs: " : ": ");
      tw::EpBuffer buf(comm, ll_config(c.H, P, c.payload, c.num_sms));
      std::vector<Input> all;
      for (int q = 0; q < P; ++q) all.push_back(make_input(c.seed, c.skewed, c.H, q, P));
      const Input& in = all[me];
      const bool fp8 = c.payload == EpPayload::kFp8E4M3;
      const size_t rb = fp8 ? (size_t)c.H : (size_t)c.H * 2, nsc = fp8 ? c.H / 128 : 0, cap = (size_t)P * kMaxTokens;
      // Reference receive at this rank: expert l's rows, sources in order, tokens in order.
      std::vector<std::vector<uint8_t>> want_x(kL);
      std::vector<std::vector<float>> want_sc(kL);
      std::vector<std::vector<int32_t>> want_src(kL), want_tok(kL);
      for (int q = 0; q < P; ++q)
        for (int t = 0; t < all[q].N; ++t)
          for (int j = 0; j < kTopk; ++j) {
            const int64_t e = all[q].idx[(size_t)t * kTopk + j];
            if (e < 0 || e / kL != me) continue;
            const int l = (int)(e % kL);
            want_src[l].push_back(q), want_tok[l].push_back(t);
            const uint16_t* row = all[q].x.data() + (size_t)t * c.H;
            for (int g = 0; g < (fp8 ? c.H / 128 : 1); ++g) {
              if (!fp8) {
                const uint8_t* b = reinterpret_cast<const uint8_t*>(row);
                want_x[l].insert(want_x[l].end(), b, b + rb);
                break;
              }
              float amax = 0.0f;
              for (int k = 0; k < 128; ++k) amax = std::max(amax, std::fabs(bf16_to_f32(row[g * 128 + k])));
              // Stored scale amax / 448; the payload e4m3(x x (448 / amax)), each step rounded in fp32.
              const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
              const float inv = amax > 0.0f ? std::fmin(448.0f / amax, FLT_MAX) : 1.0f;
              want_sc[l].push_back(scale);
              for (int k = 0; k < 128; ++k) want_x[l].push_back(e4m3(bf16_to_f32(row[g * 128 + k]) * inv));
            }
          }
      // This rank's combine input: expert l's rows [0, count), from seeds. Only those rows are
      // written, poisoned and copied below (what the receive and the combine touch): on virtual
      // nodes the windows are host memory, and the whole [kL][cap] blocks cost seconds per step.
      std::vector<std::vector<uint16_t>> y(kL);
      for (int l = 0; l < kL; ++l) {
        y[l].resize(want_src[l].size() * c.H);
        for (size_t r = 0; r < want_src[l].size(); ++r)
          for (int col = 0; col < c.H; ++col) y[l][r * c.H + col] = y_bits(c.seed, me, (size_t)l * cap + r, col, c.H);
      }
      // Expert l's first rows of a [kL][cap] block with `row` bytes per row.
      const auto rows_at = [&](void* block, int l, size_t row) { return static_cast<char*>(block) + (size_t)l * cap * row; };
      const auto rows_of = [&](int l, size_t row) { return want_src[l].size() * row; };
      // Reference combine for this rank's tokens: slot j's row at its expert's rank.
      std::vector<uint16_t> want_out((size_t)in.N * c.H);
      for (int t = 0; t < in.N; ++t) {
        std::vector<float> acc(c.H, 0.0f);
        for (int j = 0; j < kTopk; ++j) {
          const int64_t e = in.idx[(size_t)t * kTopk + j];
          if (e < 0) continue;
          const int d = (int)(e / kL), l = (int)(e % kL);
          size_t r = 0;  // rows of e from earlier sources and earlier tokens of this one
          for (int q = 0; q <= me; ++q)
            for (int u = 0; u < (q < me ? all[q].N : t); ++u)
              for (int k = 0; k < kTopk; ++k) r += all[q].idx[(size_t)u * kTopk + k] == e;
          for (int col = 0; col < c.H; ++col)
            acc[col] = std::fma(in.w[(size_t)t * kTopk + j], bf16_to_f32(y_bits(c.seed, d, (size_t)l * cap + r, col, c.H)), acc[col]);
        }
        for (int col = 0; col < c.H; ++col) want_out[(size_t)t * c.H + col] = f32_to_bf16(acc[col]);
      }
      DeviceBuffer x(std::max<size_t>(in.x.size() * 2, 16)), idx(std::max<size_t>(in.idx.size() * 8, 16)),
          w(std::max<size_t>(in.w.size() * 4, 16)), yd((size_t)kL * cap * c.H * 2), out(std::max<size_t>(want_out.size() * 2, 16));
      upload(x.data(), in.x, s), upload(idx.data(), in.idx, s), upload(w.data(), in.w, s);
      for (int l = 0; l < kL; ++l) upload(rows_at(yd.data(), l, (size_t)c.H * 2), y[l], s);
      comm.sync(s);
      comm.barrier();  // every rank's allocations are made before any rank's kernel waits for it
      tw::EpLowLatencyRecv last{};
      for (int step = 0; step < 3; ++step) {
        const std::string at = label + "step " + std::to_string(step) + ": ";
        if (last.x != nullptr) {
          for (int l = 0; l < kL; ++l) {
            poison(rows_at(last.x, l, rb), rows_of(l, rb), s);
            poison(rows_at(last.src_rank, l, 4), rows_of(l, 4), s), poison(rows_at(last.src_token, l, 4), rows_of(l, 4), s);
            if (fp8) poison(rows_at(last.x_scales, l, nsc * 4), rows_of(l, nsc * 4), s);
          }
          comm.sync(s);
          comm.barrier();  // no rank's send spins while a peer still poisons (as before the combine)
        }
        tw::EpLowLatencyArgs a;
        a.x = x.data(), a.num_tokens = in.N, a.topk_idx = idx.data();
        buf.dispatch_send(a, s);
        const tw::EpLowLatencyRecv r = buf.dispatch_recv(s);
        last = r;
        buf.check(s);
        const std::vector<int> count = download<int>(r.count, kL, s);
        for (int l = 0; l < kL; ++l) {
          if (count[l] != (int)want_src[l].size()) {
            bad.push_back(at + "expert " + std::to_string(l) + " got " + std::to_string(count[l]) + " rows, expected " +
                          std::to_string(want_src[l].size()));
            continue;
          }
          const size_t n = want_src[l].size();
          if (download<uint8_t>(static_cast<char*>(r.x) + (size_t)l * cap * rb, n * rb, s) != want_x[l])
            bad.push_back(at + "expert " + std::to_string(l) + ": rows differ");
          if (fp8 && download<float>(r.x_scales + (size_t)l * cap * nsc, n * nsc, s) != want_sc[l])
            bad.push_back(at + "expert " + std::to_string(l) + ": scales differ");
          if (download<int32_t>(r.src_rank + (size_t)l * cap, n, s) != want_src[l] ||
              download<int32_t>(r.src_token + (size_t)l * cap, n, s) != want_tok[l])
            bad.push_back(at + "expert " + std::to_string(l) + ": sources differ");
        }
        poison(out.data(), out.bytes, s);
        for (int l = 0; l < kL; ++l) {
          poison(rows_at(r.y, l, (size_t)c.H * 2), rows_of(l, (size_t)c.H * 2), s);
          if (step == 1)
            TW_CUDA_CHECK(cudaMemcpyAsync(rows_at(r.y, l, (size_t)c.H * 2), rows_at(yd.data(), l, (size_t)c.H * 2),
                                          rows_of(l, (size_t)c.H * 2), cudaMemcpyDeviceToDevice, s));
        }
        // Every rank's poison and copies are done before any rank's combine waits for its peers
        // (compute-sanitizer orders a copy behind a running kernel: LowLatencyLargestLayout).
        comm.sync(s);
        comm.barrier();
        buf.combine_send(step == 1 ? r.y : yd.data(), s);
        buf.combine_recv(static_cast<const float*>(w.data()), out.data(), s);
        if (download<uint16_t>(out.data(), want_out.size(), s) != want_out) bad.push_back(at + "combine differs");
        comm.barrier();
      }
    }
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(Ep, LowLatencyGraphReplayAndSkippedCombine) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  constexpr int H = 2048;
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    tw::EpBuffer buf(comm, ll_config(H, P));
    const Input in = make_input(91, false, H, me, P);
    const size_t cap = (size_t)P * kMaxTokens, block = (size_t)kL * cap * H * 2;
    DeviceBuffer x(std::max<size_t>(in.x.size() * 2, 16)), idx(std::max<size_t>(in.idx.size() * 8, 16)),
        w(std::max<size_t>(in.w.size() * 4, 16)), out(std::max<size_t>((size_t)in.N * H * 2, 16)), y(block);
    upload(x.data(), in.x, s), upload(idx.data(), in.idx, s), upload(w.data(), in.w, s);
    fill(y.data(), tw::DType::kBFloat16, (size_t)kL * cap * H, Fill::kRandom, 92, me, s);
    comm.sync(s);
    comm.barrier();  // every rank's allocations are made before any rank's kernel waits for it
    tw::EpLowLatencyArgs a;
    a.x = x.data(), a.num_tokens = in.N, a.topk_idx = idx.data();
    const auto step = [&](bool combine) {
      buf.dispatch_send(a, s);
      const tw::EpLowLatencyRecv r = buf.dispatch_recv(s);
      if (combine) {
        TW_CUDA_CHECK(cudaMemcpyAsync(r.y, y.data(), block, cudaMemcpyDeviceToDevice, s));
        buf.combine_send(r.y, s);
        buf.combine_recv(static_cast<const float*>(w.data()), out.data(), s);
      }
      return r;
    };
    const auto rows_of = [&](const tw::EpLowLatencyRecv& r, const std::vector<int>& count) {
      std::vector<uint8_t> rows;
      for (int l = 0; l < kL; ++l) {
        const std::vector<uint8_t> v = download<uint8_t>(static_cast<char*>(r.x) + (size_t)l * cap * H * 2, (size_t)count[l] * H * 2, s);
        rows.insert(rows.end(), v.begin(), v.end());
      }
      return rows;
    };
    step(false);  // no combine: the next step must not care
    poison(out.data(), out.bytes, s);  // as before each replay (a rank with no tokens writes none of it)
    const tw::EpLowLatencyRecv r = step(true);
    buf.check(s);
    const std::vector<int> count0 = download<int>(r.count, kL, s);
    const std::vector<uint8_t> rows0 = rows_of(r, count0), out0 = download<uint8_t>(out.data(), out.bytes, s);
    comm.barrier();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    TW_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    step(true);
    TW_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    TW_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    // Every rank has instantiated before any replays: instantiation may wait for the device, and a
    // peer's replay spins until this rank's replay sends (on a virtual team they share the device).
    comm.barrier();
    for (int rep = 0; rep < 3; ++rep) {
      const std::string at = "replay " + std::to_string(rep) + ": ";
      // The receive block is this rank's until its next dispatch_send: poisoning it first is safe.
      poison(r.x, (size_t)kL * cap * H * 2, s), poison(r.count, kL * 4, s), poison(out.data(), out.bytes, s);
      TW_CUDA_CHECK(cudaGraphLaunch(exec, s));
      const std::vector<int> count = download<int>(r.count, kL, s);
      if (count != count0) wrong[me].push_back(at + "counts differ");
      else if (rows_of(r, count) != rows0) wrong[me].push_back(at + "rows differ");
      if (download<uint8_t>(out.data(), out.bytes, s) != out0) wrong[me].push_back(at + "output differs");
      comm.barrier();
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(Ep, LowLatencyBackToBackSteps) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  constexpr int H = 1024, S = 200;
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    tw::EpBuffer buf(comm, ll_config(H, P));
    const Input in = make_input(95, false, H, me, P);
    const int N = in.N;
    const size_t cap = (size_t)P * kMaxTokens, block = (size_t)kL * cap * H * 2;
    // Two inputs: x and x with every element negated (bf16: flip the sign bit).
    std::vector<uint16_t> x2 = in.x;
    for (uint16_t& v : x2) v ^= 0x8000u;
    std::vector<std::vector<uint16_t>> want(2, std::vector<uint16_t>((size_t)N * H));
    for (int v = 0; v < 2; ++v)
      for (int t = 0; t < N; ++t)
        for (int c = 0; c < H; ++c) {
          float acc = 0.0f;
          const float xv = bf16_to_f32((v ? x2 : in.x)[(size_t)t * H + c]);
          for (int j = 0; j < kTopk; ++j)
            if (in.idx[(size_t)t * kTopk + j] >= 0) acc = std::fma(in.w[(size_t)t * kTopk + j], xv, acc);
          want[v][(size_t)t * H + c] = f32_to_bf16(acc);
        }
    const size_t xbytes = std::max<size_t>(in.x.size() * 2, 16), obytes = std::max<size_t>((size_t)N * H * 2, 16);
    DeviceBuffer xa(xbytes), xb(xbytes), idx(std::max<size_t>(in.idx.size() * 8, 16)), w(std::max<size_t>(in.w.size() * 4, 16)),
        y(block), outs(obytes * S);
    upload(xa.data(), in.x, s), upload(xb.data(), x2, s), upload(idx.data(), in.idx, s), upload(w.data(), in.w, s);
    poison(outs.data(), outs.bytes, s);
    comm.sync(s);
    comm.barrier();
    for (int step = 0; step < S; ++step) {
      if (step % P == me) hold_stream(s, 20000);
      tw::EpLowLatencyArgs a;
      a.x = step % 2 ? xb.data() : xa.data(), a.num_tokens = N, a.topk_idx = idx.data();
      buf.dispatch_send(a, s);
      const tw::EpLowLatencyRecv r = buf.dispatch_recv(s);
      if (step % 3 == 2) continue;  // no combine this step
      char* out = static_cast<char*>(outs.data()) + (size_t)step * obytes;
      if (step % 2) {  // the expert writes into the combine block
        TW_CUDA_CHECK(cudaMemcpyAsync(r.y, r.x, block, cudaMemcpyDeviceToDevice, s));
        buf.combine_send(r.y, s);
      } else {  // from elsewhere, copied in by combine_send
        TW_CUDA_CHECK(cudaMemcpyAsync(y.data(), r.x, block, cudaMemcpyDeviceToDevice, s));
        buf.combine_send(y.data(), s);
      }
      buf.combine_recv(static_cast<const float*>(w.data()), out, s);
    }
    buf.check(s);
    const std::vector<uint16_t> got = download<uint16_t>(outs.data(), (size_t)N * H * S, s);
    for (int step = 0; step < S && N > 0; ++step) {
      if (step % 3 == 2) continue;
      if (!std::equal(want[step % 2].begin(), want[step % 2].end(), got.begin() + (size_t)step * N * H))
        wrong[me].push_back("step " + std::to_string(step) + ": output differs");
    }
    comm.barrier();
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(Ep, LowLatencyLargestLayout) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  constexpr int N = 1024, H = 128, K = 8;
  const int E = 512 - 512 % P, L = E / P;
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    const tw::EpConfig big = identity_config(N, H, K, E);
    tw::EpConfig small = big;
    small.max_tokens_per_rank = 16, small.num_experts = 2 * P;
    // Every rank's routing (distinct experts per token); rows and weights: identity_experts.
    const auto ids_of = [&](int q) {
      std::vector<int64_t> ids((size_t)N * K);
      for (int t = 0; t < N; ++t)
        for (int j = 0; j < K; ++j) ids[(size_t)t * K + j] = (int64_t)((mix(301, q, t) % (uint64_t)E + (uint64_t)j * (E / K)) % E);
      return ids;
    };
    const std::vector<int64_t> ids = ids_of(me);
    const IdentityExperts ref = identity_experts(302, me, P, N, H, K, L, ids_of);
    IdentityBuffers io(ref, ids, s);
    tw::EpBuffer a(comm, big);
    comm.sync(s);
    comm.barrier();
    identity_step(comm, a, io, ref, N, L, nullptr, s, "largest: ", wrong[me]);
    {
      std::vector<int64_t> few((size_t)16 * K);
      for (size_t i = 0; i < few.size(); ++i) few[i] = i % K == 0 ? (int64_t)((i / K) % (size_t)(2 * P)) : int64_t(-1);
      DeviceBuffer fidx(few.size() * 8);
      upload(fidx.data(), few, s);
      tw::EpBuffer b(comm, small);
      tw::EpLowLatencyArgs args;
      args.x = io.x.data(), args.num_tokens = 16, args.topk_idx = fidx.data();
      b.dispatch_send(args, s);
      b.dispatch_recv(s);
      b.check(s);
      comm.barrier();  // every rank's work on b is done (check synchronized its stream)
    }
    // b's memory is freed above, and cudaFree waits for the whole device: on a virtual team no rank
    // may start a kernel that waits for a peer until every rank is past its free.
    comm.barrier();
    identity_step(comm, a, io, ref, N, L, nullptr, s, "largest after a smaller buffer: ", wrong[me]);
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(Ep, LowLatencyTwelveExpertsPerToken) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  constexpr int N = 40, H = 512, K = 12, LE = 16;
  const int E = LE * P;
  const auto ids_of = [&](int q) {  // distinct experts per token, about one slot in five -1
    std::vector<int64_t> ids((size_t)N * K);
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < K; ++j)
        ids[(size_t)t * K + j] = mix(502, q, (uint64_t)t * K + j) % 5 == 0 ? int64_t(-1) : (int64_t)((mix(501, q, t) + (uint64_t)j) % E);
    return ids;
  };
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    tw::EpBuffer buf(comm, identity_config(N, H, K, E));
    const std::vector<int64_t> ids = ids_of(me);
    const IdentityExperts ref = identity_experts(503, me, P, N, H, K, LE, ids_of);
    IdentityBuffers io(ref, ids, s);
    comm.sync(s);
    comm.barrier();  // every rank's allocations are made before any rank's kernel waits for it
    for (int step = 0; step < 2; ++step)
      identity_step(comm, buf, io, ref, N, LE, nullptr, s, "step " + std::to_string(step) + ": ", wrong[me]);
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

TEST(Ep, LowLatencyStepsInOrder) {
  TW_SKIP_UNLESS_GPUS(1);
  std::vector<std::string> wrong(team_size());
  run_team([&](tw::Comm& comm) {
    Stream s;
    tw::EpConfig cfg;
    cfg.mode = tw::EpMode::kLowLatency;
    cfg.max_tokens_per_rank = 8, cfg.hidden = 256, cfg.topk = 2, cfg.num_experts = 2 * comm.nranks();
    tw::EpBuffer buf(comm, cfg);
    std::string& w = wrong[comm.rank()];
    auto refused = [&](const char* what, const std::function<void()>& f, const char* needle) {
      if (const ::testing::AssertionResult r = throws_tw(f, tw::Errc::kInvalidArgument, {needle}); !r) w += std::string(what) + ": " + r.message() + "; ";
    };
    refused("recv first", [&] { buf.dispatch_recv(s); }, "no dispatch_send");
    refused("combine first", [&] { buf.combine_send(buf.bytes() ? reinterpret_cast<void*>(256) : nullptr, s); }, "follows a dispatch_recv");
    refused("high-throughput call", [&] { buf.combine(reinterpret_cast<void*>(256), nullptr, nullptr, s); }, "low-latency mode");
    tw::EpConfig big = cfg;
    big.max_tokens_per_rank = tw::kEpMaxLowLatencyTokens + 1;
    refused("too many tokens", [&] { tw::EpBuffer b(comm, big); }, "low-latency mode's");
  });
  for (size_t q = 0; q < wrong.size(); ++q) EXPECT_EQ(wrong[q], "") << "rank " << q;
}

}  // namespace
