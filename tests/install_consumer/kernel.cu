// Device side of the install check: the installed device API compiles in a user's .cu file.
#include <cuda_runtime.h>

#include <cstdio>

#include "tilewire/device.cuh"

// Reads a DevCtx passed by value, as every tilewire kernel does.
__global__ void read_ctx(tw::DevCtx ctx, int* out) {
  out[0] = ctx.rank * 100 + ctx.nranks;
  out[1] = tw::dev::rolling_ge(ctx.timeout_ns, 1) ? 1 : 0;
}

// Never launched here (it needs a communicator); instantiating it checks that the templates of
// the device API (signal, bounded wait, LSA barrier, put, window pointers) compile outside the
// library. `win` is a user window as kernels take it (tw::Window::dev()).
__global__ void uses_device_api(tw::DevCtx ctx, tw::DevWindow win, int peer) {
  tw::dev::Cta cta;
  tw::dev::signal(cta, ctx, peer, /*index=*/0, /*value=*/1);
  tw::dev::wait_signal(cta, ctx, /*index=*/0, /*expected=*/1);
  tw::dev::lsa_barrier(cta, ctx, blockIdx.x);
  tw::dev::put_signal(tw::dev::Warp{}, ctx, peer, win, 0, win, 16, 16, /*index=*/1);
  const float* mine = tw::dev::local_ptr<const float>(ctx, win, 16);
  float* theirs = tw::dev::lsa_ptr<float>(ctx, win, 32, tw::dev::lsa_of_world(ctx, peer));
  if (threadIdx.x == 0) theirs[0] = mine[0];
}

int consumer_kernel_check() {
  tw::DevCtx ctx{};
  ctx.rank = 3;
  ctx.nranks = 4;
  ctx.timeout_ns = 5;
  int* d = nullptr;
  int h[2] = {0, 0};
  if (cudaMalloc(&d, sizeof(h)) != cudaSuccess) return 1;
  read_ctx<<<1, 1>>>(ctx, d);
  cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "tilewire_consumer: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return (h[0] == 304 && h[1] == 1) ? 0 : 1;
}
