// The name / parse pair of every public enum (src/runtime/names.cpp, src/ops/names.cpp): every
// value's name parses back to that value, names are distinct, the CLI's and Python's spellings
// are accepted, and anything else is refused.
#include <gtest/gtest.h>

#include <cctype>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>

#include "tilewire/ops/allreduce.hpp"
#include "tilewire/ops/ep.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/ops/gemm_scatter_gather.hpp"
#include "tilewire/ops/grouped_gemm.hpp"
#include "tilewire/runtime/dtype.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace {

template <class E>
using NameFn = const char* (*)(E);
template <class E>
using ParseFn = std::optional<E> (*)(const std::string&);

// Every value of `all` (the whole enum): a name that is not the unknown-value "?", distinct from
// the others, that parses back to the value, and only as spelled (no padding, no case folding).
template <class E>
void expect_round_trip(const char* what, std::initializer_list<E> all, NameFn<E> name, ParseFn<E> parse) {
  SCOPED_TRACE(what);
  std::set<std::string> seen;
  for (E v : all) {
    const std::string n = name(v);
    EXPECT_FALSE(n.empty() || n == "?") << "value " << static_cast<int>(v) << " has no name";
    EXPECT_TRUE(seen.insert(n).second) << "two values named '" << n << "'";
    EXPECT_EQ(parse(n), v) << "'" << n << "'";
    EXPECT_FALSE(parse(" " + n).has_value()) << "' " << n << "'";
    EXPECT_FALSE(parse(n + " ").has_value()) << "'" << n << " '";
    std::string upper = n;
    for (char& c : upper) c = (char)std::toupper((unsigned char)c);
    if (upper != n) {
      EXPECT_FALSE(parse(upper).has_value()) << "'" << upper << "'";
    }
  }
  for (const char* bad : {"", "?", "nonsense", "-1", "auto auto"}) EXPECT_FALSE(parse(bad).has_value()) << "'" << bad << "'";
}

TEST(EnumNames, DType) {
  expect_round_trip("DType", {tw::DType::kFloat32, tw::DType::kFloat16, tw::DType::kBFloat16}, tw::dtype_name,
                    tw::parse_dtype);
}

TEST(EnumNames, Errc) {
  expect_round_trip("Errc",
                    {tw::Errc::kInvalidArgument, tw::Errc::kUnsupported, tw::Errc::kVersionMismatch, tw::Errc::kCuda,
                     tw::Errc::kNccl, tw::Errc::kTimeout, tw::Errc::kState},
                    tw::errc_name, tw::parse_errc);
  EXPECT_STREQ(tw::errc_name(static_cast<tw::Errc>(99)), "error");
}

TEST(EnumNames, EnvType) {
  using tw::env::Type;
  expect_round_trip("env::Type", {Type::kBool, Type::kInt, Type::kBytes, Type::kString}, tw::env::type_name,
                    tw::env::parse_type);
}

TEST(EnumNames, AllReduceAlgo) {
  using tw::AllReduceAlgo;
  expect_round_trip("AllReduceAlgo", {AllReduceAlgo::kAuto, AllReduceAlgo::kOneShot, AllReduceAlgo::kTwoShot},
                    tw::algo_name, tw::parse_algo);
}

TEST(EnumNames, ScatterGather) {
  using tw::ScatterGather;
  expect_round_trip("ScatterGather", {ScatterGather::kReduceScatter, ScatterGather::kAllGather},
                    tw::scatter_gather_name, tw::parse_scatter_gather);
}

TEST(EnumNames, BLayout) {
  expect_round_trip("BLayout", {tw::BLayout::kNK, tw::BLayout::kKN}, tw::blayout_name, tw::parse_blayout);
}

TEST(EnumNames, GemmRaster) {
  using tw::GemmRaster;
  expect_round_trip("GemmRaster", {GemmRaster::kAuto, GemmRaster::kAlongM, GemmRaster::kAlongN}, tw::gemm_raster_name,
                    tw::parse_gemm_raster);
}

TEST(EnumNames, PartialPrecision) {
  using tw::PartialPrecision;
  expect_round_trip("PartialPrecision", {PartialPrecision::kBFloat16, PartialPrecision::kFloat32},
                    tw::partial_precision_name, tw::parse_partial_precision);
}

TEST(EnumNames, GemmAllReduceAlgo) {
  using tw::GemmAllReduceAlgo;
  expect_round_trip("GemmAllReduceAlgo",
                    {GemmAllReduceAlgo::kAuto, GemmAllReduceAlgo::kExchange, GemmAllReduceAlgo::kOwner,
                     GemmAllReduceAlgo::kRelay},
                    tw::gemm_allreduce_algo_name, tw::parse_gemm_allreduce_algo);
}

