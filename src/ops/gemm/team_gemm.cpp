// The sequential paths' GEMM (team_gemm.hpp).
#include "team_gemm.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "cublaslt.hpp"
#include "scratch.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_impl {
namespace {

// False when cuBLASLt cannot be loaded, has no algorithm for this shape, or
// TILEWIRE_SEQUENTIAL_GEMM=tilewire. A library that cannot be loaded is tried once per process;
// a shape without an algorithm falls back alone (LtPlans), the other shapes keep cuBLASLt.
bool cublaslt_gemm(const GemmArgs& g, cudaStream_t stream) {
  static const bool wanted = env::get_string("TILEWIRE_SEQUENTIAL_GEMM") != "tilewire";
  if (!wanted) return false;
  static std::mutex mu;
  static bool unloadable = false;
  static std::map<int, std::unique_ptr<lt::LtHandle>> handles;
  static LtPlans<lt::LtMatmul> plans;
  constexpr size_t kWorkspace = size_t(32) << 20;
  int dev = 0;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  const lt::LtMatmul* mm = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (unloadable) return false;
    try {
      lt::lt_api();
    } catch (const Error& e) {
      if (e.code() != Errc::kUnsupported) throw;
      unloadable = true;  // no libcublasLt in this process: tw::gemm from now on
      return false;
    }
    auto& h = handles[dev];
    if (!h) h = std::make_unique<lt::LtHandle>();
    mm = plans.get({dev, g.M, g.N, g.K, int(g.b_layout), int(g.dtype)}, [&] {
      return std::make_unique<lt::LtMatmul>(h->get(), g.M, g.N, g.K, g.b_layout, kWorkspace, g.dtype);
    });
    if (mm == nullptr) return false;
  }
  ScratchLease ws = lease_scratch(stream, kWorkspace);
  ws.overwritten();  // cuBLASLt's workspace: a stream-K GEMM after it on this stream re-zeroes its counters
  mm->run(g.A, g.B, g.C, ws.data(), stream);
  return true;
}

}  // namespace

void team_gemm(const Comm& comm, const GemmArgs& g, int reserved_sms, cudaStream_t stream) {
  const bool lt_dtype = g.dtype == DType::kBFloat16 || g.dtype == DType::kFloat16;
  if (lt_dtype && !comm.is_virtual() && cublaslt_gemm(g, stream)) return;
  GemmConfig gc;  // the plain GEMM's defaults (its own tile order), the caller's reserved SMs
  gc.reserved_sms = reserved_sms + sms_outside_budget(comm);
  gemm(g, gc, stream);
}

int sms_outside_budget(const Comm& comm) {
  if (!comm.is_virtual()) return 0;
  int dev = 0, sms = 0;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms - comm.sm_count();
}

}  // namespace tw::gemm_impl
