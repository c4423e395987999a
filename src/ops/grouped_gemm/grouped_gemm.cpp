// tw::grouped_gemm(): the argument checks, the tile rule and the launch of the instantiated kernel
// (launch.hpp), found in one table keyed by (B layout, tile).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../sm90.hpp"
#include "launch.hpp"
#include "tilewire/ops/grouped_gemm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

namespace {

Status fail(std::string why) { return Status{false, "grouped_gemm: " + std::move(why)}; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool overlap(const void* p, size_t pn, const void* q, size_t qn) {
  if (pn == 0 || qn == 0) return false;
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + qn && b < a + pn;
}

// The tile rule. A group's rows are streamed against its whole B_g either way, so what a tile
// costs is the rows it computes beyond the group's: a 64-row tile wastes least on the few rows
// per expert of a decode step (128 tokens x top-8 over 256 experts: 4 per expert and source),
// the 128 x 256 tile reads B_g half as often per row where groups hold hundreds of rows or more.
// The 64 x 256 ping-pong tile is not in the rule: at the real rank it came within about 10% of
// 128x256coop either way at 256-1024 rows per group (H200 and H100), but a virtual team's MoE
// GEMMs ran 2-3x slower on it than on 128x256coop (docs/grouped_gemm.md). An explicit choice only.
constexpr int kSmallTileMaxRows = 64;

// The kernels this build instantiates (launch.hpp), keyed by (epilogue, B layout, tile).
struct KernelEntry {
  GroupedEpilogue epilogue;
  BLayout b;
  GroupedTile tile;
  grouped_impl::Launch launch;
};
constexpr GroupedEpilogue kStore = GroupedEpilogue::kStore, kSwiGlu = GroupedEpilogue::kSwiGlu,
                          kRowTargets = GroupedEpilogue::kRowTargets;
constexpr KernelEntry kKernels[] = {
    {kStore, BLayout::kNK, GroupedTile::k64x128pp, grouped_impl::launch_bf16_nk_pp},
    {kStore, BLayout::kKN, GroupedTile::k64x128pp, grouped_impl::launch_bf16_kn_pp},
    {kStore, BLayout::kNK, GroupedTile::k64x256pp, grouped_impl::launch_bf16_nk_pp256},
    {kStore, BLayout::kKN, GroupedTile::k64x256pp, grouped_impl::launch_bf16_kn_pp256},
    {kStore, BLayout::kNK, GroupedTile::k128x256coop, grouped_impl::launch_bf16_nk_coop},
    {kStore, BLayout::kKN, GroupedTile::k128x256coop, grouped_impl::launch_bf16_kn_coop},
    {kSwiGlu, BLayout::kNK, GroupedTile::k64x128pp, grouped_impl::launch_bf16_nk_pp_swiglu},
    {kSwiGlu, BLayout::kNK, GroupedTile::k64x256pp, grouped_impl::launch_bf16_nk_pp256_swiglu},
    {kSwiGlu, BLayout::kNK, GroupedTile::k128x256coop, grouped_impl::launch_bf16_nk_coop_swiglu},
    {kRowTargets, BLayout::kNK, GroupedTile::k64x128pp, grouped_impl::launch_bf16_nk_pp_row_targets},
    {kRowTargets, BLayout::kNK, GroupedTile::k128x256coop, grouped_impl::launch_bf16_nk_coop_row_targets},
};

}  // namespace

GroupedTile grouped_tile_for(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg) {
  if (cfg.tile != GroupedTile::kAuto) return cfg.tile;
  const long long hint = cfg.rows_hint > 0 ? cfg.rows_hint : (a.groups > 0 ? (long long)a.rows / a.groups : 0);
  return hint <= kSmallTileMaxRows ? GroupedTile::k64x128pp : GroupedTile::k128x256coop;
}

Status can_implement(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg) {
  if (a.groups < 1) return fail("groups=" + std::to_string(a.groups) + ": need at least one group");
  if (a.N <= 0 || a.K <= 0)
    return fail("N=" + std::to_string(a.N) + ", K=" + std::to_string(a.K) + ": both must be positive");
  if (a.rows < 0) return fail("rows=" + std::to_string(a.rows) + " is negative");
  if (a.dtype != DType::kBFloat16)
    return fail(std::string("dtype ") + dtype_name(a.dtype) + " is not built (bf16 only: A, B and C)");
  if (a.B == nullptr) return fail("B is null");
  if (a.counts == nullptr) return fail("counts is null (device int[groups])");
  if (a.rows > 0 && (a.A == nullptr || a.C == nullptr)) return fail(a.A == nullptr ? "A is null" : "C is null");
  if (a.K % 8 != 0)
    return fail("K=" + std::to_string(a.K) + ": rows of A (and of B [N, K]) must be 16-byte multiples (K % 8 == 0)");
  if (a.N % 8 != 0)
    return fail("N=" + std::to_string(a.N) + ": rows of C (and of B [K, N]) must be 16-byte multiples (N % 8 == 0)");
  if (a.epilogue != GroupedEpilogue::kStore && a.epilogue != GroupedEpilogue::kSwiGlu &&
      a.epilogue != GroupedEpilogue::kRowTargets)
    return fail("epilogue " + std::to_string(int(a.epilogue)) + " is not a GroupedEpilogue");
  const bool targets = a.epilogue == GroupedEpilogue::kRowTargets;
  if (targets && a.b_layout != BLayout::kNK)
    return fail(std::string("the row_targets epilogue is built for B [N, K] only, not B ") + blayout_name(a.b_layout));
  if (targets && grouped_tile_for(a, cfg) == GroupedTile::k64x256pp)
    return fail("the row_targets epilogue is built for the 64x128pp and 128x256coop tiles, not 64x256pp");
  if (targets && reinterpret_cast<uintptr_t>(a.C) % 8 != 0)
    return fail("C (the row_targets epilogue's table of row addresses) is not 8-byte aligned");
  const bool swiglu = a.epilogue == GroupedEpilogue::kSwiGlu;
  if (swiglu && a.N % 16 != 0)
    return fail("N=" + std::to_string(a.N) + " with the swiglu epilogue: B's rows are gate-up blocks of 16 (N % 16 == 0)");
  if (swiglu && a.b_layout != BLayout::kNK)
    return fail(std::string("the swiglu epilogue is built for B [N, K] only, not B ") + blayout_name(a.b_layout));
  if (a.offsets != nullptr && a.group_rows != 0)
    return fail("group_rows=" + std::to_string(a.group_rows) + " with offsets: the packed layout takes no group_rows");
  if (a.offsets == nullptr) {
    if (a.group_rows < 0) return fail("group_rows=" + std::to_string(a.group_rows) + " is negative");
    if ((long long)a.groups * a.group_rows > a.rows)
      return fail(std::to_string(a.groups) + " groups of group_rows=" + std::to_string(a.group_rows) +
                  " need " + std::to_string((long long)a.groups * a.group_rows) + " rows; A and C hold rows=" +
                  std::to_string(a.rows));
  }
  if (!aligned16(a.A)) return fail("A is not 16-byte aligned (TMA needs 16-byte aligned bases)");
  if (!aligned16(a.B)) return fail("B is not 16-byte aligned (TMA needs 16-byte aligned bases)");
  if (!targets && !aligned16(a.C)) return fail("C is not 16-byte aligned");
  const size_t es = 2;
  const size_t bytes_a = size_t(a.rows) * a.K * es;
  const size_t bytes_c = targets ? size_t(a.rows) * sizeof(void*) : size_t(a.rows) * (swiglu ? a.N / 2 : a.N) * es;
  const size_t bytes_b = size_t(a.groups) * a.N * a.K * es;
  if (overlap(a.C, bytes_c, a.A, bytes_a)) return fail("C overlaps A (the kernel reads A while tiles of C land)");
  if (overlap(a.C, bytes_c, a.B, bytes_b)) return fail("C overlaps B (the kernel reads B while tiles of C land)");
  if (cfg.rows_hint < 0) return fail("config rows_hint=" + std::to_string(cfg.rows_hint) + " is negative");
  if (cfg.reserved_sms < 0)
    return fail("config reserved_sms=" + std::to_string(cfg.reserved_sms) + " is negative");
  return Status{};
}

namespace grouped_impl {

void grouped_gemm_gated(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg, const RowGate& gate,
                        cudaStream_t stream) {
  const Status st = can_implement(a, cfg);
  TW_REQUIRE(st.ok, kInvalidArgument, st.reason);
  TW_REQUIRE(!gate.on() || (gate.bounds != nullptr && gate.sources >= 1), kInvalidArgument,
             "grouped_gemm: a row gate with flags needs bounds and at least one source");
  int num_sms = 0;
  const Status dev = ops::sm90_device("grouped_gemm", "tilewire's grouped GEMM", nullptr, &num_sms);
  TW_REQUIRE(dev.ok, kUnsupported, dev.reason);
  TW_REQUIRE(cfg.reserved_sms <= num_sms - 2, kInvalidArgument,
             "grouped_gemm: config reserved_sms=" + std::to_string(cfg.reserved_sms) + " leaves " +
                 std::to_string(num_sms - cfg.reserved_sms) + " of the device's " + std::to_string(num_sms) +
                 " SMs; the kernel needs at least 2 (one 1 x 2 cluster)");

  const GroupedTile tile = grouped_tile_for(a, cfg);
  grouped_impl::Launch launch = nullptr;
  for (const KernelEntry& k : kKernels)
    if (k.epilogue == a.epilogue && k.b == a.b_layout && k.tile == tile) launch = k.launch;
  TW_REQUIRE(launch != nullptr, kInvalidArgument,
             std::string("grouped_gemm: no kernel built for tile ") + grouped_tile_name(tile) + ", B " +
                 blayout_name(a.b_layout) + ", epilogue " + grouped_epilogue_name(a.epilogue));
  // An even grid: the cooperative tile runs in 1 x 2 clusters.
  launch(a, gate, (num_sms - cfg.reserved_sms) & ~1, stream);
}

}  // namespace grouped_impl

void grouped_gemm(const GroupedGemmArgs& a, const GroupedGemmConfig& cfg, cudaStream_t stream) {
  grouped_impl::grouped_gemm_gated(a, cfg, grouped_impl::RowGate{}, stream);
}

}  // namespace tw
