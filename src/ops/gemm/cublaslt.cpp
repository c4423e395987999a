// cuBLASLt for the benches: dlopen() wrapper and the one matmul shape they use (cublaslt.hpp).
#include "cublaslt.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <map>

namespace tw::lt {
namespace {

// lib<stem>.so.13 from the loader's search first (LD_LIBRARY_PATH, or the copy torch already
// loaded into the process), then lib<stem>.so, then the CUDA toolkit the library was built against
// (CMakeLists.txt); `use` says what it is for in the error.
void* open_cuda_lib(const std::string& stem, const char* use) {
  const std::string names[] = {"lib" + stem + ".so.13", "lib" + stem + ".so",
                               std::string(TILEWIRE_CUDA_LIBDIR) + "/lib" + stem + ".so.13"};
  for (const std::string& n : names)
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  TW_REQUIRE(false, kUnsupported,
             "cannot load lib" + stem + ".so.13 (" + use + "); put its folder on LD_LIBRARY_PATH");
  return nullptr;
}

template <class F>
void load_sym(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  TW_REQUIRE(f != nullptr, kUnsupported, std::string("cuBLAS: the loaded library has no ") + name);
}

LtApi load() {
  void* h = open_cuda_lib("cublasLt", "cuBLASLt: the GEMM benches' baseline, gemm_allreduce's sequential path");
  LtApi a;
  load_sym(h, "cublasLtCreate", a.Create);
  load_sym(h, "cublasLtDestroy", a.Destroy);
  load_sym(h, "cublasLtGetStatusString", a.GetStatusString);
  load_sym(h, "cublasLtMatmulDescCreate", a.MatmulDescCreate);
  load_sym(h, "cublasLtMatmulDescSetAttribute", a.MatmulDescSetAttribute);
  load_sym(h, "cublasLtMatmulDescDestroy", a.MatmulDescDestroy);
  load_sym(h, "cublasLtMatrixLayoutCreate", a.MatrixLayoutCreate);
  load_sym(h, "cublasLtMatrixLayoutDestroy", a.MatrixLayoutDestroy);
  load_sym(h, "cublasLtMatmulPreferenceCreate", a.MatmulPreferenceCreate);
  load_sym(h, "cublasLtMatmulPreferenceSetAttribute", a.MatmulPreferenceSetAttribute);
  load_sym(h, "cublasLtMatmulPreferenceDestroy", a.MatmulPreferenceDestroy);
  load_sym(h, "cublasLtMatmulAlgoGetHeuristic", a.MatmulAlgoGetHeuristic);
  load_sym(h, "cublasLtMatmulAlgoConfigGetAttribute", a.MatmulAlgoConfigGetAttribute);
  load_sym(h, "cublasLtMatmul", a.Matmul);
  return a;
}

}  // namespace

const LtApi& lt_api() {
  static const LtApi api = load();  // a failed load throws and is retried by the next call
  return api;
}

LtHandle::LtHandle() { TW_CUBLAS_CHECK(lt_api().Create(&h_)); }
LtHandle::~LtHandle() {
  if (h_) lt_api().Destroy(h_);
}

LtMatmul::LtMatmul(cublasLtHandle_t h, int M, int N, int K, BLayout b_layout, size_t workspace_bytes, DType dtype,
                   int sm_count)
    : h_(h), ws_bytes_(workspace_bytes) {
  TW_REQUIRE(sm_count >= 0, kInvalidArgument, "cuBLASLt baseline: sm_count " + std::to_string(sm_count) + " (>= 0)");
  TW_REQUIRE(dtype == DType::kBFloat16 || dtype == DType::kFloat16, kInvalidArgument,
             std::string("cuBLASLt baseline: dtype ") + dtype_name(dtype) + " (bf16 or fp16)");
  const cudaDataType_t et = dtype == DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
  const LtApi& lt = lt_api();
  cublasLtMatmulPreference_t pref = nullptr;
  auto release = [&] {
    if (pref) lt.MatmulPreferenceDestroy(pref);
    if (la_) lt.MatrixLayoutDestroy(la_);
    if (lb_) lt.MatrixLayoutDestroy(lb_);
    if (lc_) lt.MatrixLayoutDestroy(lc_);
    if (op_) lt.MatmulDescDestroy(op_);
  };
  try {
    // cuBLASLt's "A" is our B' (transposed when B is [N, K]), its "B" is our A, untransposed.
    TW_CUBLAS_CHECK(lt.MatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t tb = b_layout == BLayout::kNK ? CUBLAS_OP_T : CUBLAS_OP_N, ta = CUBLAS_OP_N;
    TW_CUBLAS_CHECK(lt.MatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &tb, sizeof(tb)));
    TW_CUBLAS_CHECK(lt.MatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &ta, sizeof(ta)));
    if (sm_count > 0) {  // before the heuristic: it picks for this many SMs (refused: the whole GPU)
      const int32_t target = sm_count;
      if (lt.MatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)) ==
          CUBLAS_STATUS_SUCCESS)
        sm_target_ = sm_count;
    }
    if (b_layout == BLayout::kNK) TW_CUBLAS_CHECK(lt.MatrixLayoutCreate(&lb_, et, K, N, K));
    else TW_CUBLAS_CHECK(lt.MatrixLayoutCreate(&lb_, et, N, K, N));
    TW_CUBLAS_CHECK(lt.MatrixLayoutCreate(&la_, et, K, M, K));
    TW_CUBLAS_CHECK(lt.MatrixLayoutCreate(&lc_, et, N, M, N));
    TW_CUBLAS_CHECK(lt.MatmulPreferenceCreate(&pref));
    TW_CUBLAS_CHECK(lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_,
                                                    sizeof(ws_bytes_)));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    TW_CUBLAS_CHECK(lt.MatmulAlgoGetHeuristic(h_, op_, lb_, la_, lc_, lc_, pref, 1, &heur, &found));
    TW_REQUIRE(found > 0, kUnsupported,
               "cuBLASLt has no algorithm for " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                   std::to_string(K) + " (" + dtype_name(dtype) + ", B " + blayout_name(b_layout) + ")");
    algo_ = heur.algo;
    lt.MatmulPreferenceDestroy(pref);
  } catch (...) {
    release();
    throw;
  }
}

