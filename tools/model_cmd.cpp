// tools/model_cmd.cpp — `tilewire model` (model_cmd.hpp).
#include "model_cmd.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "bench_args.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::cli {
namespace {

namespace fg = fused_gemm;

double positive_number(const std::string& opt, const std::string& v, double lo, const char* what) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  TW_REQUIRE(!v.empty() && *end == 0 && x > lo && x < 1e12, kInvalidArgument,
             "model: " + opt + " takes " + what + ", got '" + v + "'");
  return x;
}

const char* cli_name(fg::FusedOp op) {
  switch (op) {
    case fg::FusedOp::kGemmAllReduce:
      return "gemm-allreduce";
    case fg::FusedOp::kGemmReduceScatter:
      return "gemm-rs";
    case fg::FusedOp::kAllGatherGemm:
      return "ag-gemm";
  }
  return "?";
}

}  // namespace

std::string model_usage() {
  return "usage: tilewire model gemm-allreduce|gemm-rs|ag-gemm -m M[,M..] -n N -k K [options]\n"
         "  What kAuto's cost model predicts for the fused op and for its sequential path (the GEMM,\n"
         "  then tilewire's collective) on H200 NVLink, and which one kAuto runs (docs/fused_gemm.md,\n"
         "  \"The cost model\"). Arithmetic only: no GPU.\n"
         "  The shape is one rank's GEMM: K = K_local for gemm-allreduce and gemm-rs, N = N_local for\n"
         "  ag-gemm (its M: the gathered rows). 2-byte types (bf16, fp16).\n"
         "  -P p[,p..]      team sizes, each 2..8 (2,4,8)\n"
         "  --gemm-us T     this rank's GEMM alone, measured, in us (the model's estimate); one shape only\n"
         "  --overhead X    the fused kernel's slowdown of the GEMM, > -1 (the figure measured for the\n"
         "                  kernel kAuto runs at that shape and P)\n"
         "  --json          one JSON object instead of the table\n";
}

ModelArgs parse_model_args(std::span<const std::string> argv) {
  ModelArgs a;
  size_t i = 0;
  if (!argv.empty() && (argv[0] == "-h" || argv[0] == "--help")) {
    a.help = true;
    return a;
  }
  TW_REQUIRE(!argv.empty(), kInvalidArgument, "model: name the op: gemm-allreduce, gemm-rs or ag-gemm");
  const std::string& op = argv[i++];
  if (op == "gemm-allreduce")
    a.op = fg::FusedOp::kGemmAllReduce;
  else if (op == "gemm-rs")
    a.op = fg::FusedOp::kGemmReduceScatter;
  else if (op == "ag-gemm")
    a.op = fg::FusedOp::kAllGatherGemm;
  else
    throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
                "model: unknown op '" + op + "' (gemm-allreduce, gemm-rs or ag-gemm)");
  for (; i < argv.size(); ++i) {
    const std::string& o = argv[i];
    if (o == "-h" || o == "--help") {
      a.help = true;
      continue;
    }
    if (o == "--json") {
      a.json = true;
      continue;
    }
    TW_REQUIRE(i + 1 < argv.size(), kInvalidArgument, "model: " + o + " needs a value");
    const std::string& v = argv[++i];
    if (o == "-m")
      a.M = parse_int_list(v, "model: -m");
    else if (o == "-n" || o == "-k") {
      const std::vector<int> x = parse_int_list(v, "model: " + o);
      TW_REQUIRE(x.size() == 1, kInvalidArgument,
                 "model: " + o + " takes one value (-m may list several), got '" + v + "'");
      (o == "-n" ? a.N : a.K) = x[0];
    } else if (o == "-P")
      a.P = parse_int_list(v, "model: -P");
    else if (o == "--gemm-us")
      a.gemm_us = positive_number(o, v, 0.0, "a time in us, > 0");
    else if (o == "--overhead")
      a.overhead = positive_number(o, v, -1.0, "a fraction > -1 (0.05: 5% slower)");
    else
      throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
                  "model: unknown option '" + o + "' (tilewire model --help)");
  }
  if (a.help) return a;
  TW_REQUIRE(!a.M.empty() && a.N > 0 && a.K > 0, kInvalidArgument,
             "model: -m, -n and -k are required (one rank's GEMM)");
  for (int p : a.P)
    TW_REQUIRE(
        p >= 2 && p <= 8, kInvalidArgument,
        "model: -P takes team sizes 2..8 (the ranks of one NVLink domain the model covers), got " + std::to_string(p));
  TW_REQUIRE(!a.gemm_us || a.M.size() == 1, kInvalidArgument,
             "model: --gemm-us is one shape's measured GEMM time; -m names " + std::to_string(a.M.size()) + " shapes");
  return a;
}

