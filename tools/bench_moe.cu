// tools/bench_moe.cu — `tilewire bench moe`: the MoE FFN (tilewire/ops/moe.hpp) on the DeepSeek-V3
// and Qwen3-MoE layer shapes, with the rows that say where its time goes, all from one run:
//   gemms    the grouped gate-up GEMM, SiLU x up and the grouped down GEMM alone, on a packed
//            layout with the rows each of this rank's experts receives in the measured routing
//   ep       the EP's dispatch and combine alone (identity experts: the received rows go back)
//   unfused  MoE::forward: dispatch, the GEMMs, combine, one after another on one stream
//   fused    high throughput: MoE::forward with the fusions --fused names (default overlap,combine):
//            MoeConfig::overlap (the gate-up GEMM beside the dispatch, each tile waiting for its
//            rows) and MoeConfig::fused_combine (the combine sums each row's experts as it sends
//            it: no scatter), on the same inputs; its output must be the unfused call's bits
//            (#diff: elements that differ, counted as wrong); with swiglu (MoeConfig::gate_up
//            kInterleaved8: the SwiGLU in the gate-up GEMM's epilogue, weights interleaved once before
//            timing) the output is checked against the reference instead, and sgemms times the GEMMs
//            it runs alone; so is the output with slots (MoeConfig::slot_combine, with direct: the down
//            GEMM stores each row into its token's rank, which sums them with its own roundings)
// and ratios unfused / gemms and unfused / (gemms + ep): the cost of running the steps in sequence,
// and fused / gemms, fused / unfused.
//
//   tilewire bench moe [--virtual P] [--model dsv3|qwen3|all] [--tokens 128,512,2048,8192]
//                      [--mode ll|ht|both] [--routing uniform|skewed] [--iters 10] [-R 5] [--json FILE]
//                      [--trace FILE] [--fused overlap,combine] [--fused-ep-sms N] [--tile T]
//
// Ranks: one thread per local GPU (Comm::run_local), or --virtual P ranks on GPU 0 (each on its SM
// budget; times are P ranks sharing one GPU, not NVLink figures). Shapes: hidden 7168 / 4096, expert
// FFN 2048 / 1536, top-8 of 256 / 128 experts, T tokens per rank (low latency: T <= 1024).
// Inputs per rank are seeded: x and both weight tensors from gemm_bench::fill_operand, topk_idx
// distinct experts uniform or skewed (e = E u^3) over all experts, weights in [0.5, 1).
// Time: per repeat every rank's stream waits at a start gate (bench_gate.hpp), then `iters` calls;
// per call (ev1 - ev0) / iters; the median over repeats, the slowest rank. TFLOP/s: the team's
// expert FLOPs (2 x pairs x 3 x F x H) over the unfused time.
// #wrong: token 0 of every rank (all H columns) against an fp64 host reference that follows the
// library's bf16 roundings of h and act (tolerance as tests/gpu/moe_test.cu's), every element of
// the other tokens checked finite. High-throughput buffers hold 3 x T x 8 expert rows (an
// overflow counts as wrong).
// --trace FILE: the first high-throughput shape's fused forward traced once (MoE::set_trace:
// the dispatch's CTAs, each source's placement per CTA, the gate-up GEMM's tiles as their loads
// pass the gate), clocks aligned, written as Perfetto JSON; printed per rank: when the dispatch
// started, when its last placement ended, when the GEMM's first and last tiles passed the gate,
// and how many tiles passed it before the last placement ended (the overlap).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_gate.hpp"
#include "bench_gemm.hpp"  // fill_operand
#include "commands.hpp"
#include "ops/moe/kernels.hpp"
#include "tilewire/ops/grouped_gemm.hpp"
#include "tilewire/ops/moe.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/trace/trace.hpp"

