// tools/main.cpp — the `tilewire` command line: dispatch, and the one place exceptions stop.
//
//   tilewire info [--json] [--env]     what this machine offers (GPUs, links, NCCL, LSA, GIN)
//   tilewire bench allreduce [opts]    tilewire vs NCCL, nccl-tests style (see --help)
//   tilewire bench gemm [opts]         tilewire's GEMM vs cuBLASLt (see --help)
//   tilewire bench gemm-allreduce [..] fused GEMM + all-reduce vs cuBLASLt + NCCL/tw (see --help)
//   tilewire bench ep [opts]           MoE dispatch / combine vs NCCL all-to-all-v (see --help)
//   tilewire bench moe [opts]          the MoE FFN, with its GEMMs alone and its EP alone (see --help)
//   tilewire bench gemm-rs | ag-gemm   GEMM + reduce-scatter / all-gather + GEMM vs cuBLASLt + NCCL
//   tilewire model OP -m M -n N -k K   the fused ops' cost model: fused vs sequential on NVLink (no GPU)
//   tilewire trace summarize FILE      overlap metrics of a trace file (see --help)
//
// Every tw::Error / std::exception ends here as ONE line on stderr, "tilewire: <message>", and
// a non-zero exit: 2 for a bad command line (kInvalidArgument), 1 for anything else.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "commands.hpp"
#include "model_cmd.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/runtime/topology.hpp"
#include "tilewire/runtime/version.hpp"

