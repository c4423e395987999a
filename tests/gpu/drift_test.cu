// tests/gpu/drift_test.cu — many back-to-back all-reduces on one stream, no host sync between
// them, then an exact check. Catches state that drifts from call to call: one-shot epochs and
// staging parities, two-shot barrier epochs, a call overtaking the previous one.
//
// Inputs rotate over three buffer pairs (i % 3). One-shot staging is double-buffered (period 2),
// so a stale staging slot would hold a *different* input and show as a wrong sum.
//
//   Drift.OneShotBackToBack   10000 x bf16 64 KiB, forced one-shot
//   Drift.TwoShotBackToBack   10000 x bf16 4 MiB, forced two-shot
//   Drift.CheckedEveryCall    10000 calls alternating one-shot (small) and two-shot (medium), a
//                             device-side exact check after every call counts wrong elements
#include "common.cuh"

namespace {
using namespace tw_test;
using tw::AllReduceAlgo;
using tw::DType;

constexpr int kIters = 10000;
constexpr int kSlots = 3;
constexpr uint64_t kSeed = 0xD81F7;

// Counts elements of `got` (bf16) that differ from the exact sum of small_int(seed, q, i) over
// the ranks: the reference is recomputed from the seed, independently of the all-reduce.
__global__ void count_wrong(const __nv_bfloat16* got, size_t n, uint64_t seed, int nranks, unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int sum = 0;
    for (int q = 0; q < nranks; ++q) sum += small_int(seed, q, i);
    const __nv_bfloat16 want = __float2bfloat16_rn((float)sum);
    if (__bfloat16_as_ushort(got[i]) != __bfloat16_as_ushort(want)) ++bad;
  }
  if (bad) atomicAdd(wrong, bad);
}

// `iters` all-reduces of `count` bf16 elements with `algo`, slot i % 3, then the exact check
// of all three slots (the last call that wrote each) on every rank, and bit-identity.
void back_to_back(size_t count, AllReduceAlgo algo) {
  const DType dt = DType::kBFloat16;
  const size_t bytes = count * tw::dtype_size(dt);
  const int P = team_size();
  std::vector<Bytes> got(P);
  std::vector<Bytes> want(kSlots);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    tw::Window send = comm.alloc_window(kSlots * bytes), recv = comm.alloc_window(kSlots * bytes);
    auto* sb = send.as<char>();
    auto* rb = recv.as<char>();
    for (int k = 0; k < kSlots; ++k) fill(sb + k * bytes, dt, count, Fill::kSmallInt, kSeed + k, r, s);
    poison(recv.data(), recv.bytes(), s);
    if (r == 0)
      for (int k = 0; k < kSlots; ++k) want[k] = exact_sum(dt, count, kSeed + k, P);
    comm.sync(s);
    comm.barrier();

    for (int i = 0; i < kIters; ++i) {
      const int k = i % kSlots;
      tw::allreduce(comm, tw::AllReduceArgs{sb + k * bytes, rb + k * bytes, count, dt, algo}, s);
    }
    comm.sync(s);  // the only host sync: after all of them
    EXPECT_NO_THROW(comm.check_fault());

    got[r] = to_host(recv.data(), recv.bytes(), s);
    comm.barrier();
    for (int k = 0; k < kSlots; ++k) {
      Bytes slot(got[r].begin() + k * bytes, got[r].begin() + (k + 1) * bytes);
      EXPECT_EQ(compare_exact(slot, want[k], dt, count), "") << name(algo) << " slot " << k << ", rank " << r;
    }
    if (r == 0) {
      EXPECT_EQ(compare_ranks(got, kSlots * bytes), "") << name(algo);
    }
    comm.barrier();
  });
}

TEST(Drift, OneShotBackToBack) {
  TW_SKIP_UNLESS_GPUS(1);
  back_to_back((64 << 10) / 2, AllReduceAlgo::kOneShot);
}

TEST(Drift, TwoShotBackToBack) {
  TW_SKIP_UNLESS_GPUS(1);
  back_to_back((4 << 20) / 2, AllReduceAlgo::kTwoShot);
}

// Alternating algorithms and sizes, with count_wrong after every call on the same stream (still
// no host sync): a wrong result in any of the 10000 calls is counted, not only the last ones.
TEST(Drift, CheckedEveryCall) {
  TW_SKIP_UNLESS_GPUS(1);
  const DType dt = DType::kBFloat16;
  const size_t small = 3000, medium = (4 << 20) / 2 + 24;  // odd-ish sizes: tails included
  const int P = team_size();
  std::vector<unsigned long long> wrong(P, ~0ull);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    const size_t bytes = medium * 2;
    tw::Window send = comm.alloc_window(kSlots * bytes), recv = comm.alloc_window(kSlots * bytes);
    DeviceBuffer counter(sizeof(unsigned long long));
    TW_CUDA_CHECK(cudaMemsetAsync(counter.data(), 0, counter.bytes, s));
    auto* sb = send.as<char>();
    auto* rb = recv.as<char>();
    for (int k = 0; k < kSlots; ++k) fill(sb + k * bytes, dt, medium, Fill::kSmallInt, kSeed + 10 + k, r, s);
    comm.sync(s);
    comm.barrier();

    for (int i = 0; i < kIters; ++i) {
      const int k = i % kSlots;
      const bool one = i % 2 == 0;
      const size_t n = one ? small : medium;
      auto* out = reinterpret_cast<__nv_bfloat16*>(rb + k * bytes);
      poison(out, n * 2, s);
      tw::allreduce(
          comm, tw::AllReduceArgs{sb + k * bytes, out, n, dt, one ? AllReduceAlgo::kOneShot : AllReduceAlgo::kTwoShot},
          s);
      count_wrong<<<64, 256, 0, s>>>(out, n, kSeed + 10 + k, P, static_cast<unsigned long long*>(counter.data()));
    }
    comm.sync(s);
    TW_CUDA_CHECK(cudaGetLastError());
    TW_CUDA_CHECK(cudaMemcpy(&wrong[r], counter.data(), sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    comm.barrier();
  });
  for (int r = 0; r < P; ++r)
    EXPECT_EQ(wrong[r], 0u) << "wrong elements summed over " << kIters << " calls, rank " << r;
}

}  // namespace
