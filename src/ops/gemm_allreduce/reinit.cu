// src/ops/gemm_allreduce/reinit.cu — re-initializing a workspace whose flags a call cannot trust.
//
// The fused kernels' flags hold the tag of the last call that set them and are compared
// "rolling >= this call's tag"; flags are never reset. That holds while every call on the
// workspace has the same layout. When the layout changes (another shape, algorithm, partial
// precision), or the sequential path has written its partial into the workspace, the words at
// this call's flag offsets may hold anything: an old flag of another layout, or bf16 data that
// reads as a flag already set. The launcher then runs this kernel first, on every rank (all
// ranks make the same calls, so all decide alike):
//
//   barrier  every rank's previous kernel on the workspace is over: no peer still writes into it
//   zero     this rank's flag section [kHeaderBytes, staging_off) (+ the header on first use)
//   seed     exchange: peer_done[q] = the calls completed (the previous call's reads are over)
//   barrier  every rank's flags are zero before any rank's fused kernel sets one in a peer
//
// One CTA; the barrier is the communicator's LSA barrier 0 (bounded waits).
#include "launch.hpp"
#include "tilewire/device.cuh"
#include "tilewire/runtime/errors.hpp"

namespace tw::gemm_allreduce_impl {
namespace {

constexpr int kReinitThreads = 512;

__global__ void __launch_bounds__(kReinitThreads)
    reinit_workspace(const __grid_constant__ DevCtx ctx, char* ws, size_t from, size_t to, size_t peer_done_off,
                     int peer_done_count) {
  const dev::Cta cta{};
  dev::lsa_barrier(cta, ctx, 0, cuda::memory_order_acq_rel, "gemm_allreduce.reinit_before");
  // [from, to) is 16-byte aligned (the header is 256 bytes, the sections 256-byte aligned).
  for (size_t off = from + 16 * (size_t)threadIdx.x; off < to; off += 16 * (size_t)blockDim.x)
    *reinterpret_cast<uint4*>(ws + off) = make_uint4(0, 0, 0, 0);
  __syncthreads();
  if ((int)threadIdx.x < peer_done_count) {
    const uint64_t epoch = *reinterpret_cast<volatile const uint64_t*>(ws + Layout::kEpochOff);
    reinterpret_cast<uint64_t*>(ws + peer_done_off)[threadIdx.x] = epoch;
  }
  dev::lsa_barrier(cta, ctx, 0, cuda::memory_order_acq_rel, "gemm_allreduce.reinit_after");
}

}  // namespace

void launch_reinit(const DevCtx& ctx, char* ws, const Layout& lay, bool first_use, cudaStream_t stream) {
  const size_t from = first_use ? 0 : kHeaderBytes;
  const int peer_done = lay.algo == GemmAllReduceAlgo::kExchange ? lay.P : 0;
  reinit_workspace<<<1, kReinitThreads, 0, stream>>>(ctx, ws, from, lay.staging_off, lay.peer_done_off, peer_done);
  TW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tw::gemm_allreduce_impl
