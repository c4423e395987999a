// tools/bench_grouped.cu — `tilewire bench gemm --grouped`: tw::grouped_gemm (ops/grouped_gemm.hpp)
// on the expert GEMMs of an MoE layer, against two baselines from the same run on the same inputs:
//   loop    cuBLASLt, one GEMM per non-empty group in turn (what a framework without a grouped
//           kernel runs; each group's algorithm chosen once, before timing)
//   dense   cuBLASLt on one GEMM of all the rows against one expert's B: the same FLOPs without
//           the grouping, the ceiling a grouped kernel can aim for
//   cublas  cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx: the experts with the same row count
//           one batch; shapes from the host), where the loaded libcublas has it (else n/a)
//
//   tilewire bench gemm --grouped [--sweep moe] [--model dsv3|qwen3] [--gemm gateup|down]
//                                 [--tokens 128,512,2048,8192] [--ep 8] [--routing uniform|skewed]
//                                 [--tiles auto;64x128pp;64x256pp;128x256coop] [--iters 20] [--warmup 5] [-R 5]
//                                 [--reserved-sms N] [--json FILE]
//
// Shapes: DeepSeek-V3 (hidden 7168, expert FFN 2048, 256 experts) and Qwen3-MoE (4096, 1536, 128),
// top-8, at EP `--ep`: a rank holds E / ep experts (the groups) and, for T tokens per rank with
// every rank routing alike, receives T x 8 rows. gateup: N = 2 x FFN, K = hidden; down: N = hidden,
// K = FFN. Rows per group: uniform (T x 8 / L each, the remainder to the first groups) or skewed
// (group g gets a share proportional to 1 / (g + 1): the first expert about a fifth of the rows).
// Packed layout (offsets on the device), B as [L, N, K].
//
// Time: CUDA events around `iters` back-to-back calls, median of `repeats`, every candidate timed
// in turn (the first rotating) after a warm-up of all of them. B for one call is L x N x K bf16
// (0.4-1.9 GB at these shapes), far beyond the L2, so one input set is timed. TFLOP/s: 2 x rows x
// N x K / time. #wrong: elements of tilewire's C farther from the loop's than 2^-6 |want| + 2^-6;
// #wrongB the same for cuBLAS's grouped C.
// Exit 0 when every check passed, 1 when not.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.hpp"  // median
#include "bench_gemm.hpp"
#include "ops/gemm/cublaslt.hpp"
#include "tilewire/ops/grouped_gemm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::cli::gemm_bench {
namespace {

struct Model {
  const char* name;
  int hidden, ffn, experts;
};
constexpr Model kModels[] = {{"dsv3", 7168, 2048, 256}, {"qwen3", 4096, 1536, 128}};
constexpr int kTopK = 8;

struct Args {
  std::vector<const Model*> models;
  std::vector<std::string> gemms = {"gateup", "down"};
  std::vector<int> tokens = {128, 512, 2048, 8192};
  int ep = 8;
  std::string routing = "uniform";
  std::vector<GroupedTile> tiles = {GroupedTile::kAuto};
  int iters = 20, warmup = 5, repeats = 5;
  int reserved_sms = 0;  // tilewire's GEMM leaves these SMs idle (GroupedGemmConfig::reserved_sms)
  std::string json_path;
  bool help = false;
};

constexpr const char* kUsage =
    "usage: tilewire bench gemm --grouped [options]\n"
    "  --model dsv3|qwen3|all    DeepSeek-V3 (H 7168, F 2048, 256 experts) / Qwen3-MoE (H 4096, F 1536, 128) (all)\n"
    "  --gemm gateup|down|all    gate-up (N 2F, K H) or down (N H, K F) (all)\n"
    "  --tokens T1,T2,..         tokens per rank (128,512,2048,8192); rows per rank: T x 8\n"
    "  --ep N                    expert-parallel ranks: groups = experts / N (8)\n"
    "  --routing uniform|skewed  rows per group (uniform)\n"
    "  --tiles T1;T2;..          tilewire's tiles timed: auto, 64x128pp, 64x256pp, 128x256coop (auto)\n"
    "  --iters N --warmup N -R N timed calls per repeat (20), untimed first (5), repeats (5)\n"
    "  --reserved-sms N          tilewire's GEMM on the other SMs only (a virtual rank's budget, alone on\n"
    "                            the GPU); the baselines keep every SM, so their ratios do not compare tiles (0)\n"
    "  --json FILE               also write every row as JSON\n";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, sep);)
    if (!p.empty()) out.push_back(p);
  return out;
}

