// tw::gemm(): checks (plan.cpp), the device checks, the kernel choice (plan.hpp kernel_for: the
// stream-K kernel or the hook kernel), then the launch of the instantiated kernel (launch.hpp)
// found in one of two tables: the hook kernels keyed by (dtype, B layout, tile), which tw::gemm
// and allgather_gemm's gated GEMM share, and the stream-K family's keyed by (dtype, tile family).
#include <cuda_runtime.h>

#include <optional>
#include <string>

#include "../../testing/measurement.hpp"
#include "../sm90.hpp"
#include "launch.hpp"
#include "plan.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace gemm_impl {
Epilogue epilogue_variant() {
#ifndef TILEWIRE_BENCH_KERNELS
  return Epilogue::kStaged;  // the variants (one leaves C unwritten) exist in the measurement build only
#else
  static const Epilogue e = [] {
    const std::string v = env::get_string("TILEWIRE_GEMM_EPILOGUE");
    TW_REQUIRE(v == "staged" || v == "staged_half" || v == "direct" || v == "none", kInvalidArgument,
               "TILEWIRE_GEMM_EPILOGUE='" + v + "' is not one of staged, staged_half, direct, none");
    return v == "staged_half" ? Epilogue::kStagedHalf
           : v == "direct"    ? Epilogue::kDirect
           : v == "none"      ? Epilogue::kNone
                              : Epilogue::kStaged;
  }();
  return e;
#endif
}

KernelPref kernel_pref() {
  static const KernelPref k = [] {
    const std::string v = env::get_string("TILEWIRE_GEMM_KERNEL");
    const std::optional<KernelPref> p = parse_kernel_pref(v);
    TW_REQUIRE(p.has_value(), kInvalidArgument, "TILEWIRE_GEMM_KERNEL='" + v + "' is not one of auto, hook, streamk");
    return *p;
  }();
  return k;
}
const std::string& streamk_plan_override() {
  static const std::string v = env::get_string("TILEWIRE_GEMM_STREAMK_PLAN");
  return v;
}

namespace {
struct Choice {
  GemmKernel kernel;
  StreamKPlan streamk;  // kStreamK
  Raster raster;        // kHook
};

int device_sms() {
  int dev = 0, num_sms = 0;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
  return num_sms;
}

// Which kernel: TILEWIRE_GEMM_KERNEL (or this thread's testing::gemm_plan), else plan.hpp's rule;
// the stream-K plan with TILEWIRE_GEMM_STREAMK_PLAN's (or the testing plan's) overrides. The TILEWIRE_GEMM_EPILOGUE variants exist to measure the
// hook kernel, so with one of them set "auto" means the hook kernel.
Choice choose(const GemmArgs& a, const GemmConfig& cfg, int num_sms) {
  const std::optional<testing::GemmPlan>& mp = testing::gemm_plan();
  KernelPref pref = mp ? mp->kernel : kernel_pref();
  if (pref == KernelPref::kAuto && epilogue_variant() != Epilogue::kStaged) pref = KernelPref::kHook;
  Choice c{kernel_for(a, cfg, num_sms, pref), {}, resolve_raster(a, cfg, kBlkM, kBlkN)};
  if (c.kernel == GemmKernel::kStreamK) {
    c.streamk = plan_streamk(a, cfg, num_sms);
    const Status st = apply_streamk_plan_override(mp ? mp->streamk : streamk_plan_override(), &c.streamk, &a, &cfg);
    TW_REQUIRE(st.ok, kInvalidArgument, st.reason);
  }
  return c;
}
}  // namespace

// The hook kernels: (dtype, B layout, tile) -> launch. kWide is the hook tile (kBlkM x kBlkN in
// kClusterM x 1 clusters: tw::gemm's hook plan, allgather_gemm's gated GEMM above decode M),
// kDecode the decode tile (kBlkM x kDecodeBlkN, no clusters: the gated GEMM at M <= kHookDecodeMaxM).
enum class HookTile { kWide, kDecode };
using HookLaunch = void (*)(const GemmArgs&, const GemmConfig&, int, Raster, cudaStream_t, const Gate&);
struct HookKernel {
  DType dtype;
  BLayout b;
  HookTile tile;
  HookLaunch launch;
};
constexpr HookKernel kHookKernels[] = {
    {DType::kBFloat16, BLayout::kNK, HookTile::kWide, launch_bf16_nk},
    {DType::kBFloat16, BLayout::kKN, HookTile::kWide, launch_bf16_kn},
    {DType::kFloat16, BLayout::kNK, HookTile::kWide, launch_f16_nk},
    {DType::kFloat16, BLayout::kKN, HookTile::kWide, launch_f16_kn},
    {DType::kBFloat16, BLayout::kNK, HookTile::kDecode, launch_bf16_nk_decode},
    {DType::kBFloat16, BLayout::kKN, HookTile::kDecode, launch_bf16_kn_decode},
    {DType::kFloat16, BLayout::kNK, HookTile::kDecode, launch_f16_nk_decode},
    {DType::kFloat16, BLayout::kKN, HookTile::kDecode, launch_f16_kn_decode},
};
HookLaunch hook_kernel(DType dtype, BLayout b, HookTile tile) {
  for (const HookKernel& k : kHookKernels)
    if (k.dtype == dtype && k.b == b && k.tile == tile) return k.launch;
  TW_REQUIRE(false, kInvalidArgument, std::string("gemm: no hook kernel built for ") + dtype_name(dtype));
  return nullptr;
}

