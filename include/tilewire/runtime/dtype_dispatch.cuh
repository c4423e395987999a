// tilewire/runtime/dtype_dispatch.cuh — the runtime DType -> compile-time element type switch.
//
// dispatch_dtype(t, f) calls f(T{}) with T = float, __half or __nv_bfloat16. Ops, tools and tests
// use this one switch instead of writing their own.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tilewire/runtime/dtype.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

template <class F>
void dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat16: f(__half{}); return;
    case DType::kBFloat16: f(__nv_bfloat16{}); return;
  }
  TW_REQUIRE(false, kInvalidArgument, "unsupported dtype " + std::to_string(static_cast<int>(t)));
}

}  // namespace tw
