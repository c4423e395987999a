// tests/gpu/virtual_team_test.cu — the team itself: host collectives, the SM budget, windows
// made collectively, and failures that must be loud and bounded. Runs on the test team
// (common.cuh); the cases about the virtual backend make their own virtual teams on GPU 0.
//
//   VirtualTeam.HostCollectives           allreduce_host (sum, min, max) and allgather_host give
//                                         every rank the exact result, on either backend
//   VirtualTeam.SmBudget                  a virtual rank's sm_count() is the GPU's SMs / P, the
//                                         same on every rank; the NCCL backend's is the GPU's
//   VirtualTeam.WindowSlices              a virtual team's windows are slices of one allocation:
//                                         the handle's stride is the window size, rank r's slice
//                                         at base + r x stride; every rank's pointer is distinct
//   VirtualTeam.MismatchedWindowSizesFail ranks asking for different window sizes all get a
//                                         kInvalidArgument naming both sizes (no hang, no window)
//   VirtualTeam.MissingRankTimesOut       a rank that never joins a host collective: its peers
//                                         get kTimeout naming the collective within the bound
//   VirtualTeam.FusedBeyondBudgetRefused  a fused GEMM + all-reduce that cannot fit the rank's
//                                         SM budget is refused with the reason, nothing launched
//   VirtualTeam.ProtocolDisagreementFails ranks created with different kernel-shaping settings all
//                                         fail at creation, naming the setting and both values
//   VirtualTeam.WindowOutlivingItsComm    a Window whose communicator is gone is invalid, with a
//                                         null data(), and its destruction does nothing
//   VirtualTeam.RejectedCallKeepsTheComm  a call refused with kInvalidArgument (nothing written),
//                                         windows released while unwinding from it: the
//                                         communicator is not aborted and the next call is exact
#include <chrono>
#include <thread>

#include "common.cuh"
#include "tilewire/ops/gemm_allreduce.hpp"

namespace {
using namespace tw_test;

TEST(VirtualTeam, HostCollectives) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<int> bad(P, -1);
  run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    int wrong = 0;
    uint64_t v[3] = {uint64_t(r + 1), uint64_t(100 + r), uint64_t(7 * r)};
    uint64_t w[3] = {v[0], v[1], v[2]};
    uint64_t x[3] = {v[0], v[1], v[2]};
    comm.allreduce_host(v, 3, tw::HostReduce::kSum);
    comm.allreduce_host(w, 3, tw::HostReduce::kMin);
    comm.allreduce_host(x, 3, tw::HostReduce::kMax);
    wrong += v[0] != uint64_t(P) * (P + 1) / 2;
    wrong += v[1] != uint64_t(100) * P + uint64_t(P) * (P - 1) / 2;
    wrong += w[0] != 1 || w[1] != 100 || w[2] != 0;
    wrong += x[0] != uint64_t(P) || x[1] != uint64_t(100 + P - 1) || x[2] != uint64_t(7 * (P - 1));
    std::vector<uint32_t> mine(5), all(5 * P);
    for (int i = 0; i < 5; ++i) mine[i] = 1000u * r + i;
    comm.allgather_host(mine.data(), all.data(), mine.size() * sizeof(uint32_t));
    for (int q = 0; q < P; ++q)
      for (int i = 0; i < 5; ++i) wrong += all[5 * q + i] != 1000u * q + i;
    bad[r] = wrong;
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(bad[r], 0) << "rank " << r;
}

// Signal ranges for objects' protocols: from the top (below clock sync's last index), disjoint,
// a released range reused, too many refused; ranks whose reservations differ fail on every rank.
TEST(VirtualTeam, SignalReservations) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  std::vector<std::string> bad(P);
  tw::CommConfig cfg;
  cfg.signal_count = 64;
  run_team(
      [&](tw::Comm& comm) {
        std::string& w = bad[comm.rank()];
        const int a = comm.reserve_signals(10, "test a"), b = comm.reserve_signals(20, "test b");
        if (a != 63 - 10 || b != a - 20) w += "a " + std::to_string(a) + ", b " + std::to_string(b) + "; ";
        comm.release_signals(a);
        if (const int c = comm.reserve_signals(5, "test c"); c != 63 - 5) w += "c " + std::to_string(c) + "; ";
        if (!throws_tw([&] { comm.reserve_signals(40, "test d"); }, tw::Errc::kInvalidArgument, {"test d", "40 signals"}))
          w += "40 more were not refused; ";
        // Rank 0 asks for fewer than its peers: the ranges start at different indices.
        if (P > 1 && !throws_tw([&] { comm.reserve_signals(comm.rank() == 0 ? 2 : 3, "test f"); }, tw::Errc::kState,
                                {"test f", "different"}))
          w += "differing reservations were not refused; ";
      },
      cfg);
  for (int r = 0; r < P; ++r) EXPECT_EQ(bad[r], "") << "rank " << r;
}

