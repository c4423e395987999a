// src/ops/gemm_allreduce/decode.hpp — gemm_allreduce's fused path at decode M (decode.cu).
#pragma once
#include <cuda_runtime.h>

#include "tilewire/ops/gemm_allreduce.hpp"

namespace tw {
class Comm;
namespace gemm_allreduce_impl {

// kAuto with 2-byte partials, M <= kDecodeMaxM, P > 1 (testing::set_untraced_kernels keeps the
// owner kernel): the plain GEMM into C, then one kernel that all-reduces C in place
// through the LSA team. The workspace is not touched.
bool runs_decode_path(const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, int P);
void decode_allreduce(Comm& comm, const GemmAllReduceArgs& a, const GemmAllReduceConfig& cfg, cudaStream_t stream);

}  // namespace gemm_allreduce_impl
}  // namespace tw
