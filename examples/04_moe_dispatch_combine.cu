// 04_moe_dispatch_combine: one MoE layer's communication with tilewire's EP buffer.
//
// One process, one thread per local GPU (tw::Comm::run_local), or P virtual ranks on GPU 0 with
// --virtual P. Every rank routes its tokens to 2 of the experts (rank d holds experts
// [2d, 2d + 2)), dispatches them, plays "expert" by passing each received row through
// unchanged, and combines: each token comes back as the sum of its copies, n_t x x[t], where n_t
// is the number of ranks it went to. The program checks that on the device and prints what each
// rank received.
//
//   ./04_moe_dispatch_combine [--virtual P]
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "tilewire/ops/ep.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

constexpr int kTokens = 128, kHidden = 1024, kTopk = 2, kExpertsPerRank = 2;

__global__ void fill(__nv_bfloat16* x, int n, int rank) {  // small integers: every sum is exact
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = __float2bfloat16((float)((i * 7 + rank * 3) % 9 - 4));
}
__global__ void check(const __nv_bfloat16* x, const __nv_bfloat16* out, const uint8_t* in_rank, int N, int H, int P,
                      unsigned long long* wrong) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N * H; i += gridDim.x * blockDim.x) {
    int n = 0;
    for (int d = 0; d < P; ++d) n += in_rank[(i / H) * P + d];
    if (__bfloat162float(out[i]) != n * __bfloat162float(x[i])) atomicAdd(wrong, 1ull);
  }
}

int main(int argc, char** argv) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);  // virtual teams need a hardware queue per rank
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);         // and their kernels loaded up front
  int virt = 0;
  if (argc == 3 && std::strcmp(argv[1], "--virtual") == 0) virt = std::atoi(argv[2]);
  std::mutex print;
  try {
    auto body = [&](tw::Comm& comm) {
      const int me = comm.rank(), P = comm.nranks();
      tw::EpConfig cfg;
      cfg.max_tokens_per_rank = kTokens, cfg.hidden = kHidden, cfg.topk = kTopk, cfg.num_experts = kExpertsPerRank * P;
      tw::EpBuffer buf(comm, cfg);  // collective: sizes and registers its window once
      cudaStream_t s;
      TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      __nv_bfloat16 *x, *out;
      int64_t* idx;
      float* w;
      unsigned long long* wrong;
      TW_CUDA_CHECK(cudaMalloc(&x, kTokens * kHidden * 2));
      TW_CUDA_CHECK(cudaMalloc(&out, kTokens * kHidden * 2));
      TW_CUDA_CHECK(cudaMalloc(&idx, kTokens * kTopk * 8));
      TW_CUDA_CHECK(cudaMalloc(&w, kTokens * kTopk * 4));
      TW_CUDA_CHECK(cudaMalloc(&wrong, 8));
      TW_CUDA_CHECK(cudaMemsetAsync(wrong, 0, 8, s));
      fill<<<64, 256, 0, s>>>(x, kTokens * kHidden, me);
      // Token t picks expert (t mod E) and, for odd t, also the next rank's first expert.
      std::vector<int64_t> ids(kTokens * kTopk);
      std::vector<float> ws(kTokens * kTopk, 0.5f);
      for (int t = 0; t < kTokens; ++t) {
        ids[t * kTopk] = t % cfg.num_experts;
        ids[t * kTopk + 1] = t % 2 ? ((t % cfg.num_experts) / kExpertsPerRank + 1) % P * kExpertsPerRank : -1;
        if (ids[t * kTopk + 1] == ids[t * kTopk]) ids[t * kTopk + 1] = -1;
      }
      TW_CUDA_CHECK(cudaMemcpyAsync(idx, ids.data(), ids.size() * 8, cudaMemcpyHostToDevice, s));
      TW_CUDA_CHECK(cudaMemcpyAsync(w, ws.data(), ws.size() * 4, cudaMemcpyHostToDevice, s));

      tw::EpDispatchArgs a;
      a.x = x, a.num_tokens = kTokens, a.topk_idx = idx, a.topk_weights = w;
      const tw::EpRecv r = buf.dispatch(a, s);  // rows in (source rank, source token) order
      // ... the experts would run here on r.x (rows [0, *r.num_recv)); this one is the identity.
      buf.combine(r.x, nullptr, out, s);        // each row back to its source, summed in rank order
      check<<<64, 256, 0, s>>>(x, out, buf.layout_view().token_in_rank, kTokens, kHidden, P, wrong);
      buf.check(s);  // synchronizes; throws if some rank's routing was invalid
      unsigned long long bad = 0;
      TW_CUDA_CHECK(cudaMemcpy(&bad, wrong, 8, cudaMemcpyDeviceToHost));
      const int n = buf.num_recv(s);
      {
        std::lock_guard<std::mutex> lk(print);
        std::printf("rank %d: sent %d tokens, received %d rows, combine %s (%llu wrong), buffer %.1f MiB\n", me, kTokens, n,
                    bad ? "WRONG" : "exact", bad, buf.bytes() / 1048576.0);
      }
      for (void* p : {(void*)x, (void*)out, (void*)idx, (void*)w, (void*)wrong}) cudaFree(p);
      cudaStreamDestroy(s);
      if (bad) throw tw::Error(tw::Errc::kInvalidArgument, "combine differs from n_t x x");
    };
    if (virt > 0) tw::Comm::run_virtual(0, virt, body);
    else tw::Comm::run_local({}, body);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "04_moe_dispatch_combine: %s\n", e.what());
    return 1;
  }
  return 0;
}