TEST(VirtualTeam, SmBudget) {
  TW_SKIP_UNLESS_GPUS(1);
  int sms = 0;
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int P : {1, 2, 3, 4, 8}) {
    std::vector<int> got(P, -1);
    std::vector<int> virt(P, 0);
    tw::Comm::run_virtual(0, P, [&](tw::Comm& comm) {
      got[comm.rank()] = comm.sm_count();
      virt[comm.rank()] = comm.is_virtual() && comm.ranks_per_device() == P && comm.nccl() == nullptr &&
                          comm.all_lsa() && comm.lsa_size() == P;
    });
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(got[r], sms / P) << "P " << P << " rank " << r;
      EXPECT_TRUE(virt[r]) << "P " << P << " rank " << r;
    }
  }
}

TEST(VirtualTeam, WindowSlices) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = std::max(2, virtual_ranks());
  std::vector<uintptr_t> ptr(P);
  std::vector<tw::DevWindow> h(P);
  tw::Comm::run_virtual(0, P, [&](tw::Comm& comm) {
    tw::Window w = comm.alloc_window(3 << 20);
    ptr[comm.rank()] = reinterpret_cast<uintptr_t>(w.data());
    h[comm.rank()] = w.dev();
    EXPECT_EQ(w.bytes(), size_t(3) << 20);
    comm.barrier();
  });
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(h[r].lsa_base, h[0].lsa_base) << "one allocation";
    EXPECT_EQ(h[r].lsa_stride, size_t(3) << 20);
    EXPECT_EQ(ptr[r], reinterpret_cast<uintptr_t>(h[0].lsa_base) + r * h[0].lsa_stride) << "rank " << r;
  }
}

TEST(VirtualTeam, MismatchedWindowSizesFail) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = std::max(2, virtual_ranks());
  std::vector<int> refused(P, 0);
  EXPECT_TRUE(throws_tw(
      [&] {
        tw::Comm::run_virtual(0, P, [&](tw::Comm& comm) {
          try {
            tw::Window w = comm.alloc_window(comm.rank() == P - 1 ? (2 << 20) : (1 << 20));
          } catch (const tw::Error& e) {
            refused[comm.rank()] = e.code() == tw::Errc::kInvalidArgument;
            throw;
          }
        });
      },
      tw::Errc::kInvalidArgument, {"alloc_window", "1048576", "2097152"}));
  for (int r = 0; r < P; ++r) EXPECT_TRUE(refused[r]) << "rank " << r << " must fail too";
}

TEST(VirtualTeam, MissingRankTimesOut) {
  TW_SKIP_UNLESS_GPUS(1);
  ScopedEnv env("TILEWIRE_HOST_TIMEOUT_MS", "300");
  const int P = std::max(2, virtual_ranks());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(throws_tw(
      [&] {
        tw::Comm::run_virtual(0, P, [&](tw::Comm& comm) {
          if (comm.rank() == P - 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // misses the barrier
            return;
          }
          comm.barrier();
        });
      },
      tw::Errc::kTimeout, {"never arrived", "allreduce_host"}));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << "the bound is 300 ms";
}

