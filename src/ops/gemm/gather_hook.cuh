// src/ops/gemm/gather_hook.cuh — StoreC plus the gathered A: allgather_gemm's pulled GEMM writes
// A_gathered itself, from the kernel's otherwise idle epilogue-load warp (the "comm warp",
// HookEpilogue::comm in gemm_sm90.cuh), while its consumers compute. Measurement build only
// (TILEWIRE_AG_GATHER_IN_GEMM): not the product until it beats the copies beside the GEMM.
//
// Why inside the GEMM: the product copies A_gathered beside the pulled GEMM (cudaMemcpyBatchAsync
// on a side stream). A copy within one GPU runs as a kernel on SMs, so beside a GEMM that holds
// its SMs it runs after it, at the whole copy's cost: 1.15-1.27x of the GEMM alone against
// 1.00-1.11x without A_gathered (ag-gemm llama, 4 virtual ranks, rows (g) and (i);
// docs/fused_gemm.md). Here each CTA copies a share of the rows its tiles read, with bulk copies
// that take no SM time from the consumers, but one warp's copies must keep up with the tiles.
//
// Who copies what: the tile (tile_m, tile_n) copies whole rows of its row block, the block's rows
// split evenly over its n_tiles column tiles, so each byte of A_gathered is written exactly once
// and the work follows the GEMM's tiles. A logical row
// r (< m_total) lies in batch l = r / batch_rows at src + l batch_stride + (r - l batch_rows) row
// bytes: the shard in its owner's copy of the workspace, where the mainloop reads it too.
//
// How: lane 0 of the comm warp moves each row's pieces (kSlotBytes, the last shorter) global -> shared
// (cp.async.bulk, completing on the slot's mbarrier) -> global (cp.async.bulk, bulk group),
// through kSlots slots, kSlots - 1 loads ahead. Before a slot is loaded again, the store that
// last used it must have read it (wait_group.read); at the end of every tile all stores have read
// their slots, so the slots start each tile free and the CTA never exits with one still read.
// The stores' completion is the kernel's: A_gathered is final for the work after it on the stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include "epilogue_hook.cuh"
#include "gather_split.hpp"
#include "gemm_sm90.cuh"
#include "tilewire/device.cuh"

namespace tw::gemm_impl {

// The bytes in flight set the copy's rate (a load takes microseconds beside a GEMM); the hook's
// shared memory must still leave the mainloop its 3 stages (run_sm90_gather asserts it).
//   * StoreC's one pass of 256 columns (66 KiB) and 8 x 2 KiB slots: seven loads in flight.
//     Against the copies beside it: 0.01-0.05 faster on the 70B FFN (a tile copies ~73 KiB), as
//     fast on the 8B FFN, 0.05-0.19 slower on the 70B attention output (N_local 2048: 256 KiB a
//     tile), ag-gemm Llama at 4 virtual ranks (docs/fused_gemm.md).
//   * StoreC in two passes of 128 columns (34 KiB) and 24 x 2 KiB slots: 23 loads in flight
//     (the default).
// 4 slots and rows split over the column tiles (pieces of a few hundred bytes) ran at
// 1.17-2.36x of the GEMM alone.
template <class Element, int kStoreCols = 128, int kSlots_ = 24>
struct StoreCGather : StoreC<Element, kStoreCols> {
  using Base = StoreC<Element, kStoreCols>;
  static constexpr bool kCommWarp = true;
  static constexpr int kSlots = kSlots_, kSlotBytes = 2048;
  struct SharedStorage : Base::SharedStorage {
    alignas(128) char slot[kSlots][kSlotBytes];
    uint64_t full[kSlots];  // mbarrier per slot: 1 arrival + the piece's bytes
    uint32_t issued;        // pieces this CTA loaded so far (lane 0 of the comm warp): slot and parity
  };

  const char* src = nullptr;  // batch 0 of the pulled A
  long long batch_stride = 0;  // bytes from one batch to the next
  int batch_rows = 0;          // rows per batch (a whole number of tiles)
  char* gathered = nullptr;    // A_gathered [m_total, K], row-major
  int m_total = 0;             // logical rows of A
  long long row_bytes = 0;     // K elements, a multiple of 16 bytes
  int n_tiles = 0;             // column tiles of C: ceil(N / tile width)
  DevCtx ctx{};                // the bound of the slot waits

