// tests/gpu/gemm_allreduce_cases.hpp — the fused GEMM + all-reduce algorithms a test team can run.
#pragma once
#include <vector>

#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/runtime/dtype.hpp"

namespace tw_test {

struct AlgoCase {
  tw::GemmAllReduceAlgo algo;
  tw::PartialPrecision partials;
};

// The fused kernels built for a team of P ranks, B layout `b` and dtype `t` (plan.cpp
// check_args): in bf16, relay for 2 or more ranks, exchange for B [N, K] only — both with bf16
// partials — and owner with either precision at every P; in fp16, owner only (2-byte partials
// are then fp16). AlgorithmsPerTeamSize checks that the library accepts exactly these.
inline std::vector<AlgoCase> fused_algos(int P, tw::BLayout b, tw::DType t = tw::DType::kBFloat16) {
  std::vector<AlgoCase> v;
  const bool bf16 = t == tw::DType::kBFloat16;
  if (bf16 && P >= 2) v.push_back({tw::GemmAllReduceAlgo::kRelay, tw::PartialPrecision::kBFloat16});
  if (bf16 && b == tw::BLayout::kNK) v.push_back({tw::GemmAllReduceAlgo::kExchange, tw::PartialPrecision::kBFloat16});
  v.push_back({tw::GemmAllReduceAlgo::kOwner, tw::PartialPrecision::kBFloat16});
  v.push_back({tw::GemmAllReduceAlgo::kOwner, tw::PartialPrecision::kFloat32});
  return v;
}

// Roundings to 2 bytes a partial sum of one element goes through before the final sum (the
// reference's tolerance scales with it): the relay rounds the running sum at each of its P - 1
// hops (relay_hook.cuh); the other algorithms round each rank's partial once.
inline int partial_hops(tw::GemmAllReduceAlgo resolved, int P) {
  return resolved == tw::GemmAllReduceAlgo::kRelay && P > 2 ? P - 1 : 1;
}

}  // namespace tw_test