namespace tw::cli {
namespace {

struct Model {
  const char* name;
  int hidden, ffn, experts;
};
constexpr Model kModels[] = {{"dsv3", 7168, 2048, 256}, {"qwen3", 4096, 1536, 128}};
constexpr int kTopK = 8;

struct Options {
  int virtual_ranks = 0;
  std::vector<const Model*> models;
  std::vector<int> tokens = {128, 512, 2048, 8192};
  std::vector<EpMode> modes = {EpMode::kLowLatency, EpMode::kHighThroughput};
  bool skewed = false;
  int iters = 10, repeats = 5;
  std::string json_path;
  std::string trace_path;
  int fused_ep_sms = 0;  // the fused forward's dispatch CTAs (EpConfig::num_sms; 0: its default)
  GroupedTile tile = GroupedTile::kAuto;  // every grouped GEMM's tile (GroupedGemmConfig::tile)
  bool fused_overlap = true, fused_combine = true;  // --fused: the fused row's fusions
  bool fused_swiglu = false, fused_direct = false, fused_slots = false;
  bool help = false;
  std::string fused_names() const {
    std::string n;
    for (auto [on, name] : {std::pair{fused_overlap, "overlap"}, {fused_combine, "combine"}, {fused_swiglu, "swiglu"},
                             {fused_direct, "direct"}, {fused_slots, "slots"}})
      if (on) n += (n.empty() ? "" : ",") + std::string(name);
    return n;
  }
};

constexpr const char* kUsage =
    "usage: tilewire bench moe [options]\n"
    "  --virtual P               P ranks on GPU 0 (default: one rank per local GPU)\n"
    "  --model dsv3|qwen3|all    DeepSeek-V3 (H 7168, F 2048, 256 experts) / Qwen3-MoE (4096, 1536, 128) (all)\n"
    "  --tokens T1,T2,..         tokens per rank (128,512,2048,8192; low latency only T <= 1024)\n"
    "  --mode ll|ht|both         EP mode (both)\n"
    "  --routing uniform|skewed  top-8 distinct experts, uniform or e = E u^3 (uniform)\n"
    "  --iters N -R N            calls per repeat (10), repeats (5)\n"
    "  --json FILE               also write every row as JSON\n"
    "  --trace FILE              the first high-throughput shape's fused forward traced (Perfetto JSON)\n"
    "  --fused F1,F2             the fused row's fusions (overlap,combine): overlap (MoeConfig::overlap: the\n"
    "                            gate-up GEMM beside the dispatch), combine (fused_combine: the combine sums each\n"
    "                            row's experts as it sends them), swiglu (MoeConfig::gate_up kInterleaved8: the\n"
    "                            SwiGLU in the gate-up GEMM's epilogue), direct (MoeConfig::direct_dispatch: the\n"
    "                            dispatch stores each row in its expert-major place), slots (MoeConfig::slot_combine,\n"
    "                            with direct: the down GEMM stores each row into its token's rank, which sums them)\n"
    "  --fused-ep-sms N          the fused forward's EP CTAs (EpConfig::num_sms; with overlap they also place the\n"
    "                            rows; default: the EP's, with overlap at most the SM budget - 1)\n"
    "  --tile T                  every grouped GEMM's tile: auto (the tile rule), 64x128pp, 64x256pp, 128x256coop\n";

int positive(const std::string& opt, const std::string& v) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TW_REQUIRE(used == v.size() && x > 0, kInvalidArgument, "bench moe: " + opt + " takes a positive integer, got '" + v + "'");
  return x;
}

Options parse(const std::vector<std::string>& argv) {
  Options o;
  std::string model = "all";
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
      continue;
    }
    TW_REQUIRE(i + 1 < argv.size(), kInvalidArgument, "bench moe: " + a + " needs a value (--help)");
    const std::string v = argv[++i];
    if (a == "--virtual") o.virtual_ranks = parse_virtual_ranks(a, v);
    else if (a == "--model") model = v;
    else if (a == "--tokens") {
      o.tokens.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) o.tokens.push_back(positive(a, t));
      TW_REQUIRE(!o.tokens.empty(), kInvalidArgument, "bench moe: --tokens needs a value");
    } else if (a == "--mode") {
      if (v == "both") o.modes = {EpMode::kLowLatency, EpMode::kHighThroughput};
      else {
        const std::optional<EpMode> m = parse_ep_mode(v);
        TW_REQUIRE(m.has_value(), kInvalidArgument, "bench moe: --mode ll|ht|both, got '" + v + "'");
        o.modes = {*m};
      }
    } else if (a == "--routing") {
      TW_REQUIRE(v == "uniform" || v == "skewed", kInvalidArgument, "bench moe: --routing uniform|skewed, got '" + v + "'");
      o.skewed = v == "skewed";
    } else if (a == "--iters") o.iters = positive(a, v);
    else if (a == "-R") o.repeats = positive(a, v);
    else if (a == "--json") o.json_path = v;
    else if (a == "--trace") o.trace_path = v;
    else if (a == "--fused-ep-sms") o.fused_ep_sms = positive(a, v);
    else if (a == "--tile") {
      const std::optional<GroupedTile> t = parse_grouped_tile(v);
      TW_REQUIRE(t.has_value(), kInvalidArgument,
                 "bench moe: --tile auto|64x128pp|64x256pp|128x256coop, got '" + v + "'");
      o.tile = *t;
    }
    else if (a == "--fused") {
      o.fused_overlap = o.fused_combine = o.fused_swiglu = o.fused_direct = o.fused_slots = false;
      std::stringstream list(v);
      for (std::string f; std::getline(list, f, ',');) {
        TW_REQUIRE(f == "overlap" || f == "combine" || f == "swiglu" || f == "direct" || f == "slots", kInvalidArgument,
                   "bench moe: --fused takes overlap, combine, swiglu, direct, slots separated by commas, got '" + v + "'");
        (f == "overlap" ? o.fused_overlap : f == "combine" ? o.fused_combine : f == "swiglu" ? o.fused_swiglu
                                          : f == "direct"  ? o.fused_direct  : o.fused_slots) = true;
      }
      TW_REQUIRE(o.fused_overlap || o.fused_combine || o.fused_swiglu || o.fused_direct, kInvalidArgument,
                 "bench moe: --fused needs at least one fusion");
      TW_REQUIRE(!o.fused_slots || o.fused_direct, kInvalidArgument,
                 "bench moe: --fused slots needs direct (its rows go back from the direct dispatch's places)");
      TW_REQUIRE(!(o.fused_overlap && o.fused_direct), kInvalidArgument,
                 "bench moe: --fused overlap and direct are two ways to lay the receive out; name one");
    }
    else TW_REQUIRE(false, kInvalidArgument, "bench moe: unknown option '" + a + "' (--help)");
  }
  for (const Model& m : kModels)
    if (model == "all" || model == m.name) o.models.push_back(&m);
  TW_REQUIRE(!o.models.empty(), kInvalidArgument, "bench moe: --model dsv3|qwen3|all, got '" + model + "'");
  return o;
}

