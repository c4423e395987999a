// src/ops/sm90.hpp — whether the current CUDA device runs tilewire's sm_90a kernels (the GEMM,
// the fused GEMMs): compute capability 9.0 exactly, as wgmma and setmaxnreg need.
#pragma once
#include "tilewire/runtime/errors.hpp"

namespace tw::ops {

// ok, or why not: "<op>: device D is sm_XY; <what> is built for sm_90a (Hopper) only" (or that
// the device cannot be queried). *device and *sms (either may be null): the current device and
// its SM count.
Status sm90_device(const char* op, const char* what, int* device = nullptr, int* sms = nullptr);

}  // namespace tw::ops