TEST(EnumNames, GemmAllReducePath) {
  using tw::GemmAllReducePath;
  expect_round_trip("GemmAllReducePath",
                    {GemmAllReducePath::kAuto, GemmAllReducePath::kFused, GemmAllReducePath::kSequential},
                    tw::gemm_allreduce_path_name, tw::parse_gemm_allreduce_path);
}

TEST(EnumNames, TpPath) {
  using tw::TpPath;
  expect_round_trip("TpPath", {TpPath::kAuto, TpPath::kSequential, TpPath::kFused}, tw::tp_path_name,
                    tw::parse_tp_path);
}

TEST(EnumNames, GroupedTile) {
  using tw::GroupedTile;
  expect_round_trip("GroupedTile", {GroupedTile::kAuto, GroupedTile::k64x128pp, GroupedTile::k64x256pp, GroupedTile::k128x256coop},
                    tw::grouped_tile_name, tw::parse_grouped_tile);
}

TEST(EnumNames, GroupedEpilogue) {
  using tw::GroupedEpilogue;
  expect_round_trip("GroupedEpilogue", {GroupedEpilogue::kStore, GroupedEpilogue::kSwiGlu, GroupedEpilogue::kRowTargets},
                    tw::grouped_epilogue_name,
                    tw::parse_grouped_epilogue);
}

TEST(EnumNames, EpPayload) {
  using tw::EpPayload;
  expect_round_trip("EpPayload", {EpPayload::kBFloat16, EpPayload::kFp8E4M3}, tw::ep_payload_name,
                    tw::parse_ep_payload);
}

TEST(EnumNames, EpIndex) {
  using tw::EpIndex;
  expect_round_trip("EpIndex", {EpIndex::kInt64, EpIndex::kInt32}, tw::ep_index_name, tw::parse_ep_index);
}

TEST(EnumNames, EpMode) {
  using tw::EpMode;
  expect_round_trip("EpMode", {EpMode::kHighThroughput, EpMode::kLowLatency}, tw::ep_mode_name, tw::parse_ep_mode);
}

// The names the CLI prints in its tables and JSON.
TEST(EnumNames, NamesAreTheCliSpellings) {
  EXPECT_STREQ(tw::gemm_raster_name(tw::GemmRaster::kAlongM), "m");
  EXPECT_STREQ(tw::gemm_raster_name(tw::GemmRaster::kAlongN), "n");
  EXPECT_STREQ(tw::partial_precision_name(tw::PartialPrecision::kBFloat16), "bf16");
  EXPECT_STREQ(tw::partial_precision_name(tw::PartialPrecision::kFloat32), "fp32");
  EXPECT_STREQ(tw::gemm_allreduce_algo_name(tw::GemmAllReduceAlgo::kRelay), "relay");
  EXPECT_STREQ(tw::gemm_allreduce_path_name(tw::GemmAllReducePath::kSequential), "sequential");
  EXPECT_STREQ(tw::ep_payload_name(tw::EpPayload::kFp8E4M3), "fp8");
  EXPECT_STREQ(tw::ep_mode_name(tw::EpMode::kLowLatency), "ll");
  EXPECT_STREQ(tw::scatter_gather_name(tw::ScatterGather::kReduceScatter), "reduce_scatter");
}

// Where the CLI and Python spell a value differently, both spellings parse.
TEST(EnumNames, CliAndPythonSpellingsBothParse) {
  for (const char* s : {"bf16", "bfloat16"}) {
    EXPECT_EQ(tw::parse_dtype(s), tw::DType::kBFloat16) << s;
    EXPECT_EQ(tw::parse_partial_precision(s), tw::PartialPrecision::kBFloat16) << s;
    EXPECT_EQ(tw::parse_ep_payload(s), tw::EpPayload::kBFloat16) << s;
  }
  for (const char* s : {"fp32", "float32"}) {
    EXPECT_EQ(tw::parse_dtype(s), tw::DType::kFloat32) << s;
    EXPECT_EQ(tw::parse_partial_precision(s), tw::PartialPrecision::kFloat32) << s;
  }
  for (const char* s : {"fp16", "float16"}) EXPECT_EQ(tw::parse_dtype(s), tw::DType::kFloat16) << s;
  for (const char* s : {"oneshot", "one-shot", "1"}) EXPECT_EQ(tw::parse_algo(s), tw::AllReduceAlgo::kOneShot) << s;
  for (const char* s : {"twoshot", "two-shot", "2"}) EXPECT_EQ(tw::parse_algo(s), tw::AllReduceAlgo::kTwoShot) << s;
  // Spellings of one enum are not another's.
  EXPECT_FALSE(tw::parse_partial_precision("fp16").has_value());
  EXPECT_FALSE(tw::parse_ep_payload("fp32").has_value());
  EXPECT_FALSE(tw::parse_gemm_allreduce_algo("oneshot").has_value());
  EXPECT_FALSE(tw::parse_tp_path("exchange").has_value());
}

}  // namespace