// The host mirror of gemm_bench::fill_operand's bf16 values (bench_gemm.cu): uniform in [-1, 1)
// from (seed, i), rounded to bf16 (nearest even).
float fill_value(uint64_t seed, size_t i) {
  uint64_t z = (seed + i) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return float(__nv_bfloat16(((float)(z >> 40) / (float)(1u << 24)) * 2.f - 1.f));
}
float round_bf16(double v) { return float(__nv_bfloat16(float(v))); }

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 31);
}

// Rank q's routing: top-8 distinct experts per token, weights in [0.5, 1).
void routing(int q, int T, int E, bool skewed, std::vector<int64_t>* idx, std::vector<float>* w) {
  idx->assign(size_t(T) * kTopK, -1), w->assign(size_t(T) * kTopK, 0.f);
  for (int t = 0; t < T; ++t)
    for (int j = 0, tries = 0; j < kTopK; ++tries) {
      const uint64_t u = mix(uint64_t(q) * 1000003 + 17, uint64_t(t) * 4096 + tries);
      const double f = double(u % 1000003) / 1000003.0;
      const int64_t e = skewed ? std::min<int64_t>(E - 1, int64_t(E * f * f * f)) : int64_t(u % E);
      bool dup = false;
      for (int k = 0; k < j; ++k) dup = dup || (*idx)[size_t(t) * kTopK + k] == e;
      if (dup && tries < 1000) continue;
      (*idx)[size_t(t) * kTopK + j] = e;
      (*w)[size_t(t) * kTopK + j] = 0.5f + 0.5f * float((u >> 40) % 1024) / 1024.f;
      ++j;
    }
}

struct Row {
  std::string model, mode;
  int tokens = 0, ranks = 0;
  long long pairs_max = 0, pairs_total = 0;
  double gemms_us = 0, ep_us = 0, unfused_us = 0, fused_us = 0;  // fused: 0 where not run (low latency)
  double sgemms_us = 0;  // --fused swiglu: the GEMMs alone with the SwiGLU epilogue (0: not run)
  unsigned long long wrong = 0, diff = 0;
  bool diff_checked = false;  // the fused output's bits against unfused's (not with swiglu: other roundings)
  double flops = 0;
};

