// Fused GEMM + all-reduce (ops/gemm_allreduce.hpp), one rank per visible GPU: against an fp64
// host reference of sum_r A_r * B_r, bit-identity across ranks, odd shapes, both partial
// precisions, both B layouts, poisoned outputs, repeated calls on one workspace (the call
// counter), bad input writes nothing, every algorithm (relay, exchange, owner), per-tile trace
// events, and a peer that never takes part ending in the bounded-wait diagnostic. Skipped without
// an sm_90 GPU.
//
// No kernel is instantiated here (the library's instantiations run): no compile cost.
#include <cuda_bf16.h>

#include <array>
#include <cmath>
#include <utility>
#include <string>
#include <vector>

#include "common.cuh"
#include "tilewire/ops/gemm_allreduce.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw_test::Bytes;
using tw_test::DeviceBuffer;
using tw_test::Fill;
using tw_test::Stream;

constexpr DType kT = DType::kBFloat16;
constexpr uint64_t kSeedA = 31, kSeedB = 47;


struct Shape {
  int M, N, K;
  BLayout b = BLayout::kNK;  // B_r as [N, K] or [K, N]
  std::string name() const {
    return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + (b == BLayout::kKN ? " B[K,N]" : "");
  }
};

std::vector<int> rows_to_check(int M) {
  std::vector<int> r;
  if (M <= 64) {
    for (int i = 0; i < M; ++i) r.push_back(i);
    return r;
  }
  for (int i : {0, 1, 127, 128, M / 2, M - 129, M - 128, M - 1})
    if (i >= 0 && i < M) r.push_back(i);
  for (int k = 0; k < 4; ++k) r.push_back((int)(tw_test::mix(77, 0, k) % (uint64_t)M));
  return r;
}

// "" when C (one rank's copy) matches the fp64 sum over ranks on the checked rows and holds no
// poison. Bound: each partial rounded to the partial type (2^-8 |p|, bf16; 0 for fp32), the final
// rounding (2^-8 |ref|), fp32 accumulation (K 2^-24 sum |a b|) per rank.
std::string check(const Shape& s, int P, const Bytes& c, bool bf16_partials) {
  for (size_t i = 0; i < size_t(s.M) * s.N; ++i)
    if (std::isnan(tw_test::from_bits(kT, tw_test::elem(c, kT, i))))
      return "C[" + std::to_string(i / s.N) + "," + std::to_string(i % s.N) + "] is NaN (never written?)";
  std::vector<Bytes> a(P), b(P);
  for (int q = 0; q < P; ++q) {
    a[q] = tw_test::host_inputs(Fill::kRandom, kT, size_t(s.M) * s.K, kSeedA, q);
    b[q] = tw_test::host_inputs(Fill::kRandom, kT, size_t(s.N) * s.K, kSeedB, q);
  }
  std::vector<double> arow(s.K);
  for (int m : rows_to_check(s.M))
    for (int n = 0; n < s.N; ++n) {
      double ref = 0, tol = 0;
      for (int q = 0; q < P; ++q) {
        double p = 0, mag = 0;
        for (int k = 0; k < s.K; ++k) {
          const double x = tw_test::from_bits(kT, tw_test::elem(a[q], kT, size_t(m) * s.K + k)) *
                           tw_test::from_bits(kT, tw_test::elem(b[q], kT, s.b == BLayout::kNK ? size_t(n) * s.K + k
                                                                                          : size_t(k) * s.N + n));
          p += x;
          mag += std::fabs(x);
        }
        ref += p;
        tol += s.K * std::ldexp(mag, -24) + (bf16_partials ? std::ldexp(std::fabs(p), -8) : 0.0);
      }
      tol += std::ldexp(std::fabs(ref), -8);
      const double got = tw_test::from_bits(kT, tw_test::elem(c, kT, size_t(m) * s.N + n));
      if (!(std::fabs(got - ref) <= tol))
        return "C[" + std::to_string(m) + "," + std::to_string(n) + "] = " + std::to_string(got) + ", reference " +
               std::to_string(ref) + " (tolerance " + std::to_string(tol) + ")";
    }
  return "";
}

