// `tilewire bench gemm-allreduce`: the options, the text table and the JSON
// (bench_gemm_allreduce.hpp). The measuring half is bench_gemm_allreduce.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "bench_args.hpp"  // parse_virtual_ranks
#include "ops/fused_gemm/cost_model.hpp"
#include "bench_gemm_allreduce.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/runtime/version.hpp"

namespace tw::cli::gemm_ar {
namespace {

constexpr const char* kUsage =
    "usage: tilewire bench gemm-allreduce [options]\n"
    "  Times on all local GPUs (one thread each), per shape, in the same run: (a) cuBLASLt GEMM alone,\n"
    "  (g) tilewire's GEMM alone (on a rank's SMs; printed below the row with (e)/(g)),\n"
    "  (b) GEMM + ncclAllReduce, (c) GEMM + tw::allreduce, (d) GEMM and ncclAllReduce in row chunks on\n"
    "  two streams, (e) the fused tw::gemm_allreduce, (f) ncclAllReduce of C alone; then checks (e)\n"
    "  against the sum of every rank's cuBLASLt partial on the device. bf16; every rank's A_r [M,K_local],\n"
    "  B_r [N,K_local] seeded random.\n"
    "  -m M -n N -k K_LOCAL  one shape (default 8192 x 8192 x 4096 without --sweep; with --virtual:\n"
    "                        512x4096x4096, 2048x4096x1024, 8192x8192x4096, a quick correctness list)\n"
    "  --sweep NAME          acceptance: 8192x8192x4096, 16384x8192x4096, 4096x8192x14336;\n"
    "                        grid: M {128,512,2048,8192,16384} x N {4096,8192} x K_local {4096,14336};\n"
    "                        scale: the grid with K_local {1024,3584,4096,14336} (4 and 8 GPUs);\n"
    "                        decode: M {1,16,64,128,256} x N {4096,8192,14336} x K_local {4096,8192}\n"
    "                        (with --path fused: the plain GEMM, then the all-reduce in place; with\n"
    "                        --algo owner too: the owner kernel's decode tile)\n"
    "  --iters N             timed iterations per repeat (20)   --warmup N  untimed first (5, >= 1 run)\n"
    "  --warm-s S            then S seconds of the variants in turn, untimed (0): a GEMM this size runs at\n"
    "                        the GPU's power limit after about a second, so a figure to compare with one\n"
    "                        taken after sustained load (scripts/py_gemm_allreduce_time.py) needs it too\n"
    "  -R N                  repeats, median reported (5)\n"
    "  --chunks LIST         row chunks tried by (d), e.g. 2,4,8 (default); the best is reported\n"
    "  --reserved-sms N      SMs the fused GEMM leaves idle (0)   --swizzle 1|2|4|8 (4)\n"
    "  --raster auto|m|n     tile walk of the fused op (auto)      --partials bf16|fp32 (bf16)\n"
    "  --algo auto|relay|exchange|owner  how the fused op reduces tiles (auto; ops/gemm_allreduce.hpp)\n"
    "  --path auto|fused|sequential  (e)'s path: auto lets gemm_allreduce choose (the row says which)\n"
    "  --only-fused          time (e) alone: no other row runs between its repeats or in --warm-s (a\n"
    "                        measurement: the same calls as another process makes them, such as\n"
    "                        scripts/py_gemm_allreduce_time.py); the other columns n/a, the check still runs\n"
    "  --json FILE           also write every row as JSON (rank 0)\n"
    "  --trace FILE          first shape: time the fused op with tracing on vs off, write one traced call\n"
    "                        as Perfetto JSON (+ tilewire events, metrics); see docs/tracing.md\n"
    "  --plot FILE.png       with --trace: draw the timelines (FILE.png, FILE_sequential.png)\n"
    "  --virtual P           P >= 1 virtual ranks on GPU 0 (one thread each, no NCCL) instead of one rank\n"
    "                        per GPU: (a) (c) (e) and the check as on P GPUs ((a) and (c) on a rank's\n"
    "                        SMs: cuBLASLt's SM_COUNT_TARGET), (b) (d) (f) n/a; the times\n"
    "                        are P ranks sharing one GPU, not NVLink figures (a correctness run)\n"
    "  Exit 0 when every checked shape has #wrong 0 and ranks bit-identical (and the fused op ran on\n"
    "  at least one shape), else 1.\n";

[[noreturn]] void bad(const std::string& msg) {
  throw Error(Errc::kInvalidArgument, "bench gemm-allreduce: " + msg + " (tilewire bench gemm-allreduce --help)");
}

int int_opt(const std::string& opt, const std::string& v, int lo, int hi) {
  const std::optional<int64_t> x = env::parse_int(v);
  if (!x || *x < lo || *x > hi)
    bad(opt + " takes an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return (int)*x;
}

// The value of an enum option, read by its tw::parse_* function; `accepted`: the spellings to show.
template <class E>
E enum_opt(const std::string& opt, const std::string& v, std::optional<E> (*parse)(const std::string&),
           const char* accepted) {
  const std::optional<E> e = parse(v);
  if (!e) bad(opt + " " + accepted + ", got '" + v + "'");
  return *e;
}

std::vector<int> chunk_list(const std::string& opt, const std::string& v) {
  std::vector<int> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(int_opt(opt, item, 1, 64));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty() || (int)out.size() > kMaxChunkOptions)
    bad(opt + " takes 1 to " + std::to_string(kMaxChunkOptions) + " chunk counts like 2,4,8, got '" + v + "'");
  return out;
}

std::vector<Shape> sweep_shapes(const std::string& name) {
  std::vector<Shape> s;
  if (name == "acceptance") return {{8192, 8192, 4096}, {16384, 8192, 4096}, {4096, 8192, 14336}};
  if (name == "decode") {  // decode-sized M: the owner kernel's 128 x 64 tile (gemm_allreduce/plan.hpp)
    for (int m : {1, 16, 64, 128, 256})
      for (int n : {4096, 8192, 14336})
        for (int k : {4096, 8192}) s.push_back({m, n, k});
    return s;
  }
  if (name != "grid" && name != "scale") bad("--sweep acceptance|grid|scale|decode, got '" + name + "'");
  // scale (the 4- and 8-GPU runs): the grid plus K_local 1024 and 3584, hidden 8192 and 28672
  // split 8 ways.
  const std::vector<int> ks = name == "grid" ? std::vector<int>{4096, 14336} : std::vector<int>{1024, 3584, 4096, 14336};
  for (int m : {128, 512, 2048, 8192, 16384})
    for (int n : {4096, 8192})
      for (int k : ks) s.push_back({m, n, k});
  return s;
}

std::string chunks_text(const std::vector<int>& c) {
  std::string s;
  for (int x : c) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// "%9.1f", or n/a for NaN.
std::string num(const char* f, double v) {
  if (!std::isfinite(v)) return "n/a";
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if ((unsigned char)c < 0x20) continue;
    o += c;
  }
  return o + "\"";
}
std::string jnum(double v) { return std::isfinite(v) ? num("%.6g", v) : "null"; }

std::string commit_id() { return cli::bench_commit(); }

}  // namespace

const char* usage() { return kUsage; }

Options parse_options(const std::vector<std::string>& argv) {
  Options o;
  int m = 0, n = 0, k = 0;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string opt = argv[i], v;
    if (opt == "-h" || opt == "--help") {
      o.help = true;
      continue;
    }
    if (opt == "--only-fused") {
      o.only_fused = true;
      continue;
    }
    if (const size_t eq = opt.find('='); opt.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = opt.substr(eq + 1);  // --iters=20
      opt.resize(eq);
    } else {
      if (i + 1 >= argv.size()) bad(opt + " needs a value");
      v = argv[++i];
    }
    constexpr int kMaxDim = 1 << 20;
    if (opt == "-m") m = int_opt(opt, v, 1, kMaxDim);
    else if (opt == "-n") n = int_opt(opt, v, 1, kMaxDim);
    else if (opt == "-k") k = int_opt(opt, v, 1, kMaxDim);
    else if (opt == "--sweep") o.sweep = v;
    else if (opt == "--iters") o.iters = int_opt(opt, v, 1, 100000);
    else if (opt == "--warmup") o.warmup = int_opt(opt, v, 0, 100000);
    else if (opt == "--warm-s") {
      char* end = nullptr;
      o.warm_s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.warm_s >= 0 && o.warm_s <= 600)) bad("--warm-s: seconds in [0, 600], got '" + v + "'");
    }
    else if (opt == "-R" || opt == "--repeats") o.repeats = int_opt(opt, v, 1, 1000);
    else if (opt == "--chunks") o.chunks = chunk_list(opt, v);
    else if (opt == "--reserved-sms") o.cfg.reserved_sms = int_opt(opt, v, 0, 1 << 16);
    else if (opt == "--swizzle") {
      o.cfg.swizzle = int_opt(opt, v, 1, 8);
      if (o.cfg.swizzle & (o.cfg.swizzle - 1)) bad("--swizzle 1|2|4|8, got '" + v + "'");
    } else if (opt == "--raster") o.cfg.raster = enum_opt(opt, v, parse_gemm_raster, "auto|m|n");
    else if (opt == "--partials") o.cfg.partials = enum_opt(opt, v, parse_partial_precision, "bf16|fp32");
    else if (opt == "--algo") o.cfg.algo = enum_opt(opt, v, parse_gemm_allreduce_algo, "auto|relay|exchange|owner");
    else if (opt == "--path") o.cfg.path = enum_opt(opt, v, parse_gemm_allreduce_path, "auto|fused|sequential");
    else if (opt == "--json") o.json_path = v;
    else if (opt == "--trace") o.trace_path = v;
    else if (opt == "--plot") o.plot_path = v;
    else if (opt == "--virtual") o.virtual_ranks = parse_virtual_ranks(opt, v);
    else bad("unknown option '" + opt + "'");
  }
  if (!o.sweep.empty()) o.shapes = sweep_shapes(o.sweep);
  if (m || n || k) {
    if (!(m && n && k)) bad("-m, -n and -k go together");
    o.shapes.push_back({m, n, k});
  }
  // Virtual ranks share one GPU: a short list that covers the sequential path (M < 2048), the
  // smallest fused M and the headline shape, so P = 8 finishes in a few minutes.
  if (o.shapes.empty() && o.virtual_ranks > 0) o.shapes = {{512, 4096, 4096}, {2048, 4096, 1024}, {8192, 8192, 4096}};
  if (o.shapes.empty()) o.shapes.push_back({8192, 8192, 4096});
  return o;
}