  CUTLASS_DEVICE static void init_smem(SharedStorage& s) {
    for (int i = 0; i < kSlots; ++i) cutlass::arch::ClusterTransactionBarrier::init(&s.full[i], 1);
    s.issued = 0;
    cutlass::arch::fence_barrier_init();
  }

  // The comm warp, once per tile, in the consumers' tile order (tile_m: the logical row block).
  CUTLASS_DEVICE void comm(int tile_m, int tile_n, int /*step*/, int /*seq*/, int lane, SharedStorage* smem) const {
    if (lane != 0) return;
    const int row0 = tile_m * Base::kRows, rows = min(Base::kRows, m_total - row0);
    if (rows <= 0) return;
    // This tile's rows of the row block, whole: [r0, r1).
    const RowSpan span = gather_rows_of_tile(row0, rows, tile_n, n_tiles);
    const int r0 = span.lo, r1 = span.hi;
    const int per_row = (int)((row_bytes + kSlotBytes - 1) / kSlotBytes), n = (r1 - r0) * per_row;
    if (n <= 0) return;
    const uint32_t c0 = smem->issued;
    const auto piece = [&](int i, long long& off, uint32_t& bytes) {
      off = (long long)(i % per_row) * kSlotBytes;
      bytes = (uint32_t)min((long long)kSlotBytes, row_bytes - off);
      return r0 + i / per_row;
    };
    const auto load = [&](int i) {
      long long off;
      uint32_t bytes;
      const int row = piece(i, off, bytes), l = row / batch_rows, s = (c0 + i) % kSlots;
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem->full[s], bytes);
      cute::SM90_BULK_COPY_G2S::copy(src + l * batch_stride + (long long)(row - l * batch_rows) * row_bytes + off,
                                     &smem->full[s], smem->slot[s], (int32_t)bytes);
    };
    for (int i = 0; i < kSlots - 1 && i < n; ++i) load(i);
    for (int i = 0; i < n; ++i) {
      const uint32_t c = c0 + i, s = c % kSlots;
      wait_slot(&smem->full[s], (c / kSlots) & 1);
      cutlass::arch::fence_view_async_shared();
      long long off;
      uint32_t bytes;
      const int row = piece(i, off, bytes);
      cute::SM90_BULK_COPY_S2G::copy(smem->slot[s], gathered + (long long)row * row_bytes + off, (int32_t)bytes);
      cute::tma_store_arrive();
      if (i + kSlots - 1 < n) {
        cute::tma_store_wait<1>();  // the store before this one read the slot the next load takes
        load(i + kSlots - 1);
      }
    }
    cute::tma_store_wait<0>();
    smem->issued = c0 + n;
  }

 private:
  // A bulk load's completion: bounded like every wait (it ends unless the copy faulted).
  CUTLASS_DEVICE void wait_slot(uint64_t* bar, uint32_t parity) const {
    dev::bounded_spin_silent(
        ctx, "allgather_gemm.gather_slot", 1,
        [&] { return (uint64_t)cutlass::arch::ClusterBarrier::try_wait(bar, parity); },
        [](uint64_t v) { return v != 0; });
  }
};

// The launch each gemm_sm90_*_gather.cu instantiates: the hook kernel with a pulled A
// (gate.batches > 1) that it also writes to gate.gathered.
template <class Element, BLayout kLayout>
void run_sm90_gather(const GemmArgs& a, const GemmConfig& cfg, int num_sms, Raster raster, cudaStream_t stream,
                     const Gate& gate) {
  using E = typename CutlassElement<Element>::type;
  using Hook = StoreCGather<E>;
  static_assert(Sm90Gemm<Element, kLayout, Hook>::Mainloop::DispatchPolicy::Stages >= 3,
                "the gather's slots leave the mainloop 3 stages");
  Hook hook;
  hook.C = static_cast<E*>(a.C);
  hook.ldc = a.N;
  hook.src = static_cast<const char*>(a.A);
  hook.batch_stride = gate.batch_stride * (long long)sizeof(Element);
  hook.batch_rows = gate.batch_rows;
  hook.gathered = static_cast<char*>(gate.gathered);
  hook.m_total = gate.m_total;
  hook.row_bytes = (long long)a.K * (long long)sizeof(Element);
  hook.n_tiles = (a.N + Hook::kTileCols - 1) / Hook::kTileCols;
  hook.ctx = gate.ctx;
  run_sm90<Element, kLayout>(a, cfg, hook, num_sms, raster, /*workspace=*/nullptr, stream, gate);
}

}  // namespace tw::gemm_impl