int positive(const std::string& opt, const std::string& v) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TW_REQUIRE(used == v.size() && x > 0, kInvalidArgument,
             "bench gemm --grouped: " + opt + " takes a positive integer, got '" + v + "'");
  return x;
}

Args parse(const std::vector<std::string>& argv) {
  Args a;
  std::string model = "all", gemm = "all";
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& o = argv[i];
    if (o == "-h" || o == "--help") {
      a.help = true;
      continue;
    }
    TW_REQUIRE(i + 1 < argv.size(), kInvalidArgument, "bench gemm --grouped: " + o + " needs a value (--help)");
    const std::string v = argv[++i];
    if (o == "--sweep") TW_REQUIRE(v == "moe", kInvalidArgument, "bench gemm --grouped: --sweep moe, got '" + v + "'");
    else if (o == "--model") model = v;
    else if (o == "--gemm") gemm = v;
    else if (o == "--tokens") {
      a.tokens.clear();
      for (const std::string& t : split(v, ',')) a.tokens.push_back(positive(o, t));
      TW_REQUIRE(!a.tokens.empty(), kInvalidArgument, "bench gemm --grouped: --tokens needs a value");
    } else if (o == "--ep") a.ep = positive(o, v);
    else if (o == "--routing") {
      TW_REQUIRE(v == "uniform" || v == "skewed", kInvalidArgument,
                 "bench gemm --grouped: --routing uniform|skewed, got '" + v + "'");
      a.routing = v;
    } else if (o == "--tiles") {
      a.tiles.clear();
      for (const std::string& t : split(v, ';')) {
        const std::optional<GroupedTile> g = parse_grouped_tile(t);
        TW_REQUIRE(g.has_value(), kInvalidArgument,
                   "bench gemm --grouped: --tiles takes auto, 64x128pp, 64x256pp, 128x256coop; got '" + t + "'");
        a.tiles.push_back(*g);
      }
      TW_REQUIRE(!a.tiles.empty(), kInvalidArgument, "bench gemm --grouped: --tiles needs a tile");
    } else if (o == "--iters") a.iters = positive(o, v);
    else if (o == "--warmup") a.warmup = positive(o, v);
    else if (o == "-R") a.repeats = positive(o, v);
    else if (o == "--reserved-sms") a.reserved_sms = positive(o, v);
    else if (o == "--json") a.json_path = v;
    else TW_REQUIRE(false, kInvalidArgument, "bench gemm --grouped: unknown option '" + o + "' (--help)");
  }
  for (const Model& m : kModels)
    if (model == "all" || model == m.name) a.models.push_back(&m);
  TW_REQUIRE(!a.models.empty(), kInvalidArgument, "bench gemm --grouped: --model dsv3|qwen3|all, got '" + model + "'");
  if (gemm != "all") {
    TW_REQUIRE(gemm == "gateup" || gemm == "down", kInvalidArgument,
               "bench gemm --grouped: --gemm gateup|down|all, got '" + gemm + "'");
    a.gemms = {gemm};
  }
  for (const Model* m : a.models)
    TW_REQUIRE(m->experts % a.ep == 0, kInvalidArgument,
               "bench gemm --grouped: --ep " + std::to_string(a.ep) + " does not divide " + m->name + "'s " +
                   std::to_string(m->experts) + " experts");
  return a;
}

// Rows per group for `rows` rows over `groups` groups.
std::vector<int> group_counts(int rows, int groups, const std::string& routing) {
  std::vector<int> c(groups, 0);
  if (routing == "uniform") {
    for (int g = 0; g < groups; ++g) c[g] = rows / groups + (g < rows % groups ? 1 : 0);
    return c;
  }
  double h = 0;
  for (int g = 0; g < groups; ++g) h += 1.0 / (g + 1);
  int given = 0;
  for (int g = 0; g < groups; ++g) given += c[g] = int(rows / h / (g + 1));
  for (int g = 0; given < rows; g = (g + 1) % groups) ++c[g], ++given;
  return c;
}

