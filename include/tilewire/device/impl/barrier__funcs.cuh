#pragma once

namespace tw::dev {

// A session whose wait is bounded. It relies on the inbox layout of NCCL's LSA barrier of the
// exact NCCL version tilewire was compiled against (runtime == header is enforced at
// communicator creation, see version.hpp).
template <class Coop>
struct BoundedLsaBarrier : ncclLsaBarrierSession<Coop> {
  using Base = ncclLsaBarrierSession<Coop>;
  __device__ BoundedLsaBarrier(Coop coop, const DevCtx& ctx, uint32_t index)
      : Base(coop, ctx.comm, ncclTeamTagLsa{}, index) {}

  __device__ void wait_bounded(Coop coop, const DevCtx& ctx, cuda::memory_order order, const char* what) {
    const bool acq = order == cuda::memory_order_acquire || order == cuda::memory_order_acq_rel ||
                     order == cuda::memory_order_seq_cst;
    const uint32_t want = this->epoch + 1;
#pragma unroll 1
    for (int i = coop.thread_rank(); i < this->team.nRanks - 1; i += coop.size()) {
      int peer = i + (this->team.rank <= i ? 1 : 0);
      cuda::atomic_ref<uint32_t> inbox(*this->ucInbox(this->team.rank, peer));
      bounded_spin(
          ctx, what, want,
          [&] { return (uint64_t)inbox.load(acq ? cuda::memory_order_acquire : cuda::memory_order_relaxed); },
          [&](uint64_t got) { return (uint32_t)got - want <= (uint32_t(-1) >> 1); });
    }
    this->epoch += 1;
    coop.sync();
  }
};

template <class Coop>
__device__ void lsa_barrier(Coop coop, const DevCtx& ctx, uint32_t index, cuda::memory_order order,
                            const char* what) {
  if (ctx.lsa_size <= 1) {
    coop.sync();
    return;
  }
  BoundedLsaBarrier<Coop> bar(coop, ctx, index);
  const cuda::memory_order rel = (order == cuda::memory_order_acquire) ? cuda::memory_order_relaxed : order;
  bar.arrive(coop, rel == cuda::memory_order_acq_rel ? cuda::memory_order_release : rel);
  bar.wait_bounded(coop, ctx, order == cuda::memory_order_release ? cuda::memory_order_relaxed : order, what);
}

}  // namespace tw::dev