// Per rank: inputs, C and workspace in windows (workspace zeroed once), `calls` calls, each with
// C poisoned first; every call's C must equal the first bit for bit. Returns C of the last call.
Bytes run_rank(tw::Comm& comm, const Shape& s, const tw::GemmAllReduceConfig& cfg, int calls) {
  const int r = comm.rank(), P = comm.nranks();
  Stream st;
  DeviceBuffer A(size_t(s.M) * s.K * 2), B(size_t(s.N) * s.K * 2);
  tw_test::fill(A.data(), kT, size_t(s.M) * s.K, Fill::kRandom, kSeedA, r, st);
  tw_test::fill(B.data(), kT, size_t(s.N) * s.K, Fill::kRandom, kSeedB, r, st);
  tw::Window C = comm.alloc_window(size_t(s.M) * s.N * 2);
  tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), s.M, s.N, s.K, kT, s.b, nullptr};
  tw::Window ws = comm.alloc_window(tw::workspace_size(a, P, cfg));
  a.workspace = ws.data();
  TW_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), st));
  TW_CUDA_CHECK(cudaStreamSynchronize(st));
  comm.barrier();  // every workspace is zero before any rank's first call
  const tw::Status ok = tw::can_implement(comm, a, cfg);
  EXPECT_TRUE(ok.ok) << ok.reason;
  Bytes first, last;
  for (int i = 0; i < calls && ok.ok; ++i) {
    tw_test::poison(C.data(), C.bytes(), st);
    tw::gemm_allreduce(comm, a, cfg, st);
    comm.sync(st);
    last = tw_test::to_host(C.data(), size_t(s.M) * s.N * 2, st);
    if (i == 0) first = last;
    else if (last != first) {
      ADD_FAILURE() << s.name() << ": call " << i << " on rank " << r << " differs from the first call";
      break;
    }
  }
  comm.barrier();  // no rank frees its windows while a peer may still store into them
  return last;
}

const char* algo_name(tw::GemmAllReduceAlgo a) {
  return a == tw::GemmAllReduceAlgo::kExchange ? "exchange" : a == tw::GemmAllReduceAlgo::kOwner ? "owner" : a == tw::GemmAllReduceAlgo::kRelay ? "relay" : "auto";
}

void run_shape(const Shape& s, const tw::GemmAllReduceConfig& cfg, int calls) {
  SCOPED_TRACE(s.name() + (cfg.partials == tw::PartialPrecision::kFloat32 ? " fp32 partials" : " bf16 partials") +
               " algo " + algo_name(cfg.algo));
  const int P = tw_test::gpu_count();
  std::vector<Bytes> got(P);
  tw::Comm::run_local({}, [&](tw::Comm& comm) { got[comm.rank()] = run_rank(comm, s, cfg, calls); });
  EXPECT_EQ(tw_test::compare_ranks(got, size_t(s.M) * s.N * 2), "") << "ranks are not bit-identical";
  EXPECT_EQ(check(s, P, got[0], cfg.partials == tw::PartialPrecision::kBFloat16), "");
}

TEST(GemmAllReduce, SmallShapes) {
  TW_SKIP_UNLESS_SM90();
  using A = tw::GemmAllReduceAlgo;
  using PP = tw::PartialPrecision;
  std::vector<std::pair<A, PP>> algos = {{A::kExchange, PP::kBFloat16}, {A::kOwner, PP::kBFloat16},
                                         {A::kOwner, PP::kFloat32}};
  if (tw_test::gpu_count() == 2) algos.insert(algos.begin(), {A::kRelay, PP::kBFloat16});  // relay: 2 ranks only
  for (auto [algo, p] : algos) {
    tw::GemmAllReduceConfig cfg;
    cfg.path = tw::GemmAllReducePath::kFused;
    cfg.algo = algo;
    cfg.partials = p;
    run_shape({128, 256, 64}, cfg, 1);
    run_shape({256, 512, 128}, cfg, 1);
    run_shape({1024, 2048, 512}, cfg, 1);
  }
}

TEST(GemmAllReduce, OddShapes) {
  TW_SKIP_UNLESS_SM90();
  std::vector<tw::GemmAllReduceAlgo> algos = {tw::GemmAllReduceAlgo::kExchange, tw::GemmAllReduceAlgo::kOwner};
  if (tw_test::gpu_count() == 2) algos.insert(algos.begin(), tw::GemmAllReduceAlgo::kRelay);
  for (tw::GemmAllReduceAlgo algo : algos) {
    tw::GemmAllReduceConfig cfg;
    cfg.path = tw::GemmAllReducePath::kFused;
    cfg.algo = algo;
    for (int M : {1, 7, 3000}) run_shape({M, 5144, 3584}, cfg, 1);
  }
}