struct Row {
  std::string model, gemm, tile;
  int tokens = 0, groups = 0, rows = 0, N = 0, K = 0;
  double tw_us = 0, loop_us = 0, dense_us = 0, cublas_us = 0;  // cublas_us 0: n/a
  unsigned long long wrong = 0, cublas_wrong = 0;  // cublas_wrong: cuBLAS's grouped C against the loop's
  double tflops(double us) const { return us > 0 ? 2.0 * rows * double(N) * K / (us * 1e-6) / 1e12 : 0; }
};

// Candidates timed in turn (the first rotating each repeat) after a warm-up of all of them that
// lasts at least kWarmMs of GPU time (an H200's clocks settle under load: bench_gemm.cu).
std::vector<double> time_all(const Args& a, cudaStream_t st, const std::vector<std::function<void()>>& calls) {
  cudaEvent_t e0, e1;
  TW_CUDA_CHECK(cudaEventCreate(&e0));
  TW_CUDA_CHECK(cudaEventCreate(&e1));
  auto timed = [&](const std::function<void()>& f, int n) {
    TW_CUDA_CHECK(cudaEventRecord(e0, st));
    for (int i = 0; i < n; ++i) f();
    TW_CUDA_CHECK(cudaEventRecord(e1, st));
    TW_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return double(ms);
  };
  double warmed = 0;
  for (int round = 0; round < 1000 && (round == 0 || warmed < kWarmMs); ++round)
    for (const auto& f : calls) warmed += timed(f, a.warmup);
  std::vector<std::vector<double>> t(calls.size());
  for (int r = 0; r < a.repeats; ++r)
    for (size_t j = 0; j < calls.size(); ++j) {
      const size_t c = (j + size_t(r)) % calls.size();
      t[c].push_back(timed(calls[c], a.iters) * 1e3 / a.iters);
    }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::vector<double> med;
  for (auto& v : t) med.push_back(median(v));
  return med;
}