struct Shared {
  std::mutex mu;
  std::vector<std::vector<double>> times;
  std::vector<long long> pairs;
  std::vector<unsigned long long> wrong, diff;
};

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { TW_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~Dev() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

__global__ void count_diff(const uint16_t* a, const uint16_t* b, size_t n, unsigned long long* diff) {
  unsigned long long d = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    d += a[i] != b[i];
  if (d) atomicAdd(diff, d);
}

__global__ void count_bad(const __nv_bfloat16* p, size_t n, unsigned long long* bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    b += !isfinite(__bfloat162float(p[i]));
  if (b) atomicAdd(bad, b);
}

class MoeBench {
 public:
  MoeBench(const Options& o, int P) : traced_(P, 0), o_(o), P_(P), barrier_(P), gen_(P, 0) {
    sh_.times.resize(P), sh_.pairs.resize(P), sh_.wrong.resize(P), sh_.diff.resize(P);
  }
  void run(Comm& comm);
  std::vector<Row> rows;

 private:
  // The median time per call of `op` on this rank (gated repeats); every rank calls it in turn.
  template <class Op>
  double time(Comm& comm, cudaStream_t s, Op op);
  double slowest(Comm& comm, double mine);  // max over ranks
  unsigned long long check(const Model& m, int me, int T, const std::vector<std::vector<int64_t>>& idx,
                           const std::vector<std::vector<float>>& w, const std::vector<uint16_t>& out0,
                           bool swiglu = false);
  // One fused forward traced on every rank (collective); rank 0 writes the file and the summary.
  void trace_fused(Comm& comm, MoE& moe, const MoeArgs& a, cudaStream_t s);
  std::vector<uint8_t> traced_;  // per rank: its first high-throughput shape was traced
  const Options& o_;
  const int P_;
  HostBarrier barrier_;
  StartGate gate_;
  std::vector<uint32_t> gen_;
  Shared sh_;
};

void MoeBench::trace_fused(Comm& comm, MoE& moe, const MoeArgs& a, cudaStream_t s) {
  const int me = comm.rank();
  trace::TraceBuffer buf(1u << 20);
  const trace::ClockSync cs = trace::measure_clock_offsets(comm);
  buf.reset(s);
  moe.set_trace(buf.ring(me));
  comm.sync(s);
  comm.barrier();
  moe.forward(a, s);
  comm.sync(s);
  moe.set_trace(trace::Ring{});
  const trace::Trace t = trace::gather_trace(comm, buf, cs, s);
  traced_[me] = 1;
  if (me == 0) {
    const trace::Metrics m = trace::compute_metrics(t);
    trace::save_trace_file(o_.trace_path, t, &m);
    std::printf("# trace, fused forward: %zu events, %llu dropped, clock residual %lld ns -> %s\n", t.events.size(),
                (unsigned long long)t.dropped, (long long)t.residual_ns, o_.trace_path.c_str());
    // Per rank, on rank 0's clock (us from the first event): the dispatch's first CTA start, the
    // end of its last placement (chunk_recv kEpTracePlaced + q), the gate-up GEMM's first and
    // last tile past the gate (mma_start), and the tiles past it before the last placement.
    const std::vector<trace::Event> ev = t.align();
    const uint64_t t0 = ev.empty() ? 0 : ev.front().t_ns;
    for (int r = 0; r < t.nranks; ++r) {
      uint64_t start = ~0ull, placed = 0, first = ~0ull, last = 0;
      std::vector<uint64_t> tiles;
      for (const trace::Event& e : ev) {
        if (e.rank != r) continue;
        const auto k = trace::EventKind(e.kind);
        if (k == trace::EventKind::kKernelStart && e.id < kEpTraceCombine) start = std::min<uint64_t>(start, e.t_ns);
        if (k == trace::EventKind::kChunkRecv && e.id >= kEpTracePlaced) placed = std::max<uint64_t>(placed, e.t_ns);
        if (k == trace::EventKind::kMmaStart) {
          tiles.push_back(e.t_ns);
          first = std::min<uint64_t>(first, e.t_ns), last = std::max<uint64_t>(last, e.t_ns);
        }
      }
      const auto us = [&](uint64_t x) { return x == ~0ull ? -1.0 : double(x - t0) * 1e-3; };
      const size_t early = size_t(std::count_if(tiles.begin(), tiles.end(), [&](uint64_t x) { return x < placed; }));
      std::printf("# rank %d: dispatch start %.1f us, last placement %.1f us, GEMM tiles past the gate %.1f .. %.1f us, "
                  "%zu of %zu before the last placement\n",
                  r, us(start), us(placed), us(first), us(last), early, tiles.size());
    }
    std::fputs(trace::format_metrics(m).c_str(), stdout);
  }
  barrier_.arrive_and_wait("bench moe trace written");
}

template <class Op>
double MoeBench::time(Comm& comm, cudaStream_t s, Op op) {
  const int me = comm.rank();
  op();
  comm.sync(s);
  cudaEvent_t e0, e1;
  TW_CUDA_CHECK(cudaEventCreate(&e0));
  TW_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int r = 0; r < o_.repeats; ++r) {
    const uint32_t g = ++gen_[me];
    gate_.hold(s, g);
    TW_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < o_.iters; ++i) op();
    TW_CUDA_CHECK(cudaEventRecord(e1, s));
    barrier_.arrive_and_wait("bench moe repeat");
    if (me == 0) gate_.open(g);
    comm.sync(s);
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3 / o_.iters);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return slowest(comm, median(t));
}

double MoeBench::slowest(Comm& comm, double mine) {
  {
    std::lock_guard<std::mutex> lk(sh_.mu);
    sh_.times[comm.rank()] = {mine};
  }
  barrier_.arrive_and_wait("bench moe times");
  double m = 0;
  for (int q = 0; q < P_; ++q) m = std::max(m, sh_.times[q][0]);
  barrier_.arrive_and_wait("bench moe times read");
  return m;
}

