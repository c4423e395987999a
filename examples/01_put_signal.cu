// 01_put_signal: the device API in one kernel.
//
// Ring of P ranks: one thread per local GPU (tw::Comm::run_local), or `./01_put_signal P` for P
// virtual ranks on GPU 0 (tw::Comm::run_virtual: same kernel, same API, no NCCL). Each rank owns
// one symmetric window split in two halves:
//
//     window:  [ out: what I send (N floats) | in: what my left neighbour sent me (N floats) ]
//
// One CTA per rank runs:   put_signal(out -> right neighbour's `in`, signal 0 += 1)
//                          wait_signal(signal 0 >= round)   (bounded: TILEWIRE_TIMEOUT_MS)
//                          check `in` against what the left neighbour must have sent
// put_signal is a put followed by a release add on the peer's signal: when the peer sees the
// new count, it sees the data. LSA peers get plain stores; peers outside the LSA team would go
// through NCCL GIN (not on a single node).
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "tilewire/device.cuh"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

constexpr int kN = 1 << 16;  // floats per half

__device__ float value(int rank, int round, int i) { return (float)(rank * 1000 + round * 7 + (i % 97)); }

// `win` is the window as kernels see it (tw::Window::dev()): every LSA peer's copy is reachable.
__global__ void ring_round(const __grid_constant__ tw::DevCtx ctx, tw::DevWindow win, int round, int* wrong) {
  namespace dev = tw::dev;
  const int me = ctx.rank, right = (me + 1) % ctx.nranks, left = (me + ctx.nranks - 1) % ctx.nranks;
  float* out = dev::local_ptr<float>(ctx, win, 0);  // my own copy, byte 0
  const float* in = out + kN;
  for (int i = threadIdx.x; i < kN; i += blockDim.x) out[i] = value(me, round, i);
  // (kN floats) of my `out` -> right neighbour's `in`, then its signal 0 += 1, all by this CTA.
  dev::put_signal(dev::Cta{}, ctx, right, win, kN * sizeof(float), win, 0, kN * sizeof(float), /*index=*/0, 1);
  // My left neighbour does the same to me: wait until my signal 0 counts this round.
  dev::wait_signal(dev::Cta{}, ctx, /*index=*/0, (uint64_t)round, cuda::memory_order_acquire, "01_put_signal");
  for (int i = threadIdx.x; i < kN; i += blockDim.x)
    if (in[i] != value(left, round, i)) atomicAdd(wrong, 1);
  // Nobody may overwrite my `in` (next round) before I have read it: a barrier closes the round.
  dev::lsa_barrier(dev::Cta{}, ctx, 0);
}

int main(int argc, char** argv) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);  // before any CUDA call: virtual ranks need their own queues
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);         // and their kernels loaded up front
  const int virtual_ranks = argc > 1 ? std::atoi(argv[1]) : 0;  // 0: one rank per GPU
  std::mutex mu;
  int total_wrong = 0;
  auto body = [&](tw::Comm& comm) {
    tw::Window win = comm.alloc_window(2 * kN * sizeof(float));
    cudaStream_t s;
    TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int* wrong = nullptr;
    TW_CUDA_CHECK(cudaMalloc(&wrong, sizeof(int)));
    TW_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(int), s));
    for (int round = 1; round <= 100; ++round) ring_round<<<1, 512, 0, s>>>(comm.dev_ctx(), win.dev(), round, wrong);
    TW_CUDA_CHECK(cudaGetLastError());
    comm.sync(s);  // this stream only (ranks may share the GPU); a timed-out wait becomes a tw::Error here
    int w = 0;
    TW_CUDA_CHECK(cudaMemcpyAsync(&w, wrong, sizeof(int), cudaMemcpyDeviceToHost, s));
    comm.sync(s);
    {
      std::lock_guard<std::mutex> lk(mu);
      total_wrong += w;
      std::printf("rank %d (%s): 100 rounds of put_signal/wait_signal, %d wrong values\n", comm.rank(),
                  comm.backend_name(), w);
    }
    cudaFree(wrong);
    cudaStreamDestroy(s);
    comm.barrier();  // every rank done with the window before it is released (collective)
  };
  try {
    if (virtual_ranks > 0) tw::Comm::run_virtual(0, virtual_ranks, body);
    else tw::Comm::run_local({}, body);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return total_wrong == 0 ? 0 : 1;
}
