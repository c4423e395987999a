// tools/bench_gemm_allreduce.hpp — what the two halves of `tilewire bench gemm-allreduce` share.
// bench_gemm_allreduce.cu measures (one thread per GPU); bench_gemm_allreduce_report.cpp parses
// the options and prints the header, the rows and the JSON. Host only, CLI-internal.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tilewire/ops/gemm_allreduce.hpp"

namespace tw::cli::gemm_ar {

struct Shape {
  int m = 0, n = 0, k = 0;  // k: K_local, the K of one rank's shard
};

// The rows of the table, in the order they are measured (letters of the file comment).
// kTwGemm (g): tilewire's GEMM alone on the rank's SMs (gemm_impl::team_gemm), the basis the fused
// kernel's "fused / GEMM alone" is read against on a virtual team, printed below the row.
enum Variant { kGemm, kGemmNccl, kGemmTw, kChunked, kFused, kNcclAr, kTwGemm, kVariants };

struct Options {
  std::vector<Shape> shapes;       // -m -n -k and/or --sweep, in sweep order (default: see usage())
  std::string sweep;               // "", "acceptance", "grid", "scale"
  int iters = 20;                  // --iters   timed iterations per repeat
  int warmup = 5;                  // --warmup  untimed iterations first (at least 1 is run)
  int repeats = 5;                 // -R        repeats, median reported
  double warm_s = 0;               // --warm-s  seconds of the variants in turn, untimed, before the repeats
  std::vector<int> chunks{2, 4, 8};  // --chunks  row chunks tried by (d), ascending
  GemmAllReduceConfig cfg;         // --reserved-sms --swizzle --raster --partials --algo, for (e)
  std::string json_path;           // --json FILE
  std::string trace_path;          // --trace FILE: Perfetto + tilewire trace JSON of one fused call (first shape)
  std::string plot_path;           // --plot FILE.png: its timeline (and FILE_sequential.png for the baseline)
  int virtual_ranks = 0;           // --virtual P: P virtual ranks on GPU 0 (Comm::run_virtual); 0: one per GPU
  bool only_fused = false;         // --only-fused: time (e) alone, no other row between its repeats
  bool help = false;
};
constexpr int kMaxChunkOptions = 8;  // entries of --chunks

// Throws tw::Error(kInvalidArgument) naming the option on any problem.
Options parse_options(const std::vector<std::string>& argv);
const char* usage();

// One shape, as rank 0 reports it. Times: per iteration, median over repeats, slowest rank, in us;
// NaN where a variant did not run (its reason in `note`).
struct Row {
  Shape s;
  int sets = 0;                      // (A, B) pairs per rank the inputs rotate over
  double us[kVariants];              // kChunked: the best entry of --chunks
  int chunks = 0;                    // that entry (0: no entry splits M)
  bool checked = false;              // (e) ran and was checked; else wrong/identical mean nothing
  uint64_t wrong = 0;                // over all ranks
  bool identical = true;             // (e)'s C bit-identical on every rank
  std::string note;                  // why (c) or (e) is n/a; a start gate that expired
  std::string path;                  // what tw::gemm_allreduce ran for (e): "fused" or "sequential"

  Row() { for (double& t : us) t = NAN; }
  double speedup_vs(Variant v) const { return us[v] / us[kFused]; }  // > 1: the fused op is faster
  double fused_over_gemm() const { return us[kFused] / us[kGemm]; }
  double fused_over_tw_gemm() const { return us[kFused] / us[kTwGemm]; }
  // (T_gemm + T_ar - T_fused) / min(T_gemm, T_ar): 1 = the all-reduce fully hidden, 0 = none of it.
  double overlap() const {
    return (us[kGemm] + us[kNcclAr] - us[kFused]) / std::fmin(us[kGemm], us[kNcclAr]);
  }
  bool ok() const { return !checked || (wrong == 0 && identical); }
};

// What the header and the JSON say about the machine.
struct RunInfo {
  std::string gpu;
  int nranks = 0, sms = 0;  // sms: the GPU's
  size_t l2_bytes = 0;
  bool virt = false;        // a virtual team: nranks ranks on GPU 0, no NCCL ((b) (d) (f) n/a)
  int sm_budget = 0;        // comm.sm_count(): SMs per rank (set by rank 0 before the header)
};

// How #wrong is counted (the check kernel's bound), for the header and the JSON.
const char* tolerance_text();

void print_header(const Options& o, const RunInfo& info);
void print_row(const Row& r);
// The cost model's predictions for the row's shape at P = 2, 4, 8 (virt: the GEMM time estimated).
void print_model(const Row& r, bool virt);
// trace_json: the --trace section ({"file", "tracing_cost", "fused", "sequential"} metrics) or "".
std::string to_json(const Options& o, const RunInfo& info, const std::vector<Row>& rows, bool all_ok,
                    const std::string& trace_json = "");

}  // namespace tw::cli::gemm_ar
