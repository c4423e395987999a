// tools/bench_args.hpp — the command line of `tilewire bench <op>`, nccl-tests style, and the
// host arithmetic every benchmark shares (size sweep, bandwidths, medians).
//
// Pure host code: no GPU, no communicator. Unit-tested in tests/cpu/bench_args_test.cpp.
//
//   tilewire bench allreduce -b 8K -e 128M -f 2 -n 20 -w 5 -R 5 -c 1 -d bf16 -a auto -G 0
//
// Every option takes a value ("-b 8K", "--minbytes 8K", "--minbytes=8K"). A malformed or
// inconsistent command line throws tw::Error(kInvalidArgument) naming the option and the
// accepted form; nothing is run.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tilewire/ops/allreduce.hpp"
#include "tilewire/runtime/dtype.hpp"

namespace tw::cli {

struct BenchArgs {
  uint64_t minbytes = 8ull << 10;     // -b/--minbytes     first size of the sweep (bytes per rank)
  uint64_t maxbytes = 128ull << 20;   // -e/--maxbytes     last size (inclusive, when the sweep hits it)
  uint64_t stepfactor = 2;            // -f/--stepfactor   geometric step, >= 2
  int iters = 20;                     // -n/--iters        timed back-to-back iterations per repeat
  int warmup_iters = 5;               // -w/--warmup_iters untimed iterations before timing
  int repeats = 5;                    // -R/--repeats      timed repeats; the median is reported
  bool check = true;                  // -c/--check        1: check before and after timing; 0: once, after
  DType dtype = DType::kBFloat16;     // -d/--datatype     bf16 | fp16 | fp32
  AllReduceAlgo algo = AllReduceAlgo::kAuto;  // -a/--algo  auto | oneshot | twoshot (tilewire only)
  bool cudagraph = false;             // -G/--cudagraph    time CUDA-graph launches of n captured iterations
  std::string op = "sum";             // -o/--op           reduction; only sum
  bool inplace = false;               // -i/--inplace      send == recv
  int ngpus = 0;                      // -g/--ngpus        local GPUs (ranks) to use; 0: all visible
  int virtual_ranks = 0;              // --virtual P       P virtual ranks on GPU 0 (Comm::run_virtual); 0: off
  std::string json_path;              // --json FILE       also write every row + metadata as JSON
  bool help = false;                  // -h/--help
};

// argv: the words after "bench <op>". Throws tw::Error(kInvalidArgument) on any problem
// (--virtual with -g > 0 included: a virtual team runs on GPU 0 only).
BenchArgs parse_bench_args(std::span<const std::string> argv);
BenchArgs parse_bench_args(int argc, const char* const* argv);

// The value of `--virtual P` (`name` as the user spelled it), shared by every bench that takes
// it: an integer P >= 1, else tw::Error(kInvalidArgument) saying so.
int parse_virtual_ranks(const std::string& name, const std::string& value);

// "a,b,c" as positive integers below 2^30, for options that take a list (-m 1024,2048). `what`
// names the option as the message should ("bench: -m"); anything else throws
// tw::Error(kInvalidArgument) "<what> takes positive integers, got '<s>'".
std::vector<int> parse_int_list(const std::string& s, const std::string& what);

// The option summary printed by `tilewire bench <op> --help`.
std::string bench_usage(const std::string& op);

// The options in effect, as a command line ("-b 8K -e 128M ..."), for headers and JSON.
std::string format_options(const BenchArgs& a);

// "8K", "128M", "1G" when exact, else the plain byte count.
std::string format_bytes(uint64_t bytes);

// Sizes (bytes per rank) the sweep times, in increasing order, no duplicates.
// Rule: s = b, b*f, b*f^2, ... while s <= e; each s becomes
//   floor(s / (16*nranks)) * (16*nranks)    when s >= 16*nranks,
//   max(16, floor(s / 16) * 16)             otherwise.
// So every size is a multiple of 16 bytes (a whole number of elements for every dtype, and of
// the 16-byte vectors the kernels move) and, once large enough, splits into nranks equal
// 16-byte-aligned shards (two-shot ownership with no tail). Sizes below 16 are raised to 16.
std::vector<uint64_t> bench_sizes(const BenchArgs& a, int nranks);

// nccl-tests conventions: algbw = bytes / time; busbw = algbw * factor, where for all-reduce
// factor = 2*(P-1)/P (each rank sends and receives (P-1)/P of the buffer twice). GB = 1e9 B.
double allreduce_bus_factor(int nranks);
struct Bandwidth {
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};
Bandwidth allreduce_bandwidth(uint64_t bytes, double seconds, int nranks);

// Median of v (mean of the middle two when even); 0 for an empty v.
double median(std::vector<double> v);

// The number of CUDA devices; throws tw::Error(kUnsupported) "<cmd>: no CUDA GPU (why)" when there
// is none (a bench's first step).
int require_gpus(const std::string& cmd);

// The commit a bench report records: TILEWIRE_COMMIT (scripts/gpu_run.sh sets it from
// dist/COMMIT; a bench's own variable, not the library's), else "unknown".
std::string bench_commit();

}  // namespace tw::cli