// Token 0 of rank me against the fp64 reference (header); the number of columns outside it.
// swiglu: the gate and up values are not rounded to bf16 before the activation (MoeGateUp::kInterleaved8).
unsigned long long MoeBench::check(const Model& m, int me, int T, const std::vector<std::vector<int64_t>>& idx,
                                   const std::vector<std::vector<float>>& w, const std::vector<uint16_t>& out0,
                                   bool swiglu) {
  if (T == 0) return 0;
  const int H = m.hidden, F = m.ffn, L = m.experts / P_;
  std::vector<double> x(H), h(2 * F), act(F), gu(F), ref(H, 0.0), tol(H, 0.0);
  for (int c = 0; c < H; ++c) x[c] = fill_value(3000 + me, size_t(c));
  for (int j = 0; j < kTopK; ++j) {
    const int64_t e = idx[me][j];
    if (e < 0) continue;
    const int d = int(e / L), l = int(e % L);
    const size_t w1 = size_t(l) * 2 * F * H, w2 = size_t(l) * H * F;
    for (int r = 0; r < 2 * F; ++r) {
      double s = 0;
      for (int c = 0; c < H; ++c) s += double(fill_value(4000 + d, w1 + size_t(r) * H + c)) * x[c];
      h[r] = swiglu ? s : round_bf16(s);
    }
    for (int f = 0; f < F; ++f) {
      act[f] = round_bf16(h[f] / (1.0 + std::exp(-h[f])) * h[F + f]);
      gu[f] = std::fabs(h[f] * h[F + f]);
    }
    for (int c = 0; c < H; ++c) {
      double s = 0, mag = 0;
      for (int f = 0; f < F; ++f) {
        const double v = fill_value(5000 + d, w2 + size_t(c) * F + f);
        s += v * act[f], mag += std::fabs(v) * gu[f];
      }
      ref[c] += w[me][j] * s, tol[c] += std::fabs(w[me][j]) * std::ldexp(mag, -7);
    }
  }
  unsigned long long bad = 0;
  for (int c = 0; c < H; ++c) {
    uint32_t bits = uint32_t(out0[c]) << 16;
    float got;
    std::memcpy(&got, &bits, 4);
    bad += !(std::fabs(got - ref[c]) <= tol[c] + std::ldexp(std::fabs(ref[c]), -8) + 1e-30);
  }
  return bad;
}