std::vector<Row> bench_shape(const Args& a, const Model& m, const std::string& gemm, int tokens,
                             cublasLtHandle_t lt, cudaStream_t st) {
  const int L = m.experts / a.ep, rows = tokens * kTopK;
  const int N = gemm == "gateup" ? 2 * m.ffn : m.hidden, K = gemm == "gateup" ? m.hidden : m.ffn;
  const std::vector<int> counts = group_counts(rows, L, a.routing);
  std::vector<int> offsets(L, 0);
  for (int g = 1; g < L; ++g) offsets[g] = offsets[g - 1] + counts[g - 1];

  void *A = nullptr, *B = nullptr, *C = nullptr, *ref = nullptr, *dense_out = nullptr, *ws = nullptr;
  int *d_counts = nullptr, *d_offsets = nullptr;
  unsigned long long* wrong = nullptr;
  const size_t ws_bytes = lt::LtMatmul::kDefaultWorkspace;
  TW_CUDA_CHECK(cudaMalloc(&A, size_t(rows) * K * 2));
  TW_CUDA_CHECK(cudaMalloc(&B, size_t(L) * N * K * 2));
  TW_CUDA_CHECK(cudaMalloc(&C, size_t(rows) * N * 2));
  TW_CUDA_CHECK(cudaMalloc(&ref, size_t(rows) * N * 2));
  TW_CUDA_CHECK(cudaMalloc(&dense_out, size_t(rows) * N * 2));  // never ref: the check reads ref
  TW_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  TW_CUDA_CHECK(cudaMalloc(&d_counts, size_t(L) * 4));
  TW_CUDA_CHECK(cudaMalloc(&d_offsets, size_t(L) * 4));
  TW_CUDA_CHECK(cudaMalloc(&wrong, sizeof(*wrong)));
  fill_operand(A, size_t(rows) * K, DType::kBFloat16, 1000, st);
  fill_operand(B, size_t(L) * N * K, DType::kBFloat16, 2000, st);
  TW_CUDA_CHECK(cudaMemcpyAsync(d_counts, counts.data(), size_t(L) * 4, cudaMemcpyHostToDevice, st));
  TW_CUDA_CHECK(cudaMemcpyAsync(d_offsets, offsets.data(), size_t(L) * 4, cudaMemcpyHostToDevice, st));

  // The loop's GEMMs, one algorithm per distinct row count.
  std::map<int, std::unique_ptr<lt::LtMatmul>> plans;
  for (int c : counts)
    if (c > 0 && !plans.count(c)) plans[c] = std::make_unique<lt::LtMatmul>(lt, c, N, K, BLayout::kNK, ws_bytes);
  const lt::LtMatmul dense(lt, rows, N, K, BLayout::kNK, ws_bytes);
  auto loop = [&](void* out) {
    for (int g = 0; g < L; ++g)
      if (counts[g] > 0)
        plans[counts[g]]->run(static_cast<const char*>(A) + size_t(offsets[g]) * K * 2,
                              static_cast<const char*>(B) + size_t(g) * N * K * 2,
                              static_cast<char*>(out) + size_t(offsets[g]) * N * 2, ws, st);
  };
  GroupedGemmArgs ga;
  ga.A = A, ga.B = B, ga.C = C, ga.counts = d_counts, ga.offsets = d_offsets;
  ga.groups = L, ga.N = N, ga.K = K, ga.rows = rows;

  // cuBLAS's grouped GEMM, checked once against the loop like tilewire's (a wrong baseline is a
  // bench bug, and fails the run).
  std::unique_ptr<lt::GroupedBaseline> grouped;
  unsigned long long grouped_wrong = 0;
  try {
    grouped = std::make_unique<lt::GroupedBaseline>(counts, N, K, A, B, dense_out);
  } catch (const Error& e) {
    std::printf("# cuBLAS grouped GEMM: n/a (%s)\n", e.what());
  }
  std::vector<Row> out;
  loop(ref);
  if (grouped) {
    TW_CUDA_CHECK(cudaMemsetAsync(dense_out, 0xFF, size_t(rows) * N * 2, st));
    TW_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(*wrong), st));
    grouped->run(st);
    count_wrong_async(dense_out, ref, size_t(rows) * N, DType::kBFloat16, wrong, st);
    TW_CUDA_CHECK(cudaMemcpyAsync(&grouped_wrong, wrong, sizeof(*wrong), cudaMemcpyDeviceToHost, st));
    TW_CUDA_CHECK(cudaStreamSynchronize(st));
  }
  for (GroupedTile tile : a.tiles) {
    GroupedGemmConfig cfg;
    cfg.tile = tile;
    cfg.reserved_sms = a.reserved_sms;
    Row r;
    r.model = m.name, r.gemm = gemm, r.tokens = tokens, r.groups = L, r.rows = rows, r.N = N, r.K = K;
    r.tile = std::string(grouped_tile_name(tile)) +
             (tile == GroupedTile::kAuto ? std::string("=") + grouped_tile_name(grouped_tile_for(ga, cfg)) : "");
    TW_CUDA_CHECK(cudaMemsetAsync(C, 0xFF, size_t(rows) * N * 2, st));  // poison: NaN counts as wrong
    TW_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(*wrong), st));
    grouped_gemm(ga, cfg, st);
    count_wrong_async(C, ref, size_t(rows) * N, DType::kBFloat16, wrong, st);
    TW_CUDA_CHECK(cudaMemcpyAsync(&r.wrong, wrong, sizeof(*wrong), cudaMemcpyDeviceToHost, st));
    TW_CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<std::function<void()>> calls = {[&] { grouped_gemm(ga, cfg, st); }, [&] { loop(dense_out); },
                                                [&] { dense.run(A, B, dense_out, ws, st); }};
    if (grouped) calls.push_back([&] { grouped->run(st); });  // writes dense_out too
    const std::vector<double> t = time_all(a, st, calls);
    r.tw_us = t[0], r.loop_us = t[1], r.dense_us = t[2];
    r.cublas_us = grouped ? t[3] : 0;
    r.cublas_wrong = grouped_wrong;
    out.push_back(r);
  }
  cudaFree(A), cudaFree(B), cudaFree(C), cudaFree(ref), cudaFree(dense_out), cudaFree(ws), cudaFree(d_counts);
  cudaFree(d_offsets);
  cudaFree(wrong);
  return out;
}

}  // namespace

