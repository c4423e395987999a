// src/ops/gemm/team_gemm.hpp — the GEMM of a communicator's sequential paths (the fused ops'
// fallback: gemm_allreduce, gemm_reducescatter, allgather_gemm), as a user would run it.
#pragma once
#include <cuda_runtime.h>

#include "tilewire/ops/gemm.hpp"

namespace tw {
class Comm;
namespace gemm_impl {

// C = A B on `stream`: cuBLASLt (one algorithm per device, shape and dtype, chosen once; 32 MiB
// of per-stream scratch) so that a sequential path costs what cuBLASLt + a collective costs a
// user; tw::gemm where cuBLASLt cannot be loaded, when TILEWIRE_SEQUENTIAL_GEMM=tilewire, and on
// a virtual team. There the GEMM keeps to the rank's SM budget (comm.sm_count()): a stream-K
// GEMM's CTAs wait for each other and could not all start while peers' collective CTAs spin on
// the other SMs (measured: cuBLASLt + one-shot deadlocked at 3 to 8 virtual ranks), and
// cuBLASLt sizes its own grid. `reserved_sms`: SMs tw::gemm leaves free besides.
void team_gemm(const Comm& comm, const GemmArgs& g, int reserved_sms, cudaStream_t stream);

// The device's SMs outside this rank's budget (comm.sm_count()): 0 for a real rank; on a virtual
// team the SMs its peers' grids hold. A GEMM beside peers' waiting kernels reserves them.
int sms_outside_budget(const Comm& comm);

}  // namespace gemm_impl
}  // namespace tw
