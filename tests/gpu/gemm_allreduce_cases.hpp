// tests/gpu/gemm_allreduce_cases.hpp — the fused GEMM + all-reduce algorithms a test team can run.
#pragma once
#include <vector>

#include "tilewire/ops/gemm_allreduce.hpp"

namespace tw_test {

struct AlgoCase {
  tw::GemmAllReduceAlgo algo;
  tw::PartialPrecision partials;
};

// The fused kernels built for a team of P ranks and B layout `b` (plan.cpp check_args): relay for
// exactly 2 ranks, exchange for B [N, K] only — both with bf16 partials — and owner with either
// precision at every P. AlgorithmsPerTeamSize checks that the library accepts exactly these.
inline std::vector<AlgoCase> fused_algos(int P, tw::BLayout b) {
  std::vector<AlgoCase> v;
  if (P == 2) v.push_back({tw::GemmAllReduceAlgo::kRelay, tw::PartialPrecision::kBFloat16});
  if (b == tw::BLayout::kNK) v.push_back({tw::GemmAllReduceAlgo::kExchange, tw::PartialPrecision::kBFloat16});
  v.push_back({tw::GemmAllReduceAlgo::kOwner, tw::PartialPrecision::kBFloat16});
  v.push_back({tw::GemmAllReduceAlgo::kOwner, tw::PartialPrecision::kFloat32});
  return v;
}

}  // namespace tw_test
