// tests/gpu/allreduce_epoch_test.cu — the one-shot all-reduce across its epochs' 32-bit wrap.
//
//   AllReduceEpoch.OneShotPastTheWrap  every block's epoch set to 2^32 - 1 on every rank (the
//       family's state: ops::allreduce_state), on staging that no call has written yet (its
//       lines still carry tag 0), then 6 one-shot calls in a row with no host synchronization, of
//       the largest one-shot count (bf16), each with its own small-integer inputs, one rank in
//       turn held back 2 ms before its call. The first call's epoch would be 0 after the wrap,
//       the tag of every line never written: a peer would take them for the held rank's payload.
//       Every call's sum is exact and compared bit for bit on every rank.
// Needs 2 or more ranks.
#include <algorithm>
#include <string>
#include <vector>

#include "common.cuh"
#include "ops/allreduce/state.hpp"  // allreduce_state: the per-block epochs

namespace {
using namespace tw_test;
using tw::DType;

TEST(AllReduceEpoch, OneShotPastTheWrap) {
  TW_SKIP_UNLESS_RANKS(2);
  constexpr int kCalls = 6;
  constexpr uint64_t kSeed = 0xE70C;
  const DType dt = DType::kBFloat16;
  const int P = team_size();
  std::vector<std::vector<std::string>> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    const size_t count = std::min<size_t>(tw::oneshot_max_bytes(comm) / 2, size_t{1} << 16);
    const size_t bytes = count * 2;
    tw::Window send = comm.alloc_window(bytes * kCalls), recv = comm.alloc_window(bytes * kCalls);
    std::vector<Bytes> want(kCalls);
    for (int c = 0; c < kCalls; ++c) {
      want[c] = exact_sum(dt, count, kSeed + c, P);
      fill(send.as<char>() + c * bytes, dt, count, Fill::kSmallInt, kSeed + c, r, s);
    }
    poison(recv.data(), recv.bytes(), s);
    const std::vector<uint32_t> near(tw::ops::kOneShotMaxBlocks, 0xFFFFFFFFu);
    upload(tw::ops::allreduce_state(comm).epochs, near, s);
    comm.sync(s);
    comm.barrier();
    for (int c = 0; c < kCalls; ++c) {
      if (c % P == r) hold_stream(s, 2'000'000);
      const tw::AllReduceArgs a{send.as<char>() + c * bytes, recv.as<char>() + c * bytes, count, dt,
                                tw::AllReduceAlgo::kOneShot};
      tw::allreduce(comm, a, s);
    }
    comm.sync(s);
    const Bytes got = to_host(recv.data(), bytes * kCalls, s);
    for (int c = 0; c < kCalls; ++c) {
      const Bytes one(got.begin() + c * bytes, got.begin() + (c + 1) * bytes);
      const std::string diff = compare_exact(one, want[c], dt, count);
      if (!diff.empty()) wrong[r].push_back("call " + std::to_string(c) + ": " + diff);
    }
    comm.barrier();  // no peer still reads my windows when they are freed
  });
  for (int q = 0; q < P; ++q)
    for (const std::string& m : wrong[q]) ADD_FAILURE() << "rank " << q << ": " << m;
}

}  // namespace