const char* tolerance_text() {
  return "|C_fused - C_ref| <= (P+4) 2^-8 mag + P K_local 2^-24, C_ref = sum over ranks of the cuBLASLt bf16 "
         "partials, mag = sum of their |.|, both in fp32 from every rank's window (NaN counts as wrong)";
}

void print_header(const Options& o, const RunInfo& info) {
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  std::printf("# tilewire bench gemm-allreduce: tilewire %s, NCCL %s, CUDA runtime %d.%d, commit %s\n", kVersion,
              nccl_version_string(nccl_runtime_version()).c_str(), rt / 1000, rt % 1000 / 10, commit_id().c_str());
  if (info.virt) {
    std::printf("# %d virtual ranks on GPU 0, %s (%d SMs, L2 %zu MiB), one process, one thread per rank, %d SMs "
                "per rank\n",
                info.nranks, info.gpu.c_str(), info.sms, info.l2_bytes >> 20, info.sm_budget);
    std::printf("# virtual team: %d ranks on one GPU; times are not NVLink figures (correctness run); (b) (d) (f)\n"
                "#   and the overlap need NCCL: n/a\n",
                info.nranks);
  } else {
    std::printf("# %d ranks x %s (%d SMs, L2 %zu MiB), one process, one thread per GPU\n", info.nranks,
                info.gpu.c_str(), info.sms, info.l2_bytes >> 20);
  }
  std::printf("# bf16, A_r [M,K_local], B_r [N,K_local] (kNK), C [M,N] = sum over ranks; fused: algo %s, partials "
              "%s, reserved_sms %d, swizzle %d, raster %s; chunks %s; iters %d, warmup %d, warm-s %g, R %d%s%s%s\n",
              gemm_allreduce_algo_name(o.cfg.algo), partial_precision_name(o.cfg.partials), o.cfg.reserved_sms,
              o.cfg.swizzle, gemm_raster_name(o.cfg.raster),
              chunks_text(o.chunks).c_str(), o.iters, o.warmup, o.warm_s, o.repeats, o.trace_path.empty() ? "" : "; trace ",
              o.trace_path.c_str(), o.only_fused ? "; only (e) timed" : "");
  std::printf("# time: us per iteration, median of R repeats, slowest rank; NCCL in place on C ((b) (d) (f)),\n"
              "#   tw::allreduce out of place ((c)); (d) = the best chunk count, in ()\n");
  std::printf("# speedup e-vs-x = t_x / t_e (> 1: fused faster); e/a = t_e / t_a; "
              "overlap = (t_a + t_f - t_e) / min(t_a, t_f)\n");
  std::printf("# #wrong: %s, over all ranks; ident: fused C bit-identical on every rank\n", tolerance_text());
  std::printf("#%6s %6s %6s |%9s %9s %9s %13s %9s %9s |%7s %7s %7s %6s %7s |%7s %5s\n", "M", "N", "K_loc", "(a)gemm",
              "(b)+nccl", "(c)+tw", "(d)chunked", "(e)fused", "(f)ar", "e-vs-b", "e-vs-c", "e-vs-d", "e/a",
              "overlap", "#wrong", "ident");
  std::printf("#   (e) is tw::gemm_allreduce as called: the last column says which path it took (fused kernel, or\n"
              "#   cuBLASLt + tw::allreduce when gemm_allreduce_prefers_fused() says fusion does not pay)\n");
  std::fflush(stdout);
}