void MoeBench::run(Comm& comm) {
  const int me = comm.rank();
  cudaStream_t s;
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int dev_sms = 0;
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, comm.device()));
  for (const Model* mp : o_.models)
    for (EpMode mode : o_.modes)
      for (int T : o_.tokens) {
        const Model& m = *mp;
        if (mode == EpMode::kLowLatency && T > kEpMaxLowLatencyTokens) continue;
        const int H = m.hidden, F = m.ffn, E = m.experts, L = E / P_;
        std::vector<std::vector<int64_t>> idx(P_);
        std::vector<std::vector<float>> w(P_);
        for (int q = 0; q < P_; ++q) routing(q, T, E, o_.skewed, &idx[q], &w[q]);
        std::vector<int> counts(L, 0);  // this rank's experts' rows
        for (int q = 0; q < P_; ++q)
          for (int64_t e : idx[q])
            if (e >= 0 && e / L == me) ++counts[size_t(e % L)];
        long long pairs = 0;
        std::vector<int> offsets(L, 0);
        for (int l = 0; l < L; ++l) offsets[l] = int(pairs), pairs += counts[l];

        MoeConfig cfg;
        cfg.ep.mode = mode, cfg.ep.max_tokens_per_rank = T, cfg.ep.hidden = H, cfg.ep.topk = kTopK;
        cfg.ep.num_experts = E, cfg.ffn = F;
        cfg.gemm.rows_hint = std::max(1, T * kTopK * P_ / E);  // rows per local expert, uniform routing
        cfg.gemm.tile = o_.tile;
        if (mode == EpMode::kHighThroughput) cfg.max_expert_rows = 3 * T * kTopK;
        Dev x(size_t(T) * H * 2), didx(size_t(T) * kTopK * 8), dw(size_t(T) * kTopK * 4), out(size_t(T) * H * 2);
        Dev w1(size_t(L) * 2 * F * H * 2), w2(size_t(L) * H * F * 2);
        gemm_bench::fill_operand(x.p, size_t(T) * H, DType::kBFloat16, 3000 + me, s);
        gemm_bench::fill_operand(w1.p, size_t(L) * 2 * F * H, DType::kBFloat16, 4000 + me, s);
        gemm_bench::fill_operand(w2.p, size_t(L) * H * F, DType::kBFloat16, 5000 + me, s);
        TW_CUDA_CHECK(cudaMemcpyAsync(didx.p, idx[me].data(), idx[me].size() * 8, cudaMemcpyHostToDevice, s));
        TW_CUDA_CHECK(cudaMemcpyAsync(dw.p, w[me].data(), w[me].size() * 4, cudaMemcpyHostToDevice, s));
        // The GEMMs alone: packed rows, this rank's counts.
        Dev ga(size_t(pairs) * H * 2), gh(size_t(pairs) * 2 * F * 2), gact(size_t(pairs) * F * 2),
            gout(size_t(pairs) * H * 2), gcounts(size_t(L) * 4), goffsets(size_t(L) * 4), bad(8);
        gemm_bench::fill_operand(ga.p, size_t(pairs) * H, DType::kBFloat16, 6000 + me, s);
        TW_CUDA_CHECK(cudaMemcpyAsync(gcounts.p, counts.data(), size_t(L) * 4, cudaMemcpyHostToDevice, s));
        TW_CUDA_CHECK(cudaMemcpyAsync(goffsets.p, offsets.data(), size_t(L) * 4, cudaMemcpyHostToDevice, s));
        comm.sync(s);

        GroupedGemmConfig gc = cfg.gemm;
        gc.reserved_sms = std::max(0, dev_sms - comm.sm_count());
        GroupedGemmArgs up, down;
        up.A = ga.p, up.B = w1.p, up.C = gh.p, up.N = 2 * F, up.K = H;
        down.A = gact.p, down.B = w2.p, down.C = gout.p, down.N = H, down.K = F;
        for (GroupedGemmArgs* g : {&up, &down})
          g->counts = gcounts.as<int>(), g->offsets = goffsets.as<int>(), g->groups = L, g->rows = int(pairs);
        Row row;
        row.model = m.name, row.mode = ep_mode_name(mode), row.tokens = T, row.ranks = P_;
        row.gemms_us = time(comm, s, [&] {
          grouped_gemm(up, gc, s);
          ops::moe::silu_mul(gh.p, gcounts.as<int>(), goffsets.as<int>(), 0, L, F, int(pairs), gact.p, s);
          grouped_gemm(down, gc, s);
        });
        // --fused swiglu: the gate-up weights in MoeGateUp::kInterleaved8 (made once, as a user would at
        // load), and the GEMMs alone with the SwiGLU in the gate-up GEMM's epilogue.
        const bool swiglu = o_.fused_swiglu && mode == EpMode::kHighThroughput;
        Dev w1i(swiglu ? size_t(L) * 2 * F * H * 2 : 16);
        if (swiglu) {
          interleave_gate_up(w1.p, w1i.p, L, F, H, s);
          GroupedGemmArgs sup = up;
          sup.B = w1i.p, sup.C = gact.p, sup.epilogue = GroupedEpilogue::kSwiGlu;
          row.sgemms_us = time(comm, s, [&] {
            grouped_gemm(sup, gc, s);
            grouped_gemm(down, gc, s);
          });
        }

        auto moe_ptr = std::make_unique<MoE>(comm, cfg);
        MoE& moe = *moe_ptr;
        MoeArgs a;
        a.x = x.p, a.num_tokens = T, a.topk_idx = didx.p, a.topk_weights = dw.as<float>();
        a.w_gate_up = w1.p, a.w_down = w2.p, a.out = out.p;
        EpBuffer& ep = moe.ep();
        row.ep_us = time(comm, s, [&] {  // identity experts
          if (mode == EpMode::kLowLatency) {
            ep.dispatch_send(EpLowLatencyArgs{x.p, T, didx.p, EpIndex::kInt64}, s);
            const EpLowLatencyRecv r = ep.dispatch_recv(s);
            ep.combine_send(r.x, s);
            ep.combine_recv(dw.as<float>(), out.p, s);
          } else {
            EpDispatchArgs d;
            d.x = x.p, d.num_tokens = T, d.topk_idx = didx.p, d.topk_weights = dw.as<float>();
            const EpRecv r = ep.dispatch(d, s);
            ep.combine(r.x, nullptr, out.p, s);
          }
        });
        row.unfused_us = time(comm, s, [&] { moe.forward(a, s); });

        unsigned long long wrong = 0;
        try {
          moe.check(s);
        } catch (const Error& e) {
          std::fprintf(stderr, "# rank %d: %s\n", me, e.what());
          wrong += 1;
        }
        TW_CUDA_CHECK(cudaMemsetAsync(bad.p, 0, 8, s));
        count_bad<<<256, 256, 0, s>>>(out.as<__nv_bfloat16>(), size_t(T) * H, bad.as<unsigned long long>());
        std::vector<uint16_t> out0(H);
        TW_CUDA_CHECK(cudaMemcpyAsync(out0.data(), out.p, size_t(H) * 2, cudaMemcpyDeviceToHost, s));
        unsigned long long nonfinite = 0;
        TW_CUDA_CHECK(cudaMemcpyAsync(&nonfinite, bad.p, 8, cudaMemcpyDeviceToHost, s));
        comm.sync(s);
        wrong += nonfinite + check(m, me, T, idx, w, out0);
        // The overlapped forward on the same inputs (one MoE's buffers at a time), and its bits
        // against the unfused call's.
        unsigned long long diff = 0;
        if (mode == EpMode::kHighThroughput) {
          Dev out_seq(size_t(T) * H * 2);
          TW_CUDA_CHECK(cudaMemcpyAsync(out_seq.p, out.p, size_t(T) * H * 2, cudaMemcpyDeviceToDevice, s));
          comm.sync(s);
          barrier_.arrive_and_wait("bench moe unfused done");
          moe_ptr.reset();
          cfg.overlap = o_.fused_overlap;
          cfg.fused_combine = o_.fused_combine;
          cfg.direct_dispatch = o_.fused_direct;
          cfg.slot_combine = o_.fused_slots;
          if (swiglu) cfg.gate_up = MoeGateUp::kInterleaved8, a.w_gate_up = w1i.p;
          if (o_.fused_overlap || o_.fused_ep_sms > 0) cfg.ep.num_sms = o_.fused_ep_sms;
          MoE fused(comm, cfg);
          row.fused_us = time(comm, s, [&] { fused.forward(a, s); });
          if (!o_.trace_path.empty() && !traced_[me]) trace_fused(comm, fused, a, s);
          try {
            fused.check(s);
          } catch (const Error& e) {
            std::fprintf(stderr, "# rank %d (overlap): %s\n", me, e.what());
            wrong += 1;
          }
          TW_CUDA_CHECK(cudaMemsetAsync(bad.p, 0, 8, s));
          const bool own_bits = swiglu || o_.fused_slots;  // other roundings than unfused
          if (own_bits) {  // checked against the reference instead
            count_bad<<<256, 256, 0, s>>>(out.as<__nv_bfloat16>(), size_t(T) * H, bad.as<unsigned long long>());
            TW_CUDA_CHECK(cudaMemcpyAsync(out0.data(), out.p, size_t(H) * 2, cudaMemcpyDeviceToHost, s));
          } else {
            count_diff<<<256, 256, 0, s>>>(out.as<uint16_t>(), out_seq.as<uint16_t>(), size_t(T) * H,
                                           bad.as<unsigned long long>());
          }
          unsigned long long n = 0;
          TW_CUDA_CHECK(cudaMemcpyAsync(&n, bad.p, 8, cudaMemcpyDeviceToHost, s));
          comm.sync(s);
          if (own_bits) wrong += n + check(m, me, T, idx, w, out0, swiglu);
          else diff = n;
          barrier_.arrive_and_wait("bench moe fused done");  // no rank frees the MoE while a peer's kernel reads it
        }
        {
          std::lock_guard<std::mutex> lk(sh_.mu);
          sh_.pairs[me] = pairs, sh_.wrong[me] = wrong + diff, sh_.diff[me] = diff;
        }
        barrier_.arrive_and_wait("bench moe results");
        if (me == 0) {
          for (int q = 0; q < P_; ++q) {
            row.pairs_max = std::max(row.pairs_max, sh_.pairs[q]);
            row.pairs_total += sh_.pairs[q];
            row.wrong += sh_.wrong[q];
            row.diff += sh_.diff[q];
          }
          row.flops = 2.0 * double(row.pairs_total) * 3.0 * F * H;
          row.diff_checked = mode == EpMode::kHighThroughput && !swiglu && !o_.fused_slots;
          rows.push_back(row);
          std::printf("%-6s %-3s %6d %3d %8lld %10.1f %10.1f %11.1f %8.3f %8.3f %10.1f %8.3f %8.3f %10.1f %8.3f %8.1f %7llu %6s\n",
                      row.model.c_str(), row.mode.c_str(), T, P_, row.pairs_max, row.gemms_us, row.ep_us,
                      row.unfused_us, row.unfused_us / row.gemms_us, row.unfused_us / (row.gemms_us + row.ep_us),
                      row.fused_us, row.fused_us / row.gemms_us, row.fused_us / row.unfused_us, row.sgemms_us,
                      row.sgemms_us > 0 ? row.fused_us / row.sgemms_us : 0.0,
                      row.flops / (row.unfused_us * 1e-6) / 1e12, row.wrong,
                      row.diff_checked ? std::to_string(row.diff).c_str() : "-");
          std::fflush(stdout);
        }
        comm.sync(s);
        barrier_.arrive_and_wait("bench moe shape done");  // no rank frees what a peer's kernel may still read
      }
  cudaStreamDestroy(s);
}

}  // namespace

