// tests/gpu/trace_test.cu — the tracer's device side (tilewire/trace/trace.hpp): clock alignment
// across GPUs and the trace buffer. (The fused op's per-tile events: gemm_allreduce_test.cu.)
//
//   Trace.ClockOffsetsAgreeWithinTheirError   two independent measurements of every rank's clock
//                                              offset differ by no more than the sum of their
//                                              stated error bounds, and the bound is small (< 50 us);
//                                              on a virtual team (one GPU, one clock) every offset
//                                              is ~0: within its error bound of zero
//   Trace.GatherMatchesEveryRanksDownload     gather_trace (a host all-gather of every rank's events) gives
//                                              every rank the same merged trace as the per-rank downloads
//   Trace.BufferRoundTrip                      emit / emit_at from a kernel, download drops unwritten
//                                              slots, counts what did not fit
//   Trace.PeersLaunchRightAfterClockSync       every rank launches a kernel that waits for its peers
//                                              (a one-shot all-reduce) as soon as measure_clock_offsets
//                                              returns, 30 times: none may wait for a peer still
//                                              inside it (on a virtual team its cudaFree waited for
//                                              the whole device, the peers' waiting kernels included)
#include <cstdlib>
#include <vector>

#include "common.cuh"
#include "tilewire/trace/trace.hpp"

namespace {
using namespace tw_test;

TEST(Trace, ClockOffsetsAgreeWithinTheirError) {
  TW_SKIP_UNLESS_RANKS(2);
  const int P = team_size();
  std::vector<tw::trace::ClockSync> a(P), b(P);
  tw_test::run_team([&](tw::Comm& comm) {
    a[comm.rank()] = tw::trace::measure_clock_offsets(comm);
    b[comm.rank()] = tw::trace::measure_clock_offsets(comm);
  });
  for (int r = 0; r < P; ++r) {  // every rank returns the same table
    EXPECT_EQ(a[r].offset_ns, a[0].offset_ns) << "rank " << r;
    EXPECT_EQ(b[r].offset_ns, b[0].offset_ns) << "rank " << r;
  }
  const tw::trace::ClockSync& x = a[0];
  const tw::trace::ClockSync& y = b[0];
  ASSERT_EQ((int)x.offset_ns.size(), P);
  EXPECT_EQ(x.offset_ns[0], 0);
  for (int q = 1; q < P; ++q) {
    EXPECT_GT(x.error_ns[q], 0) << "rank " << q;
    EXPECT_LT(x.error_ns[q], 50000) << "rank " << q << ": a round trip over NVLink is a few us";
    EXPECT_LE(std::llabs(x.offset_ns[q] - y.offset_ns[q]), x.error_ns[q] + y.error_ns[q])
        << "rank " << q << ": offsets " << x.offset_ns[q] << " and " << y.offset_ns[q] << " ns, errors "
        << x.error_ns[q] << " and " << y.error_ns[q] << " ns";
    if (virtual_ranks() > 0) {
      EXPECT_LE(std::llabs(x.offset_ns[q]), x.error_ns[q] + 64)
          << "rank " << q << ": virtual ranks share one GPU clock, so the offset must be ~0 (within its error "
          << "and a couple of timer ticks); measured " << x.offset_ns[q] << " +- " << x.error_ns[q] << " ns";
    }
  }
  std::printf("clock offsets (ns, +- error):");
  for (int q = 0; q < P; ++q)
    std::printf(" rank %d %lld +- %lld", q, (long long)x.offset_ns[q], (long long)x.error_ns[q]);
  std::printf("\n");
}

TEST(Trace, PeersLaunchRightAfterClockSync) {
  TW_SKIP_UNLESS_RANKS(2);
  const int P = team_size();
  constexpr size_t kCount = 4096;
  std::vector<Bytes> got(P);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    tw::Window send = comm.alloc_window(kCount * 4), recv = comm.alloc_window(kCount * 4);
    fill(send.data(), tw::DType::kFloat32, kCount, Fill::kSmallInt, 0x5eed, r, s);
    const tw::AllReduceArgs args{send.data(), recv.data(), kCount, tw::DType::kFloat32, tw::AllReduceAlgo::kOneShot};
    comm.sync(s);
    comm.barrier();
    for (int i = 0; i < 30; ++i) {
      (void)tw::trace::measure_clock_offsets(comm);
      poison(recv.data(), recv.bytes(), s);
      tw::allreduce(comm, args, s);  // spins on the device until every peer's data is in
      comm.sync(s);                  // a peer stuck behind it: kTimeout here (TILEWIRE_TIMEOUT_MS)
    }
    got[r] = to_host(recv.data(), recv.bytes(), s);
  });
  const Bytes want = exact_sum(tw::DType::kFloat32, kCount, 0x5eed, P);
  for (int r = 0; r < P; ++r) EXPECT_EQ(compare_exact(got[r], want, tw::DType::kFloat32, kCount), "") << "rank " << r;
}