void print_row(const Row& r) {
  std::string chunked = num("%.1f", r.us[kChunked]);
  if (r.chunks) chunked.append("(").append(std::to_string(r.chunks)).append(")");
  std::printf(" %6d %6d %6d |%9s %9s %9s %13s %9s %9s |%7s %7s %7s %6s %7s |%7s %5s  %s%s%s\n", r.s.m, r.s.n, r.s.k,
              num("%.1f", r.us[kGemm]).c_str(), num("%.1f", r.us[kGemmNccl]).c_str(),
              num("%.1f", r.us[kGemmTw]).c_str(), chunked.c_str(), num("%.1f", r.us[kFused]).c_str(),
              num("%.1f", r.us[kNcclAr]).c_str(), num("%.3f", r.speedup_vs(kGemmNccl)).c_str(),
              num("%.3f", r.speedup_vs(kGemmTw)).c_str(), num("%.3f", r.speedup_vs(kChunked)).c_str(),
              num("%.3f", r.fused_over_gemm()).c_str(), num("%.3f", r.overlap()).c_str(),
              r.checked ? std::to_string(r.wrong).c_str() : "n/a", r.checked ? (r.identical ? "yes" : "no") : "n/a",
              r.path.c_str(), r.note.empty() ? "" : "  ", r.note.c_str());
  std::fflush(stdout);
}

