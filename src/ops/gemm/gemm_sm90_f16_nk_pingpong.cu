// The plain GEMM's ping-pong tiles for fp16 A, B [N, K] and C (streamk.cuh CutlassGemm, kPingpong): the
// swapped (64, 16 | 32 | 64, 64) and (128, 64, 64) tiles and the plain (128, 128, 64) and (128, 112, 64) ones, data-parallel.
// Programmatic dependent launch (StreamKPlan::pdl, the ping-pong tiles only): with this defined,
// CUTLASS's kernels wait (griddepcontrol.wait) for the kernel before them on the stream to complete
// before their first global access, and let the next one launch from their last tile, so a launch
// with PDL overlaps its launch and prologue with the kernel before it. Without a PDL launch the wait
// returns at once. It must come before any CUTLASS header. Not in the stream-K translation units:
// CUTLASS 4.2's stream-K scheduler does not compile with it (its is_last_tile, const, passes a
// member to a non-const reference).
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
// The wgmma shapes of N = 8 steps (CuTe's "extended" atoms, off by default): the 128x112 tile's
// 64x112x16 atom. Without it CuTe's atom selector falls back to the largest power-of-two-ish N
// that divides the tile (64x16x16 for 112: seven times the instructions, each re-reading A from
// shared memory; 0.12-0.73x cuBLASLt). The other tiles' atoms (N = 16, 32, 64, 128) are the same
// either way (checked with ptxas -v on the instantiations).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#include "streamk.cuh"

namespace tw::gemm_impl {

void launch_f16_nk_pingpong(const GemmArgs& a, const GemmConfig& cfg, int num_sms, const StreamKPlan& plan,
                            cudaStream_t stream) {
  streamk::launch_pingpong<cutlass::half_t>(a, cfg, num_sms, plan, stream);
}

}  // namespace tw::gemm_impl
