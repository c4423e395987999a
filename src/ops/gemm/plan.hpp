// src/ops/gemm/plan.hpp — host-side GEMM planning shared by the launcher and the CPU tests
// (tests/cpu/gemm_plan_test.cpp): raster choice and the config checks that need the SM count.
#pragma once
#include "scheduler.hpp"
#include "tilewire/ops/gemm.hpp"

namespace tw::gemm_impl {

// GemmConfig::raster resolved for (M, N): kAuto walks along M when the output has more tile
// columns than tile rows (a band of B tiles stays in L2 while A streams), else along N.
Raster resolve_raster(const GemmArgs& a, const GemmConfig& cfg, int blk_m, int blk_n);

// Checks that need the device's SM count: reserved_sms must leave at least one cluster of
// `cluster_m` SMs to the GEMM.
Status check_sms(const GemmConfig& cfg, int num_sms, int cluster_m);

}  // namespace tw::gemm_impl