// The cost model's fused and sequential times for this shape at P = 2, 4, 8 on H200 NVLink
// (src/ops/fused_gemm/cost_model.hpp), for the multi-GPU runs to check. Its GEMM time: (a) as
// measured on a real rank; on a virtual team (a rank has 1/P of the GPU) the model's estimate.
static std::string model_line(const Row& r, bool virt) {
  const fused_gemm::Shape s{r.s.m, r.s.n, r.s.k, 2};
  const double t = virt || !std::isfinite(r.us[kGemm]) ? fused_gemm::estimate_gemm_us(s.M, s.N, s.K, 2) : r.us[kGemm];
  return fused_gemm::predictions_line(fused_gemm::FusedOp::kGemmAllReduce, s, t);
}

void print_model(const Row& r, bool virt) {
  if (std::isfinite(r.us[kTwGemm]))
    std::printf("#   (g) tilewire's GEMM alone on a rank's SMs %.1f us: (e)/(g) %.3f, (a)/(g) %.3f\n", r.us[kTwGemm],
                r.fused_over_tw_gemm(), r.us[kGemm] / r.us[kTwGemm]);
  std::printf("#   %s\n", model_line(r, virt).c_str());
  std::fflush(stdout);
}

std::string to_json(const Options& o, const RunInfo& info, const std::vector<Row>& rows, bool all_ok,
                    const std::string& trace_json) {
  std::ostringstream j;
  j << "{\n  \"bench\": \"gemm-allreduce\",\n  \"gpu\": " << jstr(info.gpu) << ",\n  \"nranks\": " << info.nranks
    << ",\n  \"backend\": " << jstr(info.virt ? "virtual" : "nccl")
    << ",\n  \"virtual_ranks\": " << (info.virt ? std::to_string(info.nranks) : "null")
    << ",\n  \"times_are_nvlink\": " << (info.virt ? "false" : "true") << ",\n  \"sms_per_rank\": " << info.sm_budget
    << ",\n  \"commit\": " << jstr(commit_id()) << ",\n  \"tilewire_version\": "
    << jstr(kVersion) << ",\n  \"nccl_version\": " << jstr(nccl_version_string(nccl_runtime_version()))
    << ",\n  \"config\": {\"sweep\": " << jstr(o.sweep) << ", \"dtype\": \"bf16\", \"b_layout\": \"nk\""
    << ", \"iters\": " << o.iters << ", \"warmup\": " << o.warmup << ", \"warm_s\": " << o.warm_s << ", \"repeats\": " << o.repeats
    << ", \"only_fused\": " << (o.only_fused ? "true" : "false")
    << ", \"chunks\": [" << chunks_text(o.chunks) << "], \"reserved_sms\": " << o.cfg.reserved_sms
    << ", \"swizzle\": " << o.cfg.swizzle << ", \"raster\": " << jstr(gemm_raster_name(o.cfg.raster))
    << ", \"algo\": " << jstr(gemm_allreduce_algo_name(o.cfg.algo))
    << ", \"partials\": " << jstr(partial_precision_name(o.cfg.partials)) << ", \"sms\": " << info.sms
    << ", \"l2_bytes\": " << info.l2_bytes << ", \"trace\": " << (o.trace_path.empty() ? "null" : jstr(o.trace_path))
    << ",\n    \"timing\": \"us per iteration: median over repeats of (ev1-ev0)/iters, every repeat behind a start "
       "gate, slowest rank; NCCL in place on C, tw::allreduce out of place"
    << (info.virt ? "; virtual team: P ranks on one GPU, times are not NVLink figures (correctness run), the NCCL "
                    "rows (b) (d) (f) null"
                  : "")
    << "\""
    << ",\n    \"tolerance\": " << jstr(tolerance_text()) << "},\n  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    j << (i ? "," : "") << "\n    {\"M\": " << r.s.m << ", \"N\": " << r.s.n << ", \"K_local\": " << r.s.k
      << ", \"t_gemm_us\": " << jnum(r.us[kGemm]) << ", \"t_gemm_nccl_us\": " << jnum(r.us[kGemmNccl])
      << ", \"t_gemm_tw_us\": " << jnum(r.us[kGemmTw]) << ", \"t_chunked_us\": " << jnum(r.us[kChunked])
      << ", \"chunks\": " << (r.chunks ? std::to_string(r.chunks) : "null")
      << ", \"path\": " << jstr(r.path) << ", \"t_fused_us\": " << jnum(r.us[kFused]) << ", \"t_nccl_ar_us\": " << jnum(r.us[kNcclAr])
      << ", \"speedup_vs_b\": " << jnum(r.speedup_vs(kGemmNccl)) << ", \"speedup_vs_c\": "
      << jnum(r.speedup_vs(kGemmTw)) << ", \"speedup_vs_d\": " << jnum(r.speedup_vs(kChunked))
      << ", \"fused_over_gemm\": " << jnum(r.fused_over_gemm()) << ", \"t_tw_gemm_us\": " << jnum(r.us[kTwGemm])
      << ", \"fused_over_tw_gemm\": " << jnum(r.fused_over_tw_gemm()) << ", \"overlap_eff\": " << jnum(r.overlap())
      << ", \"wrong\": " << (r.checked ? std::to_string(r.wrong) : "null")
      << ", \"identical\": " << (r.checked ? (r.identical ? "true" : "false") : "null")
      << ", \"rotation_sets\": " << r.sets << ", \"model\": " << jstr(model_line(r, info.virt)) << ", \"note\": " << (r.note.empty() ? "null" : jstr(r.note)) << "}";
  }
  j << "\n  ],\n  \"trace_metrics\": " << (trace_json.empty() ? "null" : trace_json);
  j << ",\n  \"all_correct\": " << (all_ok ? "true" : "false") << "\n}\n";
  return j.str();
}

}  // namespace tw::cli::gemm_ar