std::vector<ModelRow> model_rows(const ModelArgs& a) {
  std::vector<ModelRow> rows;
  for (int m : a.M) {
    const fg::Shape s{m, a.N, a.K, 2};
    for (int P : a.P) {
      ModelRow r;
      r.M = m, r.N = a.N, r.K = a.K, r.P = P;
      r.gemm_estimated = !a.gemm_us;
      r.gemm_us = a.gemm_us ? *a.gemm_us : fg::estimate_gemm_us(m, a.N, a.K, 2);
      r.overhead = a.overhead ? *a.overhead : fg::default_overhead(a.op, s, P);
      r.p = fg::predict(a.op, s, P, r.gemm_us, r.overhead);
      r.fused = fg::prefers_fused(r.p);
      rows.push_back(r);
    }
  }
  return rows;
}

std::string model_report(const ModelArgs& a) {
  const std::vector<ModelRow> rows = model_rows(a);
  const fg::LinkModel link = fg::h200_nvlink();
  char buf[320];
  std::ostringstream o;
  if (a.json) {
    o << "{\"op\": \"" << fg::op_name(a.op) << "\", \"link\": \"" << link.name
      << "\", \"auto_margin\": " << fg::kAutoMargin << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const ModelRow& r = rows[i];
      std::snprintf(buf, sizeof buf,
                    "%s{\"M\": %d, \"N\": %d, \"K\": %d, \"P\": %d, \"gemm_us\": %.3f, \"gemm_estimated\": %s, "
                    "\"overhead\": %.4f, \"fused_us\": %.3f, \"sequential_us\": %.3f, \"coll_us\": %.3f, "
                    "\"exposed_us\": %.3f, \"break_even_overhead\": %.4f, \"pick\": \"%s\"}",
                    i ? ", " : "", r.M, r.N, r.K, r.P, r.gemm_us, r.gemm_estimated ? "true" : "false", r.overhead,
                    r.p.fused_us, r.p.sequential_us, r.p.coll_us, r.p.exposed_us, r.p.break_even_overhead,
                    r.fused ? "fused" : "sequential");
      o << buf;
    }
    o << "]}\n";
    return o.str();
  }
  o << "tilewire model " << cli_name(a.op) << ": " << link.name << ", the sequential path on tilewire's collective; "
    << "kAuto runs fused where it is predicted faster by more than " << int(fg::kAutoMargin * 100 + 0.5) << "%\n";
  o << "(gemm us: " << (a.gemm_us ? "as given" : "the model's estimate")
    << "; overhead: " << (a.overhead ? "as given" : "the figure measured for the kernel kAuto runs")
    << "; break-even: the overhead at which fused = sequential)\n";
  std::snprintf(buf, sizeof buf, "%7s %7s %7s %3s %10s %9s %10s %10s %9s %11s  %s\n", "M", "N", "K", "P", "gemm us",
                "overhead", "fused us", "seq us", "coll us", "break-even", "kAuto");
  o << buf;
  for (const ModelRow& r : rows) {
    std::snprintf(buf, sizeof buf, "%7d %7d %7d %3d %10.1f %9.2f %10.1f %10.1f %9.1f %11.2f  %s\n", r.M, r.N, r.K, r.P,
                  r.gemm_us, r.overhead, r.p.fused_us, r.p.sequential_us, r.p.coll_us, r.p.break_even_overhead,
                  r.fused ? "fused" : "sequential");
    o << buf;
  }
  return o.str();
}

int model_command(const std::vector<std::string>& args) {
  const ModelArgs a = parse_model_args(args);
  if (a.help) {
    std::fputs(model_usage().c_str(), stdout);
    return 0;
  }
  std::fputs(model_report(a).c_str(), stdout);
  return 0;
}

}  // namespace tw::cli
