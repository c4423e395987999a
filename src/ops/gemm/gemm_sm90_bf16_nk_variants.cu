// Epilogue variants of the bf16 kNK GEMM, selected by TILEWIRE_GEMM_EPILOGUE for measurement
// (bench gemm): staged_half (StoreC in two 128-column passes: 4 mainloop stages), direct
// (register-direct stores, StoreCDirect), none (no epilogue: the mainloop alone; C is not written).
#include "gemm_sm90.cuh"
#include "launch.hpp"

namespace tw::gemm_impl {
namespace {
// A hook that does nothing: times the mainloop alone (bench gemm --epilogue none; C is not written).
struct NullHook {
  struct SharedStorage {};
  template <class View>
  CUTLASS_DEVICE void operator()(View const&) const {}
};
}  // namespace

void launch_bf16_nk_variant(Epilogue e, const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster,
                            cudaStream_t stream) {
  using E = typename CutlassElement<__nv_bfloat16>::type;
  switch (e) {
    case Epilogue::kStagedHalf:
      run_sm90<__nv_bfloat16, BLayout::kNK>(a, cfg, StoreC<E, 128>{static_cast<E*>(a.C), a.N}, num_sms, raster,
                                            nullptr, stream);
      return;
    case Epilogue::kDirect:
      run_sm90<__nv_bfloat16, BLayout::kNK>(a, cfg, StoreCDirect<E>{static_cast<E*>(a.C), a.N}, num_sms, raster,
                                            nullptr, stream);
      return;
    case Epilogue::kNone:
      run_sm90<__nv_bfloat16, BLayout::kNK>(a, cfg, NullHook{}, num_sms, raster, nullptr, stream);
      return;
    default: TW_REQUIRE(false, kInvalidArgument, "gemm: unknown epilogue variant");
  }
}

}  // namespace tw::gemm_impl