// B as [K_local, N] (kKN): the fused kernels built for it (relay on 2 ranks, owner with both
// partial precisions) and the sequential path, against the same reference.
TEST(GemmAllReduce, BLayoutKN) {
  TW_SKIP_UNLESS_SM90();
  using A = tw::GemmAllReduceAlgo;
  using PP = tw::PartialPrecision;
  const std::pair<A, PP> algos[] = {{A::kAuto, PP::kBFloat16}, {A::kOwner, PP::kBFloat16}, {A::kOwner, PP::kFloat32}};
  for (auto [algo, p] : algos) {
    tw::GemmAllReduceConfig cfg;
    cfg.path = tw::GemmAllReducePath::kFused;
    cfg.algo = algo;
    cfg.partials = p;
    run_shape({1000, 1032, 520, BLayout::kKN}, cfg, 2);
    run_shape({7, 5144, 3584, BLayout::kKN}, cfg, 1);
  }
  tw::GemmAllReduceConfig seq;
  seq.path = tw::GemmAllReducePath::kSequential;
  run_shape({256, 512, 128, BLayout::kKN}, seq, 1);
}

// The sequential path (tw::gemm then tw::allreduce in place), forced and chosen by kAuto: same
// reference, same bit-identity.
TEST(GemmAllReduce, SequentialPath) {
  TW_SKIP_UNLESS_SM90();
  EXPECT_FALSE(tw::gemm_allreduce_prefers_fused(256, 512, 128, 2));
  EXPECT_TRUE(tw::gemm_allreduce_prefers_fused(8192, 8192, 4096, 2));
  for (tw::GemmAllReducePath path : {tw::GemmAllReducePath::kSequential, tw::GemmAllReducePath::kAuto}) {
    tw::GemmAllReduceConfig cfg;
    cfg.path = path;
    run_shape({256, 512, 128}, cfg, 2);
    run_shape({7, 5144, 3584}, cfg, 1);
  }
}

