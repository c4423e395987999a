// CPU tests for the `tilewire bench` command line (tools/bench_args.hpp): parsing, the errors
// a user sees, the size sweep and the bandwidth arithmetic. No GPU needed.
#include "bench_args.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tilewire/runtime/errors.hpp"

namespace {

using tw::cli::BenchArgs;
using tw::cli::parse_bench_args;

BenchArgs parse(std::vector<std::string> v) { return parse_bench_args(std::span<const std::string>(v)); }

// The error code and a fragment of the message of a rejected command line.
void expect_rejected(std::vector<std::string> v, const std::string& fragment) {
  try {
    parse(v);
    ADD_FAILURE() << "accepted a bad command line; wanted an error mentioning '" << fragment << "'";
  } catch (const tw::Error& e) {
    EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(BenchArgs, Defaults) {
  BenchArgs a = parse({});
  EXPECT_EQ(a.minbytes, 8u << 10);
  EXPECT_EQ(a.maxbytes, 128u << 20);
  EXPECT_EQ(a.stepfactor, 2u);
  EXPECT_EQ(a.iters, 20);
  EXPECT_EQ(a.warmup_iters, 5);
  EXPECT_EQ(a.repeats, 5);
  EXPECT_TRUE(a.check);
  EXPECT_EQ(a.dtype, tw::DType::kBFloat16);
  EXPECT_EQ(a.algo, tw::AllReduceAlgo::kAuto);
  EXPECT_FALSE(a.cudagraph);
  EXPECT_EQ(a.op, "sum");
  EXPECT_FALSE(a.inplace);
  EXPECT_EQ(a.ngpus, 0);
  EXPECT_EQ(a.virtual_ranks, 0) << "off: one rank per GPU";
  EXPECT_TRUE(a.json_path.empty());
  EXPECT_FALSE(a.help);
}

TEST(BenchArgs, ShortOptions) {
  BenchArgs a = parse({"-b", "1K", "-e",   "1G", "-f",      "4",  "-n", "7",  "-w",  "0",  "-R", "3",  "-c",
                       "0",  "-d", "fp32", "-a", "twoshot", "-G", "1",  "-o", "sum", "-i", "1",  "-g", "2"});
  EXPECT_EQ(a.minbytes, 1024u);
  EXPECT_EQ(a.maxbytes, 1ull << 30);
  EXPECT_EQ(a.stepfactor, 4u);
  EXPECT_EQ(a.iters, 7);
  EXPECT_EQ(a.warmup_iters, 0);
  EXPECT_EQ(a.repeats, 3);
  EXPECT_FALSE(a.check);
  EXPECT_EQ(a.dtype, tw::DType::kFloat32);
  EXPECT_EQ(a.algo, tw::AllReduceAlgo::kTwoShot);
  EXPECT_TRUE(a.cudagraph);
  EXPECT_TRUE(a.inplace);
  EXPECT_EQ(a.ngpus, 2);
}

TEST(BenchArgs, LongOptionsAndEqualsForm) {
  BenchArgs a = parse({"--minbytes=64",    "--maxbytes",  "8M",      "--stepfactor=8", "--iters",    "3",
                       "--warmup_iters=2", "--repeats",   "9",       "--check=1",      "--datatype", "fp16",
                       "--algo=oneshot",   "--cudagraph", "0",       "--op=sum",       "--inplace",  "0",
                       "--ngpus=1",        "--json",      "out.json"});
  EXPECT_EQ(a.minbytes, 64u);
  EXPECT_EQ(a.maxbytes, 8u << 20);
  EXPECT_EQ(a.stepfactor, 8u);
  EXPECT_EQ(a.iters, 3);
  EXPECT_EQ(a.warmup_iters, 2);
  EXPECT_EQ(a.repeats, 9);
  EXPECT_TRUE(a.check);
  EXPECT_EQ(a.dtype, tw::DType::kFloat16);
  EXPECT_EQ(a.algo, tw::AllReduceAlgo::kOneShot);
  EXPECT_FALSE(a.cudagraph);
  EXPECT_FALSE(a.inplace);
  EXPECT_EQ(a.ngpus, 1);
  EXPECT_EQ(a.json_path, "out.json");
}

TEST(BenchArgs, DatatypeSpellings) {
  EXPECT_EQ(parse({"-d", "bf16"}).dtype, tw::DType::kBFloat16);
  EXPECT_EQ(parse({"-d", "bfloat16"}).dtype, tw::DType::kBFloat16);
  EXPECT_EQ(parse({"-d", "half"}).dtype, tw::DType::kFloat16);
  EXPECT_EQ(parse({"-d", "float"}).dtype, tw::DType::kFloat32);
}

TEST(BenchArgs, LaterOptionWins) { EXPECT_EQ(parse({"-n", "3", "--iters", "11"}).iters, 11); }

TEST(BenchArgs, Help) {
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_TRUE(parse({"-n", "2", "--help"}).help);
  const std::string u = tw::cli::bench_usage("allreduce");
  for (const char* opt : {"--minbytes", "--maxbytes", "--stepfactor", "--iters", "--warmup_iters", "--check",
                          "--datatype", "--algo", "--cudagraph", "--op", "--inplace", "--ngpus", "--virtual", "--json",
                          "--repeats"})
    EXPECT_NE(u.find(opt), std::string::npos) << opt;
}

// --virtual P: P virtual ranks on GPU 0 (Comm::run_virtual).
TEST(BenchArgs, Virtual) {
  EXPECT_EQ(parse({"--virtual", "8"}).virtual_ranks, 8);
  EXPECT_EQ(parse({"--virtual=3"}).virtual_ranks, 3);
  EXPECT_EQ(parse({"--virtual", "1"}).virtual_ranks, 1) << "a team of one is a valid team";
  EXPECT_EQ(parse({"--virtual", "2", "-g", "0"}).virtual_ranks, 2) << "-g 0 (all GPUs) is the default, no conflict";
  expect_rejected({"--virtual"}, "--virtual needs a value");
  expect_rejected({"-n", "2", "--virtual"}, "--virtual needs a value");
  expect_rejected({"--virtual", "0"}, "must be >= 1, got 0");
  expect_rejected({"--virtual", "-4"}, "must be >= 1, got -4");
  expect_rejected({"--virtual=0"}, "must be >= 1");
  expect_rejected({"--virtual", "two"}, "'two' is not an integer");
  expect_rejected({"--virtual", "4", "-g", "2"}, "exclude each other");
  // The shared parser (bench gemm-allreduce uses it too) says the same.
  EXPECT_EQ(tw::cli::parse_virtual_ranks("--virtual", "4"), 4);
  EXPECT_THROW(tw::cli::parse_virtual_ranks("--virtual", "0"), tw::Error);
  EXPECT_THROW(tw::cli::parse_virtual_ranks("--virtual", ""), tw::Error);
  try {
    tw::cli::parse_virtual_ranks("--virtual", "-1");
    ADD_FAILURE() << "accepted --virtual -1";
  } catch (const tw::Error& e) {
    EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("virtual ranks"), std::string::npos) << e.what();
  }
  // It is part of the options in effect, and parses back.
  const std::string s = tw::cli::format_options(parse({"--virtual", "5"}));
  EXPECT_NE(s.find("--virtual 5"), std::string::npos) << s;
  EXPECT_EQ(tw::cli::format_options(parse({})).find("--virtual"), std::string::npos) << "absent when off";
}

TEST(BenchArgs, ArgcArgvOverload) {
  const char* argv[] = {"-b", "16", "-e", "32"};
  BenchArgs a = parse_bench_args(4, argv);
  EXPECT_EQ(a.minbytes, 16u);
  EXPECT_EQ(a.maxbytes, 32u);
}

TEST(BenchArgs, Errors) {
  expect_rejected({"-b", "1M", "-e", "1K"}, "larger than");
  expect_rejected({"-f", "1"}, ">= 2");
  expect_rejected({"-f", "1.5"}, "integer");
  expect_rejected({"-n", "0"}, "-n must be >= 1");
  expect_rejected({"-R", "0"}, ">= 1");
  expect_rejected({"-w", "-1"}, ">= 0");
  expect_rejected({"-g", "-2"}, ">= 0");
  expect_rejected({"-d", "int8"}, "not a datatype");
  expect_rejected({"-a", "ring"}, "not an algorithm");
  expect_rejected({"-o", "max"}, "only sums");
  expect_rejected({"-c", "2"}, "0 or 1");
  expect_rejected({"-i", "both"}, "0 or 1");
  expect_rejected({"-G", "yes"}, "0 or 1");
  expect_rejected({"-b", "8Q"}, "not a size");
  expect_rejected({"-b", "0"}, "> 0");
  expect_rejected({"--frobnicate", "1"}, "unknown option '--frobnicate'");
  expect_rejected({"-x"}, "unknown option '-x'");
  expect_rejected({"-n"}, "needs a value");
  expect_rejected({"--json="}, "needs a file name");
  expect_rejected({"42"}, "unexpected argument '42'");
}

TEST(BenchArgs, FormatBytesAndOptions) {
  EXPECT_EQ(tw::cli::format_bytes(8192), "8K");
  EXPECT_EQ(tw::cli::format_bytes(128ull << 20), "128M");
  EXPECT_EQ(tw::cli::format_bytes(1ull << 30), "1G");
  EXPECT_EQ(tw::cli::format_bytes(1000), "1000");
  EXPECT_EQ(tw::cli::format_bytes(0), "0");
  // The printed options parse back to the same settings.
  BenchArgs a = parse({"-b", "1K", "-e", "64M", "-f", "4", "-d", "fp16", "-a", "oneshot", "-G", "1", "-i", "1"});
  const std::string s = tw::cli::format_options(a);
  std::vector<std::string> words;
  for (size_t p = 0; p < s.size();) {
    size_t q = s.find(' ', p);
    if (q == std::string::npos) q = s.size();
    words.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  BenchArgs b = parse(words);
  EXPECT_EQ(b.minbytes, a.minbytes);
  EXPECT_EQ(b.maxbytes, a.maxbytes);
  EXPECT_EQ(b.stepfactor, a.stepfactor);
  EXPECT_EQ(b.dtype, a.dtype);
  EXPECT_EQ(b.algo, a.algo);
  EXPECT_EQ(b.cudagraph, a.cudagraph);
  EXPECT_EQ(b.inplace, a.inplace);
}

TEST(BenchArgs, SizesGeometric) {
  BenchArgs a = parse({"-b", "1K", "-e", "16K", "-f", "2"});
  EXPECT_EQ(tw::cli::bench_sizes(a, 1), (std::vector<uint64_t>{1024, 2048, 4096, 8192, 16384}));
  a = parse({"-b", "1K", "-e", "20K", "-f", "4"});  // stops before passing -e
  EXPECT_EQ(tw::cli::bench_sizes(a, 2), (std::vector<uint64_t>{1024, 4096, 16384}));
  a = parse({"-b", "4K", "-e", "4K"});  // a single size
  EXPECT_EQ(tw::cli::bench_sizes(a, 8), (std::vector<uint64_t>{4096}));
}

TEST(BenchArgs, SizesRoundToRankGranule) {
  // 3 ranks: granule 48 bytes; 1000 -> 960, 3000 -> 2976, 9000 -> 8976.
  BenchArgs a = parse({"-b", "1000", "-e", "9000", "-f", "3"});
  std::vector<uint64_t> s = tw::cli::bench_sizes(a, 3);
  EXPECT_EQ(s, (std::vector<uint64_t>{960, 2976, 8976}));
  for (int P : {1, 2, 3, 4, 5, 6, 7, 8}) {
    BenchArgs b = parse({"-b", "1", "-e", "1G", "-f", "3"});
    std::vector<uint64_t> v = tw::cli::bench_sizes(b, P);
    ASSERT_FALSE(v.empty());
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_GE(v[i], 16u);
      EXPECT_EQ(v[i] % 16, 0u) << "whole 16-byte vectors, whole elements of every dtype";
      if (v[i] >= 16u * P) {
        EXPECT_EQ(v[i] % (16u * P), 0u) << "equal 16-byte-aligned shards per rank";
      }
      if (i > 0) {
        EXPECT_GT(v[i], v[i - 1]) << "increasing, no duplicates";
      }
      EXPECT_LE(v[i], 1ull << 30);
    }
  }
}

TEST(BenchArgs, SizesSmallAreRaisedTo16AndDeduplicated) {
  BenchArgs a = parse({"-b", "1", "-e", "64", "-f", "2"});  // 1 2 4 8 16 32 64, 8 ranks: granule 128
  EXPECT_EQ(tw::cli::bench_sizes(a, 8), (std::vector<uint64_t>{16, 32, 64}));
  EXPECT_EQ(tw::cli::bench_sizes(a, 1), (std::vector<uint64_t>{16, 32, 64}));
}

TEST(BenchArgs, SizesNoOverflowNearTheTop) {
  BenchArgs a;
  a.minbytes = 1ull << 62;
  a.maxbytes = UINT64_MAX;
  a.stepfactor = 4;
  std::vector<uint64_t> s = tw::cli::bench_sizes(a, 1);
  EXPECT_EQ(s, (std::vector<uint64_t>{1ull << 62}));
}

TEST(BenchArgs, SizesRejectBadInput) {
  BenchArgs a;
  EXPECT_THROW(tw::cli::bench_sizes(a, 0), tw::Error);
  a.stepfactor = 1;
  EXPECT_THROW(tw::cli::bench_sizes(a, 2), tw::Error);
}

TEST(BenchArgs, BusFactor) {
  EXPECT_DOUBLE_EQ(tw::cli::allreduce_bus_factor(1), 0.0);
  EXPECT_DOUBLE_EQ(tw::cli::allreduce_bus_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(tw::cli::allreduce_bus_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(tw::cli::allreduce_bus_factor(8), 1.75);
}

TEST(BenchArgs, Bandwidth) {
  // 1 GB in 10 ms: 100 GB/s algorithm bandwidth; 8 ranks: x1.75 on the bus.
  tw::cli::Bandwidth b = tw::cli::allreduce_bandwidth(1000000000ull, 0.01, 8);
  EXPECT_DOUBLE_EQ(b.algbw_gbps, 100.0);
  EXPECT_DOUBLE_EQ(b.busbw_gbps, 175.0);
  b = tw::cli::allreduce_bandwidth(1 << 20, 1e-5, 2);  // 1 MiB in 10 us
  EXPECT_NEAR(b.algbw_gbps, 104.8576, 1e-9);
  EXPECT_NEAR(b.busbw_gbps, 104.8576, 1e-9);
  b = tw::cli::allreduce_bandwidth(1024, 0.0, 4);  // no time measured: no bandwidth, no division by 0
  EXPECT_EQ(b.algbw_gbps, 0.0);
  EXPECT_EQ(b.busbw_gbps, 0.0);
}

TEST(BenchArgs, Median) {
  EXPECT_EQ(tw::cli::median({}), 0.0);
  EXPECT_EQ(tw::cli::median({3.0}), 3.0);
  EXPECT_EQ(tw::cli::median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(tw::cli::median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(tw::cli::median({1.0, 100.0, 2.0, 3.0, 1000.0}), 3.0) << "outliers do not move the median";
}

}  // namespace