int bench_moe(const std::vector<std::string>& argv) {
  const Options o = parse(argv);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const int ndev = require_gpus("bench moe");
  const int P = o.virtual_ranks > 0 ? o.virtual_ranks : ndev;
  for (const Model* m : o.models)
    TW_REQUIRE(m->experts % P == 0, kInvalidArgument,
               "bench moe: " + std::to_string(P) + " ranks do not divide " + m->name + "'s " +
                   std::to_string(m->experts) + " experts");
  cudaDeviceProp prop{};
  TW_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# tilewire bench moe: %s, %d ranks%s, top-%d, routing %s, bf16, fused: %s, fused dispatch CTAs %s, "
              "tile %s\n",
              prop.name, P, o.virtual_ranks > 0 ? " (virtual, one GPU)" : "", kTopK, o.skewed ? "skewed" : "uniform",
              o.fused_names().c_str(), o.fused_ep_sms > 0 ? std::to_string(o.fused_ep_sms).c_str() : "default",
              grouped_tile_name(o.tile));
  std::printf("%-6s %-3s %6s %3s %8s %10s %10s %11s %8s %8s %10s %8s %8s %10s %8s %8s %7s %6s\n", "model", "ep", "tokens",
              "P", "pairs", "gemms_us", "ep_us", "unfused_us", "/gemms", "/g+ep", "fused_us", "f/gemms", "f/unfus",
              "sgemms_us", "f/sgemm", "TF/s", "#wrong", "#diff");
  MoeBench bench(o, P);
  const auto fn = [&](Comm& comm) { bench.run(comm); };
  if (o.virtual_ranks > 0) Comm::run_virtual(0, P, fn);
  else Comm::run_local({}, fn);
  std::printf("# pairs: the most (token, expert) rows a rank's experts received; /gemms, /g+ep: unfused over the\n"
              "# GEMMs alone and over GEMMs + EP alone; fused (high throughput): the forward with --fused's fusions, f/gemms and\n"
              "# f/unfus its time over the GEMMs alone and over unfused; TF/s: the team's expert FLOPs over the unfused\n"
              "# time; #diff: elements of the fused output that differ from the unfused one's bits (counted in #wrong);\n"
              "# swiglu (MoeGateUp::kInterleaved8): sgemms_us, its GEMMs alone (gate-up with the SwiGLU epilogue, down),\n"
              "# f/sgemm the fused time over them; its output is checked against the reference, not against unfused's\n"
              "# bits (#diff -: the activation is rounded once from unrounded gate and up values); so is slots' (the\n"
              "# source sums its tokens' expert rows, not per-rank sums)\n");
  bool ok = true;
  std::ostringstream j;
  for (size_t i = 0; i < bench.rows.size(); ++i) {
    const Row& r = bench.rows[i];
    ok = ok && r.wrong == 0;
    j << (i ? "," : "") << "{\"model\":\"" << r.model << "\",\"mode\":\"" << r.mode << "\",\"tokens\":" << r.tokens
      << ",\"ranks\":" << r.ranks << ",\"pairs_max\":" << r.pairs_max << ",\"pairs_total\":" << r.pairs_total
      << ",\"gemms_us\":" << r.gemms_us << ",\"ep_us\":" << r.ep_us << ",\"unfused_us\":" << r.unfused_us
      << ",\"fused_us\":" << r.fused_us << ",\"sgemms_us\":" << r.sgemms_us
      << ",\"tflops\":" << r.flops / (r.unfused_us * 1e-6) / 1e12 << ",\"wrong\":" << r.wrong << ",\"diff\":"
      << (r.diff_checked ? std::to_string(r.diff) : std::string("null")) << "}";
  }
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(f.good(), kInvalidArgument, "--json " + o.json_path + ": cannot open for writing");
    f << "{\"bench\":\"moe\",\"device\":\"" << prop.name << "\",\"ranks\":" << P
      << ",\"virtual\":" << (o.virtual_ranks > 0 ? "true" : "false") << ",\"routing\":\""
      << (o.skewed ? "skewed" : "uniform") << "\",\"fused_ep_sms\":" << o.fused_ep_sms << ",\"tile\":\""
      << grouped_tile_name(o.tile) << "\",\"fused\":\""
      << o.fused_names() << "\",\"rows\":[" << j.str() << "],\"ok\":" << (ok ? "true" : "false")
      << "}\n";
    std::printf("# wrote %s\n", o.json_path.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace tw::cli