TEST(VirtualTeam, FusedBeyondBudgetRefused) {
  TW_SKIP_UNLESS_SM90();
  const int P = std::max(2, virtual_ranks());
  std::vector<std::string> why(P);
  tw::Comm::run_virtual(0, P, [&](tw::Comm& comm) {
    Stream s;
    const int M = 256, N = 256, K = 128;
    DeviceBuffer A(M * K * 2), B(N * K * 2);
    tw::Window C = comm.alloc_window(size_t(M) * N * 2);
    tw::GemmAllReduceConfig cfg;
    cfg.path = tw::GemmAllReducePath::kFused;
    cfg.reserved_sms = comm.sm_count();  // nothing left of the budget for the GEMM
    tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), M, N, K, tw::DType::kBFloat16, tw::BLayout::kNK, nullptr};
    tw::Window ws = comm.alloc_window(tw::workspace_size(a, P, cfg));
    a.workspace = ws.data();
    poison(C.data(), C.bytes(), s);
    comm.sync(s);
    const tw::Status st = tw::can_implement(comm, a, cfg);
    why[comm.rank()] = st.ok ? "" : st.reason;
    EXPECT_TRUE(throws_tw([&] { tw::gemm_allreduce(comm, a, cfg, s); }, tw::Errc::kInvalidArgument, {"SM"}));
    comm.sync(s);
    const Bytes c = to_host(C.data(), C.bytes(), s);
    EXPECT_EQ(check_fill(c, 0, c.size(), kPoison, "C"), "") << "a refused call writes nothing";
    comm.barrier();
  });
  for (int r = 0; r < P; ++r) EXPECT_NE(why[r], "") << "rank " << r << ": can_implement must refuse";
}

TEST(VirtualTeam, ProtocolDisagreementFails) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = std::max(2, virtual_ranks());
  std::vector<tw::CommConfig> cfgs(P);
  cfgs[P - 1].oneshot_max_bytes = 64 << 10;  // the others: 0 (the environment's)
  std::vector<int> failed(P, 0);
  std::vector<std::string> why(P);
  // Creation fails on every rank, so fn never runs; run_virtual rethrows the first failure.
  EXPECT_TRUE(throws_tw([&] { tw::Comm::run_virtual(0, cfgs, [&](tw::Comm&) { failed[0] = -1; }); },
                        tw::Errc::kInvalidArgument,
                        {"disagree on the protocol", "CommConfig.oneshot_max_bytes", "rank 0 has '0'",
                         ("rank " + std::to_string(P - 1) + " has '65536'").c_str()}));
  EXPECT_EQ(failed[0], 0) << "no rank may run with a protocol its peers do not share";
}

TEST(VirtualTeam, WindowOutlivingItsComm) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = std::max(2, virtual_ranks());
  std::vector<tw::Window> kept(P);
  std::vector<int> was_valid(P, 0);
  tw::Comm::run_virtual(0, P, [&](tw::Comm& comm) {
    kept[comm.rank()] = comm.alloc_window(1 << 20);
    was_valid[comm.rank()] = kept[comm.rank()].valid() && kept[comm.rank()].data() != nullptr;
    comm.barrier();
  });  // every communicator is destroyed here, and with it the windows' memory
  for (int r = 0; r < P; ++r) {
    EXPECT_TRUE(was_valid[r]) << "rank " << r;
    EXPECT_FALSE(kept[r].valid()) << "rank " << r << ": its communicator is gone";
    EXPECT_EQ(kept[r].data(), nullptr) << "rank " << r;
    kept[r].reset();  // nothing to release: must not touch the destroyed communicator
  }
}

TEST(VirtualTeam, RejectedCallKeepsTheComm) {
  TW_SKIP_UNLESS_GPUS(1);
  const int P = team_size();
  const size_t count = 4099;
  const uint64_t seed = 0xBADA55;
  std::vector<std::string> wrong(P, "not run");
  const Bytes want = exact_sum(tw::DType::kFloat32, count, seed, P);
  run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    try {
      tw::Window scratch = comm.alloc_window(1 << 16);  // released while unwinding (collective)
      DeviceBuffer plain(64);
      tw::allreduce(comm, tw::AllReduceArgs{plain.data(), scratch.data(), 16, tw::DType::kFloat32}, s);
      ADD_FAILURE() << "a send outside every window must be refused";
    } catch (const tw::Error& e) {
      EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument) << e.what();
    }
    EXPECT_FALSE(comm.aborted()) << "rank " << r << ": a refused call wrote nothing and must not abort";
    tw::Window send = comm.alloc_window(count * 4), recv = comm.alloc_window(count * 4);
    fill(send.data(), tw::DType::kFloat32, count, Fill::kSmallInt, seed, r, s);
    poison(recv.data(), recv.bytes(), s);
    comm.sync(s);
    comm.barrier();
    tw::allreduce(comm, tw::AllReduceArgs{send.data(), recv.data(), count, tw::DType::kFloat32}, s);
    comm.sync(s);
    wrong[r] = compare_exact(to_host(recv.data(), count * 4, s), want, tw::DType::kFloat32, count);
    comm.barrier();
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

}  // namespace
