// src/ops/gemm/cublaslt.hpp — cuBLASLt, loaded at run time: the baseline GEMM of the benches (bench gemm,
// bench gemm-allreduce) and the GEMM of gemm_allreduce's sequential path (where the fused kernel does not
// pay, the op runs exactly what a user would: cuBLASLt, then tw::allreduce).
//
// Loaded with dlopen() on first use, not linked: the rest of the CLI (info, bench allreduce) must
// start on machines without libcublasLt (the GPU boxes get dist/ without it). lt_api() looks for
// libcublasLt.so.13 on LD_LIBRARY_PATH / the loader's paths, else in the GPU boxes' torch venv,
// and throws tw::Error(kUnsupported) saying what to do when it is nowhere.
//
//   LtHandle h;                                   // on the device it will run on
//   LtMatmul mm(h.get(), M, N, K, BLayout::kNK);  // algorithm chosen once, per shape
//   mm.run(A, B, C, workspace, stream);           // C [M,N] = A [M,K] * B^T, bf16, row-major
#pragma once
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "tilewire/ops/gemm.hpp"  // BLayout
#include "tilewire/runtime/dtype.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::lt {

// The entry points the benches use, resolved from the dlopen()ed library.
struct LtApi {
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtDestroy) Destroy = nullptr;
  decltype(&cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) MatmulAlgoConfigGetAttribute = nullptr;
};

// Loads the library on the first call (thread-safe); throws kUnsupported when it cannot.
const LtApi& lt_api();

#define TW_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                            \
    cublasStatus_t tw_s_ = (expr);                                                                \
    TW_REQUIRE(tw_s_ == CUBLAS_STATUS_SUCCESS, kCuda,                                             \
               std::string(#expr) + " failed: " + ::tw::lt::lt_api().GetStatusString(tw_s_));    \
  } while (0)

// One cuBLASLt handle. Create it on the thread and device that will use it.
class LtHandle {
 public:
  LtHandle();
  ~LtHandle();
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t get() const { return h_; }

 private:
  cublasLtHandle_t h_ = nullptr;
};

// Row-major bf16 (or fp16) C [M, N] = A [M, K] * B, B stored [N, K] (kNK: C = A B^T) or [K, N] (kKN); fp32
// accumulation, one rounding, no bias. cuBLASLt is column-major, so it is asked for the same
// memory seen transposed: C^T [N, M] = B' [N, K] * A^T [K, M]. The algorithm is cuBLASLt's first
// heuristic for the shape with `workspace_bytes` of workspace, chosen once here; throws
// kUnsupported when there is none.
// sm_count > 0: CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = sm_count, set before the heuristic runs, so
// that the algorithm is chosen for, and its persistent grids sized to, that many SMs (as
// GemmConfig::reserved_sms sizes tilewire's; neither pins CTAs to SMs). A library that refuses the
// attribute is not an error: sm_count_target() then says 0 and the GEMM is sized to the whole GPU.
class LtMatmul {
 public:
  static constexpr size_t kDefaultWorkspace = 64ull << 20;

  LtMatmul(cublasLtHandle_t h, int M, int N, int K, BLayout b_layout, size_t workspace_bytes = kDefaultWorkspace,
           DType dtype = DType::kBFloat16,  // bf16 or fp16 (A, B and C)
           int sm_count = 0);               // 0: the device's SM count
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Enqueue on `stream`. A, B, C: device memory as above (row pitch K, K or N, N elements);
  // workspace: >= workspace_bytes() bytes that no other call uses concurrently.
  void run(const void* A, const void* B, void* C, void* workspace, cudaStream_t stream) const;
  size_t workspace_bytes() const { return ws_bytes_; }
  // The SM count the library took (the constructor's sm_count), 0 when none was asked or it refused.
  int sm_count_target() const { return sm_target_; }
  // The chosen algorithm's configuration, as cuBLASLt's numeric ids (cublasLt.h enums): "algo 66
  // tile 23 stages 19 splitK 1 reduction 0 swizzle 0 cluster 3 inner 0", then "smTarget N" when
  // sm_count_target() > 0. For bench reports.
  std::string describe() const;

 private:
  cublasLtHandle_t h_;
  size_t ws_bytes_;
  int sm_target_ = 0;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

// cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, libcublas.so.13, loaded like cuBLASLt): the
// grouped baseline of `bench gemm --grouped`. Row-major bf16 C_g [counts[g], N] = A_g [counts[g], K]
// B_g^T for every group g with rows, packed: A_g at row offsets[g] of A, C_g at row offsets[g] of C,
// B_g = B + g N K (B [L, N, K]); fp32 accumulation. The experts with the same row count form one of
// cuBLAS's groups (a batch of equal problems), so uniform routing is one batched GEMM. The counts
// are the host's (cuBLAS takes its shapes on the host: a call is not capturable with counts that
// only the device knows, which tw::grouped_gemm's are). Throws kUnsupported where the library or
// the entry point is missing.
class GroupedBaseline {
 public:
  GroupedBaseline(const std::vector<int>& counts, int N, int K, const void* A, const void* B, void* C);
  ~GroupedBaseline();
  GroupedBaseline(const GroupedBaseline&) = delete;
  GroupedBaseline& operator=(const GroupedBaseline&) = delete;
  void run(cudaStream_t stream) const;

 private:
  void release();
  cublasHandle_t handle_ = nullptr;
  std::vector<int> m_, n_, k_, lda_, ldb_, ldc_, size_;  // per cuBLAS group
  std::vector<cublasOperation_t> ta_, tb_;
  std::vector<float> alpha_, beta_;
  void** ptrs_ = nullptr;  // device: the problems' A, B, C pointers (cuBLAS's order)
  int problems_ = 0;
};

}  // namespace tw::lt
