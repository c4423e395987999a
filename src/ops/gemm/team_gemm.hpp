// src/ops/gemm/team_gemm.hpp — the GEMM of a communicator's sequential paths (the fused ops'
// fallback: gemm_allreduce, gemm_reducescatter, allgather_gemm), as a user would run it.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "tilewire/ops/gemm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
class Comm;
namespace gemm_impl {

// C = A B on `stream`: cuBLASLt (one algorithm per device, shape and dtype, chosen once; 32 MiB
// of per-stream scratch) so that a sequential path costs what cuBLASLt + a collective costs a
// user; tw::gemm where cuBLASLt cannot be loaded or has no algorithm for the shape, when
// TILEWIRE_SEQUENTIAL_GEMM=tilewire, and on a virtual team. There the GEMM keeps to the rank's
// SM budget (comm.sm_count()): a stream-K GEMM's CTAs wait for each other and could not all
// start while peers' collective CTAs spin on the other SMs (measured: cuBLASLt + one-shot
// deadlocked at 3 to 8 virtual ranks), and cuBLASLt sizes its own grid. `reserved_sms`: SMs
// tw::gemm leaves free besides.
void team_gemm(const Comm& comm, const GemmArgs& g, int reserved_sms, cudaStream_t stream);

// cuBLASLt's plans per (device, M, N, K, B layout, dtype), made on first use. A shape whose plan
// cannot be made (kUnsupported: no algorithm) is remembered as having none, and get() returns
// null for it from then on; other shapes are not affected. Not thread-safe (the caller locks).
template <class Plan>
class LtPlans {
 public:
  using Key = std::tuple<int, int, int, int, int, int>;
  template <class Make>
  const Plan* get(const Key& k, Make&& make) {
    auto it = plans_.find(k);
    if (it == plans_.end()) {
      std::unique_ptr<Plan> p;
      try {
        p = make();
      } catch (const Error& e) {
        if (e.code() != Errc::kUnsupported) throw;
      }
      it = plans_.emplace(k, std::move(p)).first;
    }
    return it->second.get();
  }

 private:
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

// The device's SMs outside this rank's budget (comm.sm_count()): 0 for a real rank; on a virtual
// team the SMs its peers' grids hold. A GEMM beside peers' waiting kernels reserves them.
int sms_outside_budget(const Comm& comm);

}  // namespace gemm_impl
}  // namespace tw