// Tracing on: every tile of every rank has each of its six events exactly once, in order
// (mma_start <= mma_end <= partial_leave; partials_seen <= reduce_done <= tile_landed), and C is
// still right. The ring is a raw device buffer here (the host tracer has its own tests).
TEST(GemmAllReduce, TraceEventsPerTile) {
  TW_SKIP_UNLESS_SM90();
  const Shape s{1000, 1032, 520};  // 8 x 5 tiles, the last row and column partial
  const int P = tw_test::gpu_count();
  const int tiles_m = (s.M + 127) / 128, tiles_n = (s.N + 255) / 256, T = tiles_m * tiles_n;
  const uint32_t cap = 6 * T + 2 * 1024;  // the op's layout: 6 per tile + 2 per CTA (grid <= 1024 CTAs)
  std::vector<std::vector<tw::trace::Event>> ev(P);
  std::vector<unsigned long long> counts(P);
  tw::Comm::run_local({}, [&](tw::Comm& comm) {
    const int r = comm.rank();
    DeviceBuffer events(cap * sizeof(tw::trace::Event)), count(sizeof(unsigned long long));
    TW_CUDA_CHECK(cudaMemset(count.data(), 0, sizeof(unsigned long long)));
    TW_CUDA_CHECK(cudaMemset(events.data(), 0, cap * sizeof(tw::trace::Event)));
    tw::GemmAllReduceConfig cfg;
    cfg.path = tw::GemmAllReducePath::kFused;
    cfg.trace.events = static_cast<tw::trace::Event*>(events.data());
    cfg.trace.count = static_cast<unsigned long long*>(count.data());
    cfg.trace.capacity = cap;
    const Bytes c = run_rank(comm, s, cfg, 1);
    EXPECT_EQ(check(s, P, c, true), "") << "rank " << r;
    TW_CUDA_CHECK(cudaMemcpy(&counts[r], count.data(), sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    ev[r].resize(std::min<unsigned long long>(counts[r], cap));
    TW_CUDA_CHECK(cudaMemcpy(ev[r].data(), events.data(), ev[r].size() * sizeof(tw::trace::Event),
                             cudaMemcpyDeviceToHost));
    // The fused op writes fixed slots (emit_at); slots it never wrote stay zero.
    std::erase_if(ev[r], [](const tw::trace::Event& e) { return e.t_ns == 0; });
  });
  using K = tw::trace::EventKind;
  for (int r = 0; r < P; ++r) {
    // Six events per tile, plus one kernel_start and one kernel_end per CTA that had a tile.
    int starts = 0, ends = 0;
    std::vector<std::array<uint64_t, 10>> t(T);
    std::vector<std::array<int, 10>> n(T);
    for (auto& a : n) a.fill(0);
    for (const auto& e : ev[r]) {
      if (e.kind == (uint8_t)K::kKernelStart || e.kind == (uint8_t)K::kKernelEnd) {
        (e.kind == (uint8_t)K::kKernelStart ? starts : ends) += 1;
        continue;
      }
      ASSERT_LT(e.id, (uint32_t)T);
      EXPECT_EQ(e.rank, r);
      t[e.id][e.kind] = e.t_ns;
      ++n[e.id][e.kind];
    }
    EXPECT_GT(starts, 0) << "rank " << r;
    EXPECT_EQ(starts, ends) << "rank " << r << ": a kernel_end for every CTA that started a tile";
    EXPECT_EQ(ev[r].size(), 6ull * T + starts + ends) << "rank " << r << ": nothing else recorded, nothing dropped";
    EXPECT_LE(counts[r], (unsigned long long)cap) << "rank " << r << ": the op's slot layout fits the ring";
    for (int id = 0; id < T; ++id) {
      for (K k : {K::kMmaStart, K::kMmaEnd, K::kPartialLeave, K::kPartialsSeen, K::kReduceDone, K::kTileLanded})
        EXPECT_EQ(n[id][(int)k], 1) << "rank " << r << " tile " << id << " event " << tw::trace::kind_name(k);
      const auto& x = t[id];
      EXPECT_LE(x[(int)K::kMmaStart], x[(int)K::kMmaEnd]) << "tile " << id;
      EXPECT_LE(x[(int)K::kMmaEnd], x[(int)K::kPartialLeave]) << "tile " << id;
      EXPECT_LE(x[(int)K::kPartialLeave], x[(int)K::kPartialsSeen]) << "tile " << id;
      EXPECT_LE(x[(int)K::kPartialsSeen], x[(int)K::kReduceDone]) << "tile " << id;
      EXPECT_LE(x[(int)K::kReduceDone], x[(int)K::kTileLanded]) << "tile " << id;
    }
  }
}

TEST(GemmAllReduce, ConfigsAndReservedSms) {
  TW_SKIP_UNLESS_SM90();
  for (tw::GemmRaster r : {tw::GemmRaster::kAlongM, tw::GemmRaster::kAlongN})
    for (int reserved : {0, 100}) {
      tw::GemmAllReduceConfig cfg;
      cfg.path = tw::GemmAllReducePath::kFused;
      cfg.raster = r, cfg.reserved_sms = reserved, cfg.swizzle = 2;
      run_shape({1000, 1032, 520}, cfg, 2);
    }
}

TEST(GemmAllReduce, RepeatedCallsDoNotDrift) {
  TW_SKIP_UNLESS_SM90();
  tw::GemmAllReduceConfig cfg;
  cfg.path = tw::GemmAllReducePath::kFused;
  run_shape({384, 768, 256}, cfg, 1000);
}

TEST(GemmAllReduce, BadInputWritesNothing) {
  TW_SKIP_UNLESS_SM90();
  tw::Comm::run_local({}, [&](tw::Comm& comm) {
    Stream st;
    const Shape s{64, 64, 64};
    DeviceBuffer A(s.M * s.K * 2), B(s.N * s.K * 2), plain_ws(1 << 20);
    tw::Window C = comm.alloc_window(size_t(s.M) * s.N * 2);
    tw_test::poison(C.data(), C.bytes(), st);
    tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), s.M, s.N, s.K, kT, BLayout::kNK, plain_ws.data()};
    // Workspace in plain cudaMalloc memory: not a window.
    EXPECT_TRUE(tw_test::throws_tw([&] { tw::gemm_allreduce(comm, a, {}, st); }, tw::Errc::kInvalidArgument,
                                   {"gemm_allreduce", "workspace"}));
    a.workspace = nullptr;
    EXPECT_TRUE(tw_test::throws_tw([&] { tw::gemm_allreduce(comm, a, {}, st); }, tw::Errc::kInvalidArgument,
                                   {"workspace is null"}));
    a.K_local = 60;
    EXPECT_TRUE(tw_test::throws_tw([&] { tw::gemm_allreduce(comm, a, {}, st); }, tw::Errc::kInvalidArgument,
                                   {"K=60"}));
    const Bytes c = tw_test::to_host(C.data(), C.bytes(), st);
    EXPECT_EQ(tw_test::check_fill(c, 0, c.size(), tw_test::kPoison, "C"), "");
    comm.barrier();
  });
}

}  // namespace
