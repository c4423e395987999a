// Parsing and host arithmetic for `tilewire bench <op>`. See bench_args.hpp for the rules.
#include "bench_args.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>

#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::cli {
namespace {

// One option: its short and long spelling and where its value goes.
struct Opt {
  const char* shrt;  // "-b"
  const char* lng;   // "--minbytes"
  const char* what;  // accepted form, for messages and --help
  void (*apply)(BenchArgs&, const std::string& name, const std::string& value);
};

std::string bad_value(const std::string& name, const std::string& v, const char* form) {
  return "option " + name + ": '" + v + "' is not " + form + " (see tilewire bench allreduce --help)";
}

uint64_t bytes_value(const std::string& name, const std::string& v) {
  std::optional<uint64_t> b = env::parse_bytes(v);
  TW_REQUIRE(b.has_value(), kInvalidArgument, bad_value(name, v, "a size like 4096, 8K, 16M, 1G"));
  TW_REQUIRE(*b > 0, kInvalidArgument, "option " + name + " must be > 0 bytes");
  return *b;
}

int64_t int_value(const std::string& name, const std::string& v, int64_t lo) {
  std::optional<int64_t> i = env::parse_int(v);
  TW_REQUIRE(i.has_value(), kInvalidArgument, bad_value(name, v, "an integer"));
  TW_REQUIRE(*i >= lo && *i <= std::numeric_limits<int>::max(), kInvalidArgument,
             "option " + name + " must be >= " + std::to_string(lo) + ", got " + v);
  return *i;
}

bool flag_value(const std::string& name, const std::string& v) {
  TW_REQUIRE(v == "0" || v == "1", kInvalidArgument, bad_value(name, v, "0 or 1"));
  return v == "1";
}

const Opt kOpts[] = {
    {"-b", "--minbytes", "SIZE  first size per rank (8K)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.minbytes = bytes_value(n, v); }},
    {"-e", "--maxbytes", "SIZE  last size per rank (128M)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.maxbytes = bytes_value(n, v); }},
    {"-f", "--stepfactor", "F     multiply the size by F each step, F >= 2 (2)",
     [](BenchArgs& a, const std::string& n, const std::string& v) {
       std::optional<int64_t> f = env::parse_int(v);
       TW_REQUIRE(f.has_value(), kInvalidArgument, bad_value(n, v, "an integer"));
       TW_REQUIRE(*f >= 2, kInvalidArgument, "option " + n + " (step factor) must be >= 2, got " + v);
       a.stepfactor = (uint64_t)*f;
     }},
    {"-n", "--iters", "N     timed iterations per repeat, >= 1 (20)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.iters = (int)int_value(n, v, 1); }},
    {"-w", "--warmup_iters", "N     warmup iterations, >= 0 (5)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.warmup_iters = (int)int_value(n, v, 0); }},
    {"-R", "--repeats", "R     timed repeats, median reported, >= 1 (5)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.repeats = (int)int_value(n, v, 1); }},
    {"-c", "--check", "0|1   1: check every size before and after timing; 0: once, after timing (1)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.check = flag_value(n, v); }},
    {"-d", "--datatype", "T     bf16 | fp16 | fp32 (bf16)",
     [](BenchArgs& a, const std::string& n, const std::string& v) {
       std::optional<DType> t = parse_dtype(v);
       TW_REQUIRE(t.has_value(), kInvalidArgument, bad_value(n, v, "a datatype (bf16, fp16, fp32)"));
       a.dtype = *t;
     }},
    {"-a", "--algo", "A     tilewire algorithm: auto | oneshot | twoshot (auto)",
     [](BenchArgs& a, const std::string& n, const std::string& v) {
       std::optional<AllReduceAlgo> al = parse_algo(v);
       TW_REQUIRE(al.has_value(), kInvalidArgument, bad_value(n, v, "an algorithm (auto, oneshot, twoshot)"));
       a.algo = *al;
     }},
    {"-G", "--cudagraph", "0|1   time CUDA-graph launches of n captured iterations (0)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.cudagraph = flag_value(n, v); }},
    {"-o", "--op", "OP    reduction: sum (the only one)",
     [](BenchArgs& a, const std::string& n, const std::string& v) {
       TW_REQUIRE(v == "sum", kInvalidArgument,
                  "option " + n + ": '" + v + "' is not supported; tilewire all-reduce only sums (-o sum)");
       a.op = v;
     }},
    {"-i", "--inplace", "0|1   1: send == recv (0)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.inplace = flag_value(n, v); }},
    {"-g", "--ngpus", "N     local GPUs to use, one rank each; 0: all (0)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.ngpus = (int)int_value(n, v, 0); }},
    {nullptr, "--virtual", "P     P >= 1 virtual ranks on GPU 0 instead of one rank per GPU (off)",
     [](BenchArgs& a, const std::string& n, const std::string& v) { a.virtual_ranks = parse_virtual_ranks(n, v); }},
    {nullptr, "--json", "FILE  also write all rows and metadata as JSON",
     [](BenchArgs& a, const std::string& n, const std::string& v) {
       TW_REQUIRE(!v.empty(), kInvalidArgument, "option " + n + " needs a file name");
       a.json_path = v;
     }},
};

const Opt* find_opt(const std::string& name) {
  for (const Opt& o : kOpts)
    if ((o.shrt && name == o.shrt) || name == o.lng) return &o;
  return nullptr;
}

}  // namespace

BenchArgs parse_bench_args(std::span<const std::string> argv) {
  BenchArgs a;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string word = argv[i];
    if (word == "-h" || word == "--help") {
      a.help = true;
      continue;
    }
    std::string name = word, value;
    bool have_value = false;
    if (word.rfind("--", 0) == 0) {
      if (size_t eq = word.find('='); eq != std::string::npos) {  // --minbytes=8K
        name = word.substr(0, eq);
        value = word.substr(eq + 1);
        have_value = true;
      }
    }
    TW_REQUIRE(word.size() > 1 && word[0] == '-', kInvalidArgument,
               "unexpected argument '" + word + "' (options take the form -b 8K or --minbytes 8K; see --help)");
    const Opt* o = find_opt(name);
    TW_REQUIRE(o != nullptr, kInvalidArgument,
               "unknown option '" + name + "' (tilewire bench allreduce --help lists the options)");
    if (!have_value) {
      TW_REQUIRE(i + 1 < argv.size(), kInvalidArgument, "option " + name + " needs a value");
      value = argv[++i];
    }
    o->apply(a, name, value);
  }
  TW_REQUIRE(a.virtual_ranks == 0 || a.ngpus == 0, kInvalidArgument,
             "-g/--ngpus " + std::to_string(a.ngpus) + " and --virtual " + std::to_string(a.virtual_ranks) +
                 " exclude each other: a virtual team runs all its ranks on GPU 0 (drop -g)");
  TW_REQUIRE(a.minbytes <= a.maxbytes, kInvalidArgument,
             "-b/--minbytes (" + format_bytes(a.minbytes) + ") is larger than -e/--maxbytes (" +
                 format_bytes(a.maxbytes) + ")");
  return a;
}

BenchArgs parse_bench_args(int argc, const char* const* argv) {
  std::vector<std::string> v(argv, argv + std::max(argc, 0));
  return parse_bench_args(std::span<const std::string>(v));
}

int parse_virtual_ranks(const std::string& name, const std::string& value) {
  std::optional<int64_t> p = env::parse_int(value);
  TW_REQUIRE(p.has_value(), kInvalidArgument,
             "option " + name + ": '" + value + "' is not an integer (the number of virtual ranks on GPU 0, >= 1)");
  TW_REQUIRE(*p >= 1 && *p <= std::numeric_limits<int>::max(), kInvalidArgument,
             "option " + name + " takes the number of virtual ranks on GPU 0, which must be >= 1, got " + value);
  return (int)*p;
}

std::vector<int> parse_int_list(const std::string& s, const std::string& what) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string w;
  while (std::getline(ss, w, ',')) {
    char* end = nullptr;
    const long x = std::strtol(w.c_str(), &end, 10);
    TW_REQUIRE(!w.empty() && *end == 0 && x > 0 && x < (1L << 30), kInvalidArgument,
               what + " takes positive integers, got '" + s + "'");
    v.push_back((int)x);
  }
  // getline yields no empty word after a trailing comma: "3," would read as "3"
  TW_REQUIRE(!v.empty() && s.back() != ',', kInvalidArgument, what + " takes positive integers, got '" + s + "'");
  return v;
}

std::string bench_usage(const std::string& op) {
  std::ostringstream o;
  o << "usage: tilewire bench " << op << " [options]\n"
    << "  Times tilewire's " << op << " against NCCL (plain buffers and symmetric windows) over all\n"
    << "  local GPUs in one process, one thread per GPU; checks every result on the device.\n"
    << "  --virtual P runs P ranks on GPU 0 instead (one thread each, no NCCL communicator): every\n"
    << "  check as on P GPUs; the nccl and nccl-symm columns are n/a; times are not NVLink figures.\n"
    << "options (value in parentheses: default; sizes are bytes per rank, K/M/G = 1024^1/2/3):\n";
  for (const Opt& opt : kOpts) {
    std::string names = opt.shrt ? std::string(opt.shrt) + ", " + opt.lng : std::string("    ") + opt.lng;
    o << "  " << names << std::string(names.size() < 22 ? 22 - names.size() : 1, ' ') << opt.what << "\n";
  }
  o << "  -h, --help            this text\n"
    << "Sizes run from -b to -e by factor -f, rounded down to a multiple of 16*nranks bytes (at least 16).\n"
    << "Times: median over -R repeats of (n back-to-back iterations)/n, slowest rank.\n"
    << "Exit status: 0 all results correct, 1 wrong results or a runtime error, 2 bad command line.\n";
  return o.str();
}

std::string format_bytes(uint64_t b) {
  static const char* suf[] = {"", "K", "M", "G", "T"};
  int k = 0;
  while (k < 4 && b != 0 && b % 1024 == 0) {
    b /= 1024;
    ++k;
  }
  return std::to_string(b) + suf[k];
}

std::string format_options(const BenchArgs& a) {
  std::ostringstream o;
  o << "-b " << format_bytes(a.minbytes) << " -e " << format_bytes(a.maxbytes) << " -f " << a.stepfactor << " -n "
    << a.iters << " -w " << a.warmup_iters << " -R " << a.repeats << " -c " << (a.check ? 1 : 0) << " -d "
    << dtype_name(a.dtype) << " -a " << algo_name(a.algo) << " -G " << (a.cudagraph ? 1 : 0) << " -o " << a.op
    << " -i " << (a.inplace ? 1 : 0) << " -g " << a.ngpus;
  if (a.virtual_ranks > 0) o << " --virtual " << a.virtual_ranks;
  if (!a.json_path.empty()) o << " --json " << a.json_path;
  return o.str();
}

std::vector<uint64_t> bench_sizes(const BenchArgs& a, int nranks) {
  TW_REQUIRE(nranks >= 1, kInvalidArgument, "bench_sizes: nranks must be >= 1, got " + std::to_string(nranks));
  TW_REQUIRE(a.stepfactor >= 2, kInvalidArgument, "bench_sizes: step factor must be >= 2");
  TW_REQUIRE(a.minbytes >= 1 && a.minbytes <= a.maxbytes, kInvalidArgument,
             "bench_sizes: need 1 <= minbytes <= maxbytes");
  const uint64_t granule = 16ull * (uint64_t)nranks;
  std::vector<uint64_t> out;
  for (uint64_t s = a.minbytes;;) {
    uint64_t r = s >= granule ? s / granule * granule : std::max<uint64_t>(16, s / 16 * 16);
    if (out.empty() || r > out.back()) out.push_back(r);
    if (s > a.maxbytes / a.stepfactor) break;  // the next step would pass maxbytes (or overflow)
    s *= a.stepfactor;
  }
  return out;
}

double allreduce_bus_factor(int nranks) { return nranks <= 1 ? 0.0 : 2.0 * (nranks - 1) / nranks; }

Bandwidth allreduce_bandwidth(uint64_t bytes, double seconds, int nranks) {
  Bandwidth b;
  if (seconds <= 0) return b;
  b.algbw_gbps = (double)bytes / seconds / 1e9;
  b.busbw_gbps = b.algbw_gbps * allreduce_bus_factor(nranks);
  return b;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string bench_commit() {
  const char* c = std::getenv("TILEWIRE_COMMIT");
  return c && *c ? c : "unknown";
}

int require_gpus(const std::string& cmd) {
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    throw Error(Errc::kUnsupported,
                cmd + ": no CUDA GPU (" + (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  return ndev;
}

}  // namespace tw::cli