LtMatmul::~LtMatmul() {
  const LtApi& lt = lt_api();
  lt.MatrixLayoutDestroy(la_);
  lt.MatrixLayoutDestroy(lb_);
  lt.MatrixLayoutDestroy(lc_);
  lt.MatmulDescDestroy(op_);
}

void LtMatmul::run(const void* A, const void* B, void* C, void* workspace, cudaStream_t stream) const {
  const float one = 1.f, zero = 0.f;
  TW_CUBLAS_CHECK(
      lt_api().Matmul(h_, op_, &one, B, lb_, A, la_, &zero, C, lc_, C, lc_, &algo_, workspace, ws_bytes_, stream));
}

std::string LtMatmul::describe() const {
  const LtApi& lt = lt_api();
  struct Attr {
    cublasLtMatmulAlgoConfigAttributes_t id;
    const char* name;
  };
  static constexpr Attr kAttrs[] = {
      {CUBLASLT_ALGO_CONFIG_ID, "algo"},           {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile"},
      {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages"},  {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitK"},
      {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "reduction"}, {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle"},
      {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster"},   {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner"},
  };
  std::string out;
  for (const Attr& a : kAttrs) {
    uint32_t v = 0;  // every attribute read here is a 32-bit enum or int
    size_t written = 0;
    if (lt.MatmulAlgoConfigGetAttribute(&algo_, a.id, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) continue;
    out += (out.empty() ? "" : " ") + std::string(a.name) + " " + std::to_string(v);
  }
  if (sm_target_ > 0) out += (out.empty() ? "" : " ") + std::string("smTarget ") + std::to_string(sm_target_);
  return out;
}

// ---------------------------------------------------------------- cuBLAS's grouped GEMM
namespace {

struct BlasApi {
  decltype(&cublasCreate_v2) Create = nullptr;
  decltype(&cublasDestroy_v2) Destroy = nullptr;
  decltype(&cublasSetStream_v2) SetStream = nullptr;
  decltype(&cublasGemmGroupedBatchedEx) GroupedGemm = nullptr;
};

BlasApi load_blas() {
  void* h = open_cuda_lib("cublas", "cuBLAS's grouped GEMM: the grouped bench's baseline");
  BlasApi a;
  load_sym(h, "cublasCreate_v2", a.Create);
  load_sym(h, "cublasDestroy_v2", a.Destroy);
  load_sym(h, "cublasSetStream_v2", a.SetStream);
  load_sym(h, "cublasGemmGroupedBatchedEx", a.GroupedGemm);
  return a;
}

const BlasApi& blas_api() {
  static const BlasApi api = load_blas();
  return api;
}

}  // namespace

GroupedBaseline::GroupedBaseline(const std::vector<int>& counts, int N, int K, const void* A, const void* B, void* C) {
  const BlasApi& b = blas_api();
  // cuBLAS is column-major: C_g^T [N, rows] = (B_g as [K, N])^T x (A_g as [K, rows]), as LtMatmul.
  std::map<int, std::vector<int>> by_count;  // row count -> its experts, in order
  for (int g = 0; g < (int)counts.size(); ++g)
    if (counts[g] > 0) by_count[counts[g]].push_back(g);
  std::vector<long long> offset(counts.size(), 0);
  for (size_t g = 1; g < counts.size(); ++g) offset[g] = offset[g - 1] + counts[g - 1];
  std::vector<void*> a_ptrs, b_ptrs, c_ptrs;  // cuBLAS's A is B_g, its B is A_g
  for (const auto& [rows, experts] : by_count) {
    m_.push_back(N), n_.push_back(rows), k_.push_back(K);
    lda_.push_back(K), ldb_.push_back(K), ldc_.push_back(N);
    ta_.push_back(CUBLAS_OP_T), tb_.push_back(CUBLAS_OP_N);
    alpha_.push_back(1.f), beta_.push_back(0.f);
    size_.push_back((int)experts.size());
    for (int g : experts) {
      a_ptrs.push_back(const_cast<char*>(static_cast<const char*>(B)) + (size_t)g * N * K * 2);
      b_ptrs.push_back(const_cast<char*>(static_cast<const char*>(A)) + (size_t)offset[g] * K * 2);
      c_ptrs.push_back(static_cast<char*>(C) + (size_t)offset[g] * N * 2);
    }
  }
  problems_ = (int)a_ptrs.size();
  std::vector<void*> host = a_ptrs;  // [A pointers | B pointers | C pointers], as run() reads them
  host.insert(host.end(), b_ptrs.begin(), b_ptrs.end());
  host.insert(host.end(), c_ptrs.begin(), c_ptrs.end());
  try {
    TW_CUBLAS_CHECK(b.Create(&handle_));
    if (problems_ > 0) {
      TW_CUDA_CHECK(cudaMalloc(&ptrs_, host.size() * sizeof(void*)));
      TW_CUDA_CHECK(cudaMemcpy(ptrs_, host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice));
    }
  } catch (...) {
    release();
    throw;
  }
}

GroupedBaseline::~GroupedBaseline() { release(); }

void GroupedBaseline::release() {
  if (ptrs_) cudaFree(ptrs_);
  if (handle_) blas_api().Destroy(handle_);
  ptrs_ = nullptr, handle_ = nullptr;
}

void GroupedBaseline::run(cudaStream_t stream) const {
  if (problems_ == 0) return;
  const BlasApi& b = blas_api();
  TW_CUBLAS_CHECK(b.SetStream(handle_, stream));
  TW_CUBLAS_CHECK(b.GroupedGemm(handle_, ta_.data(), tb_.data(), m_.data(), n_.data(), k_.data(), alpha_.data(),
                                const_cast<const void* const*>(ptrs_), CUDA_R_16BF, lda_.data(),
                                const_cast<const void* const*>(ptrs_ + problems_), CUDA_R_16BF, ldb_.data(),
                                beta_.data(), ptrs_ + 2 * problems_, CUDA_R_16BF, ldc_.data(), (int)size_.size(),
                                size_.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace tw::lt
