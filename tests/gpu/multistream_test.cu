// tests/gpu/multistream_test.cu — one communicator, calls made on two streams.
//
//   MultiStream.CallsOnTwoStreamsRace   Every rank makes 48 all-reduce calls (one-shot and
//       two-shot, 12 buffer pairs) and 8 fused GEMM + all-reduce calls (one workspace, two
//       algorithms, so the workspace re-initializes between them), alternating between two
//       streams, with no synchronization between calls. Every result is checked afterwards: the
//       all-reduces exactly against the host sum, the fused calls over every element of C
//       against the GPU reference, every rank bit-identical. Without Comm::CallOrder the calls
//       of the two streams ran at once on the communicator's one set of staging buffers, epochs
//       and workspace flags: sums mixed between calls, or waits that never completed.
#include <string>
#include <vector>

#include "common.cuh"
#include "gemm_ref.cuh"
#include "tilewire/ops/gemm_allreduce.hpp"

namespace {
using namespace tw_test;
using tw::AllReduceAlgo;
using tw::BLayout;
using tw::DType;

constexpr uint64_t kSeed = 0x57AE, kSeedA = 211, kSeedB = 223;
constexpr int kPairs = 12, kReduceCalls = 48, kFusedCalls = 8, kCs = 4;
constexpr int kM = 2048, kN = 2048, kK = 1024;

size_t pair_count(int k) { return k % 3 == 2 ? (size_t{1} << 20) + 5 : size_t{4099} + 64 * k; }  // two-shot / one-shot

TEST(MultiStream, CallsOnTwoStreamsRace) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  const DType dt = DType::kBFloat16;
  GemmReference ref;
  ref.prepare({kM, kN, kK, BLayout::kNK, P, kSeedA, kSeedB});
  std::vector<Bytes> want(kPairs);
  for (int k = 0; k < kPairs; ++k) want[k] = exact_sum(dt, pair_count(k), kSeed + k, P);

  std::vector<std::vector<Bytes>> got(P);  // per rank: the 12 sums, then the 4 Cs
  run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s[2];
    std::vector<tw::Window> send, recv;
    for (int k = 0; k < kPairs; ++k) {
      const size_t bytes = pair_count(k) * 2;
      send.push_back(comm.alloc_window(bytes));
      recv.push_back(comm.alloc_window(bytes));
      fill(send[k].data(), dt, pair_count(k), Fill::kSmallInt, kSeed + k, r, s[0]);
      poison(recv[k].data(), bytes, s[0]);
    }
    DeviceBuffer A(size_t(kM) * kK * 2), B(size_t(kN) * kK * 2);
    fill(A.data(), dt, size_t(kM) * kK, Fill::kRandom, kSeedA, r, s[0]);
    fill(B.data(), dt, size_t(kN) * kK, Fill::kRandom, kSeedB, r, s[0]);
    tw::GemmAllReduceConfig cfg[2];
    for (int j = 0; j < 2; ++j) {
      cfg[j].path = tw::GemmAllReducePath::kFused;
      cfg[j].algo = tw::GemmAllReduceAlgo::kOwner;
      cfg[j].partials = j ? tw::PartialPrecision::kBFloat16 : tw::PartialPrecision::kFloat32;
    }
    std::vector<tw::Window> C;
    for (int c = 0; c < kCs; ++c) {
      C.push_back(comm.alloc_window(size_t(kM) * kN * 2));
      poison(C[c].data(), C[c].bytes(), s[0]);
    }
    const tw::GemmAllReduceArgs shape{A.data(), B.data(), nullptr, kM, kN, kK, dt, BLayout::kNK, nullptr};
    tw::Window ws = comm.alloc_window(std::max(tw::workspace_size(shape, P, cfg[0]), tw::workspace_size(shape, P, cfg[1])));
    comm.sync(s[0]);
    comm.barrier();

    // The calls: one fused call after every sixth all-reduce, each on the other stream than the
    // call before it. Fused call f writes C[f % 4] with algorithm f % 2 (so C[c] always with c % 2).
    int f = 0, call = 0;
    for (int i = 0; i < kReduceCalls; ++i) {
      const int k = i % kPairs;
      const AllReduceAlgo algo = k % 3 == 2 ? AllReduceAlgo::kTwoShot : AllReduceAlgo::kOneShot;
      tw::allreduce(comm, tw::AllReduceArgs{send[k].data(), recv[k].data(), pair_count(k), dt, algo}, s[call++ % 2]);
      if (i % 6 == 5 && f < kFusedCalls) {
        tw::GemmAllReduceArgs a = shape;
        a.C = C[f % kCs].data();
        a.workspace = ws.data();
        tw::gemm_allreduce(comm, a, cfg[f % 2], s[call++ % 2]);
        ++f;
      }
    }
    comm.sync(s[0]);
    comm.sync(s[1]);
    for (int k = 0; k < kPairs; ++k) got[r].push_back(to_host(recv[k].data(), recv[k].bytes(), s[0]));
    for (int c = 0; c < kCs; ++c) got[r].push_back(to_host(C[c].data(), C[c].bytes(), s[0]));
    comm.barrier();
  });

  for (int k = 0; k < kPairs; ++k) {
    std::vector<Bytes> per_rank;
    for (int q = 0; q < P; ++q) per_rank.push_back(got[q][k]);
    EXPECT_EQ(compare_ranks(per_rank, want[k].size()), "") << "buffer pair " << k;
    EXPECT_EQ(compare_exact(got[0][k], want[k], dt, pair_count(k)), "") << "buffer pair " << k << ", " << pair_count(k) << " elements";
  }
  for (int c = 0; c < kCs; ++c) {
    std::vector<Bytes> per_rank;
    for (int q = 0; q < P; ++q) per_rank.push_back(got[q][kPairs + c]);
    EXPECT_EQ(compare_ranks(per_rank, per_rank[0].size()), "") << "C " << c;
    EXPECT_EQ(ref.check(got[0][kPairs + c], c % 2 == 1), "") << "C " << c;
  }
}

}  // namespace