int bench_grouped(const std::vector<std::string>& argv) {
  const Args a = parse(argv);
  if (a.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  require_gpus("bench gemm --grouped");
  std::ofstream json;
  if (!a.json_path.empty()) {
    json.open(a.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(json.good(), kInvalidArgument, "--json " + a.json_path + ": cannot open for writing");
  }
  cudaDeviceProp prop{};
  TW_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t st;
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const lt::LtHandle lt;
  std::printf("# tilewire bench gemm --grouped: %s, %d SMs; bf16, B [L, N, K], top-%d, EP %d, routing %s; tilewire on "
              "%d SMs, the baselines on all\n",
              prop.name, prop.multiProcessorCount, kTopK, a.ep, a.routing.c_str(),
              prop.multiProcessorCount - a.reserved_sms);
  std::printf("%-6s %-6s %6s %4s %6s %6s %6s %-20s %9s %8s %9s %8s %9s %8s %9s %8s %6s %6s %6s %7s %7s\n", "model", "gemm",
              "tokens", "L", "rows", "N", "K", "tile", "tw_us", "tw_TF/s", "loop_us", "loop_TF", "dense_us", "dense_TF",
              "cublas_us", "cublasTF", "/loop", "/dense", "/cublas", "#wrong", "#wrongB");
  bool ok = true;
  std::ostringstream rows_json;
  int n = 0;
  for (const Model* m : a.models)
    for (const std::string& g : a.gemms)
      for (int t : a.tokens)
        for (const Row& r : bench_shape(a, *m, g, t, lt.get(), st)) {
          std::printf(
              "%-6s %-6s %6d %4d %6d %6d %6d %-20s %9.1f %8.1f %9.1f %8.1f %9.1f %8.1f %9.1f %8.1f %6.3f %6.3f %6.3f %7llu %7llu\n",
              r.model.c_str(), r.gemm.c_str(), r.tokens, r.groups, r.rows, r.N, r.K, r.tile.c_str(), r.tw_us,
              r.tflops(r.tw_us), r.loop_us, r.tflops(r.loop_us), r.dense_us, r.tflops(r.dense_us), r.cublas_us,
              r.tflops(r.cublas_us), r.loop_us / r.tw_us, r.dense_us / r.tw_us, r.cublas_us / r.tw_us, r.wrong,
              r.cublas_wrong);
          std::fflush(stdout);
          ok = ok && r.wrong == 0 && r.cublas_wrong == 0;
          rows_json << (n++ ? "," : "") << "{\"model\":\"" << r.model << "\",\"gemm\":\"" << r.gemm
                    << "\",\"tokens\":" << r.tokens << ",\"groups\":" << r.groups << ",\"rows\":" << r.rows
                    << ",\"n\":" << r.N << ",\"k\":" << r.K << ",\"tile\":\"" << r.tile << "\",\"tw_us\":" << r.tw_us
                    << ",\"loop_us\":" << r.loop_us << ",\"dense_us\":" << r.dense_us
                    << ",\"tw_tflops\":" << r.tflops(r.tw_us) << ",\"loop_tflops\":" << r.tflops(r.loop_us)
                    << ",\"dense_tflops\":" << r.tflops(r.dense_us) << ",\"cublas_grouped_us\":" << r.cublas_us
                    << ",\"cublas_grouped_tflops\":" << r.tflops(r.cublas_us) << ",\"wrong\":" << r.wrong
                    << ",\"cublas_grouped_wrong\":" << r.cublas_wrong << "}";
        }
  std::printf("# /loop, /dense, /cublas: the baseline's time over tilewire's (above 1: tilewire faster; /cublas 0: n/a);\n"
              "# #wrongB: cuBLAS's grouped C against the loop's, as #wrong\n");
  cudaStreamDestroy(st);
  if (json.is_open()) {
    json << "{\"bench\":\"gemm --grouped\",\"device\":\"" << prop.name << "\",\"ep\":" << a.ep
         << ",\"reserved_sms\":" << a.reserved_sms << ",\"routing\":\""
         << a.routing << "\",\"rows\":[" << rows_json.str() << "],\"ok\":" << (ok ? "true" : "false") << "}\n";
    std::printf("# wrote %s\n", a.json_path.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace tw::cli::gemm_bench
