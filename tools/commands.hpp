// tools/commands.hpp — the subcommands of the `tilewire` CLI, as main.cpp dispatches them.
// Each returns the process exit status or throws (main turns an exception into one line).
#pragma once
#include <string>
#include <vector>

#include "bench_args.hpp"

namespace tw::cli {

// `tilewire bench allreduce`: tilewire vs NCCL over all local GPUs, one thread per GPU, or
// (--virtual P) tilewire alone on P virtual ranks of GPU 0, checked alike.
// 0: every result correct and bit-identical across ranks; 1: some were not.
// Throws tw::Error (kUnsupported with no GPU, kTimeout when a device wait expired, ...).
int bench_allreduce(const BenchArgs& args);

// `tilewire bench gemm`: tilewire's GEMM vs cuBLASLt on GPU 0, every result checked against
// cuBLASLt's (bench_gemm.cu), or on --virtual P ranks of GPU 0 at once, each on its SM budget
// (bench_gemm_virtual.cu). Takes its own options (-m -n -k ...: --help), not BenchArgs.
// 0: every check passed; 1: some did not. Throws tw::Error(kUnsupported) without a GPU.
int bench_gemm(const std::vector<std::string>& argv);

// `tilewire bench gemm-allreduce`: the fused tw::gemm_allreduce against cuBLASLt + NCCL, cuBLASLt +
// tw::allreduce, chunked cuBLASLt/NCCL overlap and the GEMM alone, on all local GPUs, one thread
// each, or on --virtual P ranks of GPU 0 without the NCCL rows (bench_gemm_allreduce.cu). Own
// options (-m -n -k K_LOCAL ...: --help). 0: every checked shape correct and bit-identical across
// ranks; 1: some were not. Throws tw::Error(kUnsupported) without a GPU or without libcublasLt.
int bench_gemm_allreduce(const std::vector<std::string>& argv);

// `tilewire bench ep`: MoE dispatch and combine (ops/ep.hpp), both modes, against NCCL's
// all-to-all-v pipeline on all local GPUs, or --virtual P for correctness (bench_ep.cu). Own
// options (--help). 0: every row and count checked correct; 1: some were not.
int bench_ep(const std::vector<std::string>& argv);

// `tilewire bench moe`: the MoE FFN (ops/moe.hpp) on the DeepSeek-V3 / Qwen3-MoE shapes, with the
// GEMMs alone and the EP alone from the same run, on all local GPUs or --virtual P (bench_moe.cu).
// Own options (--help). 0: every checked output correct; 1: some were not.
int bench_moe(const std::vector<std::string>& argv);

// `tilewire bench gemm-rs` / `tilewire bench ag-gemm` (op_name): tw::gemm_reducescatter /
// tw::allgather_gemm against tilewire's GEMM alone, cuBLASLt alone, cuBLASLt + NCCL in sequence
// and chunked on two streams, on all local GPUs or --virtual P (bench_tp.cu). Own options
// (--help). 0: every checked element correct; 1: some were not.
int bench_tp(const std::string& op_name, const std::vector<std::string>& argv);

// `tilewire trace summarize FILE.json [--json] [--plot OUT.png]` (trace_cmd.cpp): the metrics of a
// trace file (tw::trace::save_trace_file); --plot runs scripts/plot_trace.py. 0, or throws.
int trace_command(const std::vector<std::string>& args);

// Draw a trace file (tw::trace::save_trace_file) as a PNG with scripts/plot_trace.py (python3 +
// matplotlib). Throws tw::Error(kUnsupported) when python3, matplotlib or the script is missing.
void plot_trace_file(const std::string& trace_file, const std::string& out);

}  // namespace tw::cli