// The stream-K family (B [N, K] only): (dtype, tile family) -> launch. The family is the plan's
// tile: the swapped ping-pong tile, the other ping-pong tiles, the 256-row tiles (each its own
// translation units) and the stream-K kernel's cooperative tiles.
enum class StreamKFamily { kSwapWide, kPingpong, kWide, kStreamK };
using StreamKLaunch = void (*)(const GemmArgs&, const GemmConfig&, int, const StreamKPlan&, cudaStream_t);
struct StreamKKernel {
  DType dtype;
  StreamKFamily family;
  StreamKLaunch launch;
};
constexpr StreamKKernel kStreamKKernels[] = {
    {DType::kBFloat16, StreamKFamily::kSwapWide, launch_bf16_nk_swapwide},
    {DType::kFloat16, StreamKFamily::kSwapWide, launch_f16_nk_swapwide},
    {DType::kBFloat16, StreamKFamily::kPingpong, launch_bf16_nk_pingpong},
    {DType::kFloat16, StreamKFamily::kPingpong, launch_f16_nk_pingpong},
    {DType::kBFloat16, StreamKFamily::kWide, launch_bf16_nk_wide},
    {DType::kFloat16, StreamKFamily::kWide, launch_f16_nk_wide},
    {DType::kBFloat16, StreamKFamily::kStreamK, launch_bf16_nk_streamk},
    {DType::kFloat16, StreamKFamily::kStreamK, launch_f16_nk_streamk},
};
StreamKFamily family_of(StreamKTile t) {
  if (swapwide_pingpong(t)) return StreamKFamily::kSwapWide;
  if (tile_shape(t).pingpong) return StreamKFamily::kPingpong;
  if (tile_shape(t).blk_m == 256) return StreamKFamily::kWide;
  return StreamKFamily::kStreamK;
}
StreamKLaunch streamk_kernel(DType dtype, StreamKTile t) {
  const StreamKFamily f = family_of(t);
  for (const StreamKKernel& k : kStreamKKernels)
    if (k.dtype == dtype && k.family == f) return k.launch;
  TW_REQUIRE(false, kInvalidArgument, std::string("gemm: no stream-K kernel built for ") + dtype_name(dtype));
  return nullptr;
}

}  // namespace gemm_impl

std::string gemm_plan(const GemmArgs& a, const GemmConfig& cfg) {
  const gemm_impl::Choice c = gemm_impl::choose(a, cfg, gemm_impl::device_sms());
  if (c.kernel == gemm_impl::GemmKernel::kStreamK) return gemm_impl::describe(c.streamk);
  return std::string("hook raster ") + (c.raster == gemm_impl::Raster::kAlongM ? "m" : "n") + " swizzle " +
         std::to_string(cfg.swizzle);
}

void gemm(const GemmArgs& a, const GemmConfig& cfg, cudaStream_t stream) {
  const Status st = can_implement(a, cfg);
  TW_REQUIRE(st.ok, kInvalidArgument, st.reason);

  int num_sms = 0;
  const Status dev = ops::sm90_device("gemm", "tilewire's GEMM", nullptr, &num_sms);
  TW_REQUIRE(dev.ok, kUnsupported, dev.reason);
  const Status sms = gemm_impl::check_sms(cfg, num_sms, gemm_impl::kClusterM);
  TW_REQUIRE(sms.ok, kInvalidArgument, sms.reason);

  const gemm_impl::Choice choice = gemm_impl::choose(a, cfg, num_sms);
  if (choice.kernel == gemm_impl::GemmKernel::kStreamK) {
    gemm_impl::streamk_kernel(a.dtype, choice.streamk.tile)(a, cfg, num_sms, choice.streamk, stream);
    return;
  }
  gemm_impl::hook_kernel(a.dtype, a.b_layout, gemm_impl::HookTile::kWide)(a, cfg, num_sms, choice.raster, stream,
                                                                          gemm_impl::Gate{});
}

namespace gemm_impl {

void gemm_gated(const GemmArgs& a, const GemmConfig& cfg, const Gate& gate, cudaStream_t stream) {
  int dev = 0, num_sms = 0;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
  GemmConfig c = cfg;
  const bool decode = gated_tile_is_decode(a.M);
  const Status sms = check_sms(c, num_sms, decode ? kDecodeClusterM : kClusterM);
  TW_REQUIRE(sms.ok, kInvalidArgument, sms.reason);
  // A gate walks the rows in the order they arrive; a pulled A has them all: the plain GEMM's raster.
  const Raster raster = gate.flags != nullptr ? Raster::kAlongN
                                              : resolve_raster(a, c, kBlkM, decode ? kDecodeBlkN : kBlkN);
  hook_kernel(a.dtype, a.b_layout, decode ? HookTile::kDecode : HookTile::kWide)(a, c, num_sms, raster, stream, gate);
}

}  // namespace gemm_impl

}  // namespace tw
