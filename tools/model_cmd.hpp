// tools/model_cmd.hpp — `tilewire model`: what kAuto's cost model predicts for a fused op
// against its sequential path, for shapes and team sizes the user names. Host only, no GPU: the
// model (src/ops/fused_gemm/cost_model.hpp; docs/fused_gemm.md, "The cost model") is arithmetic.
//
//   tilewire model gemm-rs -m 4096,8192 -n 8192 -k 2048 -P 2,4,8
//
// The shape is one rank's GEMM, as the model and the benches take it: K = K_local for
// gemm-allreduce and gemm-rs, N = N_local for ag-gemm (whose M is the gathered rows). A
// malformed command line throws tw::Error(kInvalidArgument) naming the option; nothing is printed.
// Unit-tested in tests/cpu/model_cmd_test.cpp.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ops/fused_gemm/cost_model.hpp"

namespace tw::cli {

struct ModelArgs {
  fused_gemm::FusedOp op = fused_gemm::FusedOp::kGemmAllReduce;  // gemm-allreduce | gemm-rs | ag-gemm
  std::vector<int> M;                                            // -m, a list
  int N = 0, K = 0;                                              // -n, -k
  std::vector<int> P = {2, 4, 8};                                // -P, 2..8 each
  std::optional<double> gemm_us;   // --gemm-us: this rank's GEMM alone, measured (one shape only)
  std::optional<double> overhead;  // --overhead: the fused kernel's slowdown of the GEMM
  bool json = false;               // --json
  bool help = false;               // -h / --help
};

// argv: the words after "model". Throws tw::Error(kInvalidArgument) naming the option at fault.
ModelArgs parse_model_args(std::span<const std::string> argv);

struct ModelRow {
  int M = 0, N = 0, K = 0, P = 0;
  double gemm_us = 0;
  bool gemm_estimated = false;  // no --gemm-us: estimate_gemm_us
  double overhead = 0;          // --overhead, else default_overhead(op, shape, P)
  fused_gemm::Prediction p;
  bool fused = false;  // kAuto's pick: prefers_fused(p)
};

// One row per (M, P), in that order.
std::vector<ModelRow> model_rows(const ModelArgs& a);

// The rows as a table (or, with --json, one JSON object), as `tilewire model` prints them.
std::string model_report(const ModelArgs& a);

std::string model_usage();

// `tilewire model ...`: prints model_report (or the usage with --help); 0, or throws.
int model_command(const std::vector<std::string>& args);

}  // namespace tw::cli