namespace {

constexpr const char* kUsage =
    "usage: tilewire <command> [options]\n"
    "commands:\n"
    "  info [--json] [--env]       GPUs, peer links, NCCL/CUDA versions, LSA team, GIN.\n"
    "                              --json: machine-readable report; --env: the table of tilewire\n"
    "                              environment variables with the values in effect (no GPU probing).\n"
    "  bench allreduce [options]   time tilewire's all-reduce against NCCL on all local GPUs and\n"
    "                              check every result (tilewire bench allreduce --help); --virtual P:\n"
    "                              P ranks on GPU 0 without NCCL, a correctness run.\n"
    "  bench gemm [options]        time tilewire's GEMM against cuBLASLt on GPU 0, checked against it\n"
    "                              (tilewire bench gemm --help); --virtual P: P ranks on GPU 0 at once.\n"
    "  bench gemm-allreduce [opts] time the fused GEMM + all-reduce against cuBLASLt + NCCL, + tw\n"
    "                              all-reduce, chunked overlap, on all local GPUs, checked against\n"
    "                              the sum of the cuBLASLt partials (tilewire bench gemm-allreduce\n"
    "                              --help); --virtual P: P ranks on GPU 0 without NCCL.\n"
    "  bench ep [options]          time MoE dispatch and combine (high-throughput or low-latency mode)\n"
    "                              against NCCL's all-to-all-v pipeline, every row checked (tilewire\n"
    "                              bench ep --help); --virtual P: P ranks on GPU 0, correctness only.\n"
    "  bench moe [options]         time the MoE FFN (dispatch, grouped GEMMs, combine) on DeepSeek-V3 /\n"
    "                              Qwen3-MoE shapes, beside its GEMMs alone and its EP alone (--help).\n"
    "  bench gemm-rs | ag-gemm     time GEMM + reduce-scatter / all-gather + GEMM (sequence-parallel\n"
    "                              tensor parallelism) against cuBLASLt + NCCL in sequence and chunked,\n"
    "                              every element checked (--help; --sweep llama); --virtual P.\n"
    "  model OP -m M -n N -k K     what kAuto's cost model predicts for a fused op (gemm-allreduce,\n"
    "                              gemm-rs, ag-gemm) and its sequential path on NVLink at P = 2, 4, 8,\n"
    "                              and which one kAuto runs; no GPU (tilewire model --help).\n"
    "  trace summarize FILE.json   metrics of a trace file: overlap %, time to first byte, exposed\n"
    "                              communication, tile latency; --plot OUT.png draws the timeline.\n"
    "  --help, -h                  this text\n"
    "  --version                   tilewire and NCCL versions\n";

[[noreturn]] void usage_error(const std::string& msg) {
  throw tw::Error(tw::Errc::kInvalidArgument, msg + " (tilewire --help lists the commands)");
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

// The env table as JSON (format_env_table() is text only).
std::string env_json() {
  std::ostringstream o;
  o << "{\"env\":[";
  bool first = true;
  for (const tw::env::Var& v : tw::env::table()) {
    bool from_env = false;
    std::string val = tw::env::value_of(v, &from_env);
    o << (first ? "" : ",") << "{\"name\":\"" << v.name << "\",\"type\":\"" << tw::env::type_name(v.type)
      << "\",\"default\":\"" << json_escape(v.default_value) << "\",\"value\":\"" << json_escape(val)
      << "\",\"from_env\":" << (from_env ? "true" : "false") << ",\"doc\":\"" << json_escape(v.doc) << "\"}";
    first = false;
  }
  o << "]}";
  return o.str();
}

int cmd_info(const std::vector<std::string>& args) {
  bool json = false, env = false;
  for (const std::string& a : args) {
    if (a == "--json") json = true;
    else if (a == "--env") env = true;
    else if (a == "-h" || a == "--help") {
      std::fputs("usage: tilewire info [--json] [--env]\n", stdout);
      return 0;
    } else usage_error("info: unknown option '" + a + "'");
  }
  if (env) {  // the knobs only: no probing, so it works anywhere
    std::puts(json ? env_json().c_str() : tw::format_env_table().c_str());
    return 0;
  }
  tw::SystemReport r = tw::probe_system();
  if (r.no_gpu_reason.empty()) tw::probe_comm(r);  // a live communicator: LSA team, GIN
  if (json) std::puts(tw::report_json(r).c_str());
  else std::fputs(tw::format_report(r).c_str(), stdout);
  return 0;  // no GPU is a fact to report, not an error
}

int cmd_bench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs("usage: tilewire bench allreduce|gemm|gemm-allreduce|ep|moe|gemm-rs|ag-gemm [options]   (tilewire bench <op> --help)\n",
               stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string op = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (op == "gemm") return tw::cli::bench_gemm(rest);
  if (op == "gemm-allreduce") return tw::cli::bench_gemm_allreduce(rest);
  if (op == "ep") return tw::cli::bench_ep(rest);
  if (op == "moe") return tw::cli::bench_moe(rest);
  if (op == "gemm-rs" || op == "ag-gemm") return tw::cli::bench_tp(op, rest);
  if (op != "allreduce") usage_error("bench: unknown op '" + op + "' (available: allreduce, gemm, gemm-allreduce, ep, moe, gemm-rs, ag-gemm)");
  tw::cli::BenchArgs b = tw::cli::parse_bench_args(rest);
  if (b.help) {
    std::fputs(tw::cli::bench_usage(op).c_str(), stdout);
    return 0;
  }
  return tw::cli::bench_allreduce(b);
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("tilewire %s (NCCL headers %s)\n", tw::kVersion,
                tw::nccl_version_string(tw::nccl_header_version()).c_str());
    return 0;
  }
  if (cmd == "info") return cmd_info(rest);
  if (cmd == "bench") return cmd_bench(rest);
  if (cmd == "trace") return tw::cli::trace_command(rest);
  if (cmd == "model") return tw::cli::model_command(rest);
  usage_error("unknown command '" + cmd + "'");
}

// One line, one prefix: library messages already start with "tilewire: ".
void print_error(const char* what) {
  std::string m = what ? what : "unknown error";
  const std::string prefix = "tilewire: ";
  if (m.rfind(prefix, 0) == 0) m.erase(0, prefix.size());
  for (char& c : m)
    if (c == '\n' || c == '\r') c = ' ';
  std::fflush(stdout);
  std::fprintf(stderr, "tilewire: %s\n", m.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Before any CUDA call: `--virtual P` runs need a hardware queue per rank's stream
  // (Comm::run_virtual checks it; an explicit setting in the environment wins).
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);  // and kernels loaded up front (Comm::run_virtual checks it)
  try {
    return run(argc, argv);
  } catch (const tw::Error& e) {
    print_error(e.what());
    return e.code() == tw::Errc::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  } catch (...) {
    print_error("unknown exception");
    return 1;
  }
}
