// 02_allreduce: the smallest complete use of tilewire's all-reduce.
//
// One process, one thread per local GPU (tw::Comm::run_local), or P virtual ranks on GPU 0
// (tw::Comm::run_virtual) with --virtual P. Each rank allocates two symmetric windows, fills
// `send` with small seeded integers (so the sum is exact in bf16), all-reduces into `recv` with
// every algorithm, and checks the result on the device against the exact sum. Then it times
// tilewire against ncclAllReduce on the same buffers (tilewire alone on a virtual team, which has
// no NCCL communicator; its times are P ranks sharing one GPU, not NVLink figures).
//
//   ./02_allreduce [--virtual P] [bytes...]     default sizes: 8K 256K 32M
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "tilewire/ops/allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

// Element i of rank r: an integer in [-8, 8] from a hash of (r, i).
__host__ __device__ inline float seeded(int r, size_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(r + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return (float)((int)(x % 17) - 8);
}

__global__ void fill(__nv_bfloat16* p, size_t n, int r) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(seeded(r, i));
}
__global__ void count_wrong(const __nv_bfloat16* p, size_t n, int nranks, unsigned long long* wrong) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += seeded(r, i);
    if (__bfloat162float(p[i]) != want) atomicAdd(wrong, 1ull);
  }
}

int main(int argc, char** argv) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);  // before any CUDA call: virtual ranks need their own queues
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);         // and their kernels loaded up front
  int virtual_ranks = 0;  // 0: one rank per GPU
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--virtual" && i + 1 < argc) virtual_ranks = std::atoi(argv[++i]);
    else sizes.push_back(tw::env::parse_bytes(argv[i]).value_or(0));
  }
  if (std::count(sizes.begin(), sizes.end(), size_t{0})) {
    std::fprintf(stderr, "usage: 02_allreduce [--virtual P] [bytes like 8K 32M ...]\n");
    return 2;
  }
  if (sizes.empty()) sizes = {8 << 10, 256 << 10, 32 << 20};
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  std::mutex print;
  int failures = 0;
  auto body = [&](tw::Comm& comm) {
    const int grid = 2 * comm.sm_count();  // fill / check: this rank's share of the GPU
    cudaStream_t s;
    TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    tw::Window send = comm.alloc_window(max_bytes), recv = comm.alloc_window(max_bytes);
    unsigned long long* wrong;
    TW_CUDA_CHECK(cudaMalloc(&wrong, sizeof(*wrong)));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (size_t bytes : sizes) {
      const size_t n = bytes / sizeof(__nv_bfloat16);
      for (auto algo : {tw::AllReduceAlgo::kOneShot, tw::AllReduceAlgo::kTwoShot}) {
        tw::AllReduceArgs a{send.data(), recv.data(), n, tw::DType::kBFloat16, algo};
        if (!tw::can_implement(comm, a)) continue;
        fill<<<grid, 512, 0, s>>>(send.as<__nv_bfloat16>(), n, comm.rank());
        TW_CUDA_CHECK(cudaMemsetAsync(recv.data(), 0xff, bytes, s));  // poison (NaN)
        TW_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(*wrong), s));
        comm.sync(s);
        comm.barrier();
        tw::allreduce(comm, a, s);
        count_wrong<<<grid, 512, 0, s>>>(recv.as<__nv_bfloat16>(), n, comm.nranks(), wrong);
        comm.sync(s);  // this stream only; a timed-out device wait surfaces here with its diagnostic
        unsigned long long w = 0;
        TW_CUDA_CHECK(cudaMemcpyAsync(&w, wrong, sizeof(w), cudaMemcpyDeviceToHost, s));
        comm.sync(s);
        // Time: 20 warm-up, 100 timed back-to-back, tilewire then NCCL on the same windows.
        const int iters = std::getenv("EX_ITERS") ? std::atoi(std::getenv("EX_ITERS")) : 100;
        float tw_ms = 0, nccl_ms = -1;  // -1: NCCL not timed (a virtual team has none)
        for (int i = 0; i < 20; ++i) tw::allreduce(comm, a, s);
        cudaEventRecord(e0, s);
        for (int i = 0; i < iters; ++i) tw::allreduce(comm, a, s);
        cudaEventRecord(e1, s);
        comm.sync(s);
        cudaEventElapsedTime(&tw_ms, e0, e1);
        if (comm.nccl()) {
          for (int i = 0; i < 20; ++i)
            TW_NCCL_CHECK(ncclAllReduce(send.data(), recv.data(), n, ncclBfloat16, ncclSum, comm.nccl(), s));
          cudaEventRecord(e0, s);
          for (int i = 0; i < iters; ++i)
            TW_NCCL_CHECK(ncclAllReduce(send.data(), recv.data(), n, ncclBfloat16, ncclSum, comm.nccl(), s));
          cudaEventRecord(e1, s);
          comm.sync(s);
          cudaEventElapsedTime(&nccl_ms, e0, e1);
        }
        std::lock_guard<std::mutex> lk(print);
        if (w) ++failures;
        if (comm.rank() == 0) {
          std::printf("%10zu B  %-8s  wrong %llu  tilewire %9.2f us (%6.1f GB/s)", bytes, tw::algo_name(algo), w,
                      1e3 * tw_ms / iters, bytes / (1e6 * tw_ms / iters));
          if (nccl_ms >= 0)
            std::printf("  nccl %9.2f us (%6.1f GB/s)\n", 1e3 * nccl_ms / iters, bytes / (1e6 * nccl_ms / iters));
          else
            std::printf("  nccl n/a (%s backend)\n", comm.backend_name());
        }
      }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(wrong);
    cudaStreamDestroy(s);
  };
  try {
    if (virtual_ranks > 0) tw::Comm::run_virtual(0, virtual_ranks, body);
    else tw::Comm::run_local({}, body);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return failures ? 1 : 0;
}