__global__ void emit_rank_events(tw::trace::Ring r, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    tw::trace::emit(r, tw::trace::EventKind::kChunkSend, (uint32_t)i, 1 + (uint64_t)i * 1000 + r.rank);
}

TEST(Trace, GatherMatchesEveryRanksDownload) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<tw::trace::Trace> gathered(P);
  std::vector<std::vector<tw::trace::Event>> own(P);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    tw::trace::TraceBuffer buf(64);
    const tw::trace::ClockSync cs = tw::trace::measure_clock_offsets(comm);
    buf.reset(s);
    emit_rank_events<<<1, 32, 0, s>>>(buf.ring(r), 10 + 5 * r);  // ranks record different counts
    TW_CUDA_CHECK(cudaGetLastError());
    gathered[r] = tw::trace::gather_trace(comm, buf, cs, s);
    own[r] = buf.download(nullptr, s);
  });
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(gathered[r].nranks, P);
    ASSERT_EQ(gathered[r].events.size(), gathered[0].events.size()) << "rank " << r;
    for (size_t i = 0; i < gathered[r].events.size(); ++i) {
      EXPECT_EQ(gathered[r].events[i].t_ns, gathered[0].events[i].t_ns);
      EXPECT_EQ(gathered[r].events[i].rank, gathered[0].events[i].rank);
    }
  }
  size_t total = 0;
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(own[r].size(), size_t(10 + 5 * r));
    total += own[r].size();
    for (const auto& e : own[r]) {  // each downloaded event is in the gathered trace
      bool found = false;
      for (const auto& g : gathered[0].events) found = found || (g.rank == e.rank && g.t_ns == e.t_ns && g.id == e.id);
      EXPECT_TRUE(found) << "rank " << r << " event " << e.id;
    }
  }
  EXPECT_EQ(gathered[0].events.size(), total);
  EXPECT_EQ(gathered[0].dropped, 0u);
}

__global__ void emit_some(tw::trace::Ring r) {
  // 3 claimed events, 2 fixed slots (one past capacity), 1 reserve.
  if (threadIdx.x < 3) tw::trace::emit(r, tw::trace::EventKind::kChunkSend, threadIdx.x, 1000 + threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    tw::trace::emit_at(r, 5, tw::trace::EventKind::kChunkRecv, 7, 2000);
    tw::trace::emit_at(r, 1000, tw::trace::EventKind::kChunkRecv, 8, 3000);  // beyond capacity: ignored
    tw::trace::reserve(r, 6);
  }
}

TEST(Trace, BufferRoundTrip) {
  TW_SKIP_UNLESS_GPUS(1);
  TW_CUDA_CHECK(cudaSetDevice(0));
  Stream s;
  tw::trace::TraceBuffer buf(8);
  for (int pass = 0; pass < 2; ++pass) {  // reset() clears what the first pass wrote
    buf.reset(s);
    emit_some<<<1, 32, 0, s>>>(buf.ring(3));
    TW_CUDA_CHECK(cudaGetLastError());
    uint64_t dropped = 99;
    const std::vector<tw::trace::Event> ev = buf.download(&dropped, s);
    EXPECT_EQ(dropped, 0u);
    ASSERT_EQ(ev.size(), 4u) << "3 claimed + 1 fixed slot; the empty slots 3 and 4 are dropped";
    int recv = 0;
    for (const auto& e : ev) {
      EXPECT_EQ(e.rank, 3);
      recv += e.kind == (uint8_t)tw::trace::EventKind::kChunkRecv;
    }
    EXPECT_EQ(recv, 1);
  }
}

}  // namespace
