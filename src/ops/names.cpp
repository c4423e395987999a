// The spellings of the ops' public enums (src/runtime/spellings.hpp has the rule).
#include <optional>
#include <string>

#include "../runtime/spellings.hpp"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/ops/ep.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/ops/gemm_scatter_gather.hpp"
#include "tilewire/ops/grouped_gemm.hpp"

namespace tw {
namespace {

// All-reduce family.
constexpr Spelling<AllReduceAlgo> kAllReduceAlgo[] = {
    {"auto", AllReduceAlgo::kAuto},     {"oneshot", AllReduceAlgo::kOneShot}, {"one-shot", AllReduceAlgo::kOneShot},
    {"1", AllReduceAlgo::kOneShot},     {"twoshot", AllReduceAlgo::kTwoShot}, {"two-shot", AllReduceAlgo::kTwoShot},
    {"2", AllReduceAlgo::kTwoShot}};

constexpr Spelling<ScatterGather> kScatterGather[] = {
    {"reduce_scatter", ScatterGather::kReduceScatter}, {"all_gather", ScatterGather::kAllGather}};

// GEMM and the fused GEMMs.
constexpr Spelling<BLayout> kBLayout[] = {{"nk", BLayout::kNK}, {"kn", BLayout::kKN}};

constexpr Spelling<GemmRaster> kGemmRaster[] = {
    {"auto", GemmRaster::kAuto}, {"m", GemmRaster::kAlongM}, {"n", GemmRaster::kAlongN}};

constexpr Spelling<PartialPrecision> kPartialPrecision[] = {
    {"bf16", PartialPrecision::kBFloat16}, {"bfloat16", PartialPrecision::kBFloat16},
    {"fp32", PartialPrecision::kFloat32},  {"float32", PartialPrecision::kFloat32}};

constexpr Spelling<GemmAllReduceAlgo> kGemmAllReduceAlgo[] = {
    {"auto", GemmAllReduceAlgo::kAuto},
    {"exchange", GemmAllReduceAlgo::kExchange},
    {"owner", GemmAllReduceAlgo::kOwner},
    {"relay", GemmAllReduceAlgo::kRelay}};

constexpr Spelling<GemmAllReducePath> kGemmAllReducePath[] = {
    {"auto", GemmAllReducePath::kAuto}, {"fused", GemmAllReducePath::kFused}, {"sequential", GemmAllReducePath::kSequential}};

constexpr Spelling<TpPath> kTpPath[] = {{"auto", TpPath::kAuto}, {"sequential", TpPath::kSequential}, {"fused", TpPath::kFused}};

constexpr Spelling<GroupedTile> kGroupedTile[] = {
    {"auto", GroupedTile::kAuto}, {"64x128pp", GroupedTile::k64x128pp}, {"64x256pp", GroupedTile::k64x256pp}, {"128x256coop", GroupedTile::k128x256coop}};
constexpr Spelling<GroupedEpilogue> kGroupedEpilogue[] = {
    {"store", GroupedEpilogue::kStore}, {"swiglu", GroupedEpilogue::kSwiGlu}, {"row_targets", GroupedEpilogue::kRowTargets}};

// Expert parallelism.
constexpr Spelling<EpPayload> kEpPayload[] = {
    {"bf16", EpPayload::kBFloat16}, {"bfloat16", EpPayload::kBFloat16}, {"fp8", EpPayload::kFp8E4M3}};

constexpr Spelling<EpIndex> kEpIndex[] = {{"int64", EpIndex::kInt64}, {"int32", EpIndex::kInt32}};

constexpr Spelling<EpMode> kEpMode[] = {{"ht", EpMode::kHighThroughput}, {"ll", EpMode::kLowLatency}};

}  // namespace

const char* algo_name(AllReduceAlgo a) { return name_in(kAllReduceAlgo, a); }
std::optional<AllReduceAlgo> parse_algo(const std::string& s) { return parse_in(kAllReduceAlgo, s); }

const char* scatter_gather_name(ScatterGather op) { return name_in(kScatterGather, op); }
std::optional<ScatterGather> parse_scatter_gather(const std::string& s) { return parse_in(kScatterGather, s); }

const char* blayout_name(BLayout l) { return name_in(kBLayout, l); }
std::optional<BLayout> parse_blayout(const std::string& s) { return parse_in(kBLayout, s); }

const char* gemm_raster_name(GemmRaster r) { return name_in(kGemmRaster, r); }
std::optional<GemmRaster> parse_gemm_raster(const std::string& s) { return parse_in(kGemmRaster, s); }

const char* partial_precision_name(PartialPrecision p) { return name_in(kPartialPrecision, p); }
std::optional<PartialPrecision> parse_partial_precision(const std::string& s) { return parse_in(kPartialPrecision, s); }

const char* gemm_allreduce_algo_name(GemmAllReduceAlgo a) { return name_in(kGemmAllReduceAlgo, a); }
std::optional<GemmAllReduceAlgo> parse_gemm_allreduce_algo(const std::string& s) { return parse_in(kGemmAllReduceAlgo, s); }

const char* gemm_allreduce_path_name(GemmAllReducePath p) { return name_in(kGemmAllReducePath, p); }
std::optional<GemmAllReducePath> parse_gemm_allreduce_path(const std::string& s) { return parse_in(kGemmAllReducePath, s); }

const char* tp_path_name(TpPath p) { return name_in(kTpPath, p); }
std::optional<TpPath> parse_tp_path(const std::string& s) { return parse_in(kTpPath, s); }

const char* grouped_tile_name(GroupedTile t) { return name_in(kGroupedTile, t); }
std::optional<GroupedTile> parse_grouped_tile(const std::string& s) { return parse_in(kGroupedTile, s); }
const char* grouped_epilogue_name(GroupedEpilogue e) { return name_in(kGroupedEpilogue, e); }
std::optional<GroupedEpilogue> parse_grouped_epilogue(const std::string& s) { return parse_in(kGroupedEpilogue, s); }

const char* ep_payload_name(EpPayload p) { return name_in(kEpPayload, p); }
std::optional<EpPayload> parse_ep_payload(const std::string& s) { return parse_in(kEpPayload, s); }

const char* ep_index_name(EpIndex i) { return name_in(kEpIndex, i); }
std::optional<EpIndex> parse_ep_index(const std::string& s) { return parse_in(kEpIndex, s); }

const char* ep_mode_name(EpMode m) { return name_in(kEpMode, m); }
std::optional<EpMode> parse_ep_mode(const std::string& s) { return parse_in(kEpMode, s); }

}  // namespace tw
