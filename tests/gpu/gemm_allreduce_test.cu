// Fused GEMM + all-reduce (ops/gemm_allreduce.hpp) on the test team (run_team: one rank per GPU,
// or TILEWIRE_TEST_VIRTUAL=P ranks on GPU 0): every element of C against an independent GPU
// reference of sum_r A_r * B_r (gemm_ref.cuh), bit-identity across ranks, odd shapes and the
// 8192 x 8192 x 4096 acceptance shape, both partial precisions, both B layouts, poisoned outputs,
// repeated calls on one workspace (the call counter), bad input writes nothing, every algorithm
// built for the team size and dtype (fused_algos(), checked against what the library accepts),
// per-tile trace events, and fp16 (the owner algorithm, both paths). (A peer that never takes
// part: timeout_test.cu.) Skipped without an sm_90 GPU.
//
// The only kernels instantiated here are gemm_ref.cuh's plain-CUDA reference and check (the
// library's instantiations run): little compile cost.
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "common.cuh"
#include "gemm_allreduce_cases.hpp"
#include "gemm_ref.cuh"
#include "ops/gemm_allreduce/plan.hpp"  // resolve_algo: the algorithm kAuto runs (the tolerance's hops)
#include "tilewire/ops/gemm_allreduce.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using tw_test::Bytes;
using tw_test::DeviceBuffer;
using tw_test::Fill;
using tw_test::GemmReference;
using tw_test::Stream;
using Algo = tw::GemmAllReduceAlgo;
using PP = tw::PartialPrecision;
using tw_test::AlgoCase;
using tw_test::fused_algos;

constexpr DType kT = DType::kBFloat16;
constexpr uint64_t kSeedA = 31, kSeedB = 47;

struct Shape {
  int M, N, K;
  BLayout b = BLayout::kNK;  // B_r as [N, K] or [K, N]
  DType t = kT;              // A, B and C: bf16 or fp16
  std::string name() const {
    return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
           (b == BLayout::kKN ? " B[K,N]" : "") + (t == DType::kFloat16 ? " fp16" : "");
  }
};

tw::GemmAllReduceConfig fused(AlgoCase c) {
  tw::GemmAllReduceConfig cfg;
  cfg.path = tw::GemmAllReducePath::kFused;
  cfg.algo = c.algo;
  cfg.partials = c.partials;
  return cfg;
}

const char* algo_name(Algo a) {
  return a == Algo::kExchange ? "exchange" : a == Algo::kOwner ? "owner" : a == Algo::kRelay ? "relay" : "auto";
}

// Per rank: inputs, C and workspace in windows (workspace zeroed once), `calls` calls, each with
// C poisoned first; every call's C must equal the first bit for bit. Returns C of the last call
// (empty when the call cannot be made).
Bytes run_rank(tw::Comm& comm, const Shape& s, const tw::GemmAllReduceConfig& cfg, int calls) {
  const int r = comm.rank(), P = comm.nranks();
  Stream st;
  DeviceBuffer A(size_t(s.M) * s.K * 2), B(size_t(s.N) * s.K * 2);  // 2 bytes per element: bf16 and fp16
  tw_test::fill(A.data(), s.t, size_t(s.M) * s.K, Fill::kRandom, kSeedA, r, st);
  tw_test::fill(B.data(), s.t, size_t(s.N) * s.K, Fill::kRandom, kSeedB, r, st);
  tw::Window C = comm.alloc_window(size_t(s.M) * s.N * 2);
  tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), s.M, s.N, s.K, s.t, s.b, nullptr};
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
    // Every rank's copies (the last call's C to the host, this poison) are done before any rank's
    // next fused kernel waits for its peers: the ranks of a virtual team share the device, and
    // compute-sanitizer orders a copy behind a kernel running on another stream, so a peer's copy
    // queued behind this rank's waiting kernel would never let its own kernel start.
    comm.sync(st);
    comm.barrier();
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

// Once the team is gone (no kernel of it can still run on GPU 0): every rank's C bit-identical to
// rank 0's, and rank 0's C, every element, within tolerance of the reference (gemm_ref.cuh).
// partials16: 2-byte partials (PartialPrecision::kBFloat16: in C's dtype).
void expect_correct(GemmReference& ref, const Shape& s, const std::vector<Bytes>& got, bool partials16, int hops = 1) {
  const size_t bytes = size_t(s.M) * s.N * 2;
  for (size_t r = 0; r < got.size(); ++r)
    if (got[r].size() != bytes) {
      ADD_FAILURE() << "rank " << r << " has no C (its call was not made)";
      return;
    }
  EXPECT_EQ(tw_test::compare_ranks(got, bytes), "") << "ranks are not bit-identical";
  ref.prepare({s.M, s.N, s.K, s.b, (int)got.size(), kSeedA, kSeedB, s.t});
  EXPECT_EQ(ref.check(got[0], partials16, hops), "");
}

const char* path_name(tw::GemmAllReducePath p) {
  return p == tw::GemmAllReducePath::kFused ? "fused" : p == tw::GemmAllReducePath::kSequential ? "sequential" : "auto";
}

void run_shape(GemmReference& ref, const Shape& s, const tw::GemmAllReduceConfig& cfg, int calls) {
  const char* partials = cfg.partials == PP::kFloat32 ? " fp32 partials"
                         : s.t == DType::kFloat16     ? " fp16 partials"
                                                      : " bf16 partials";
  SCOPED_TRACE(s.name() + partials + " algo " + algo_name(cfg.algo) + " path " + path_name(cfg.path) + " on " +
               std::to_string(tw_test::team_size()) + " ranks");
  std::vector<Bytes> got(tw_test::team_size());
  tw_test::run_team([&](tw::Comm& comm) { got[comm.rank()] = run_rank(comm, s, cfg, calls); });
  const int P = tw_test::team_size();
  expect_correct(ref, s, got, cfg.partials == PP::kBFloat16,
                 tw_test::partial_hops(tw::gemm_allreduce_impl::resolve_algo(P, cfg, s.b, s.t, s.M), P));
}

TEST(GemmAllReduce, SmallShapes) {
  TW_SKIP_UNLESS_SM90();
  GemmReference ref;
  for (const Shape& s : {Shape{128, 256, 64}, Shape{256, 512, 128}, Shape{1024, 2048, 512}})
    for (AlgoCase c : fused_algos(tw_test::team_size(), BLayout::kNK)) run_shape(ref, s, fused(c), 1);
}

TEST(GemmAllReduce, OddShapes) {
  TW_SKIP_UNLESS_SM90();
  GemmReference ref;
  for (int M : {1, 7, 3000})
    for (AlgoCase c : fused_algos(tw_test::team_size(), BLayout::kNK)) run_shape(ref, {M, 5144, 3584}, fused(c), 1);
}

// The acceptance shape 8192x8192x4096, every algorithm built for the team, every element of C checked.
TEST(GemmAllReduce, AcceptanceShape) {
  TW_SKIP_UNLESS_SM90();
  const Shape s{8192, 8192, 4096};
  if (size_t(s.M) * s.N > tw_test::max_test_count()) GTEST_SKIP() << "C larger than TW_TEST_MAX_COUNT";
  GemmReference ref;
  for (AlgoCase c : fused_algos(tw_test::team_size(), BLayout::kNK)) run_shape(ref, s, fused(c), 1);
}

// B as [K_local, N] (kKN): the fused kernels built for it (kAuto: relay on 2 ranks, owner
// otherwise; owner with both partial precisions) and the sequential path, against the same reference.
TEST(GemmAllReduce, BLayoutKN) {
  TW_SKIP_UNLESS_SM90();
  GemmReference ref;
  const AlgoCase algos[] = {{Algo::kAuto, PP::kBFloat16}, {Algo::kOwner, PP::kBFloat16}, {Algo::kOwner, PP::kFloat32}};
  for (const Shape& s : {Shape{1000, 1032, 520, BLayout::kKN}, Shape{7, 5144, 3584, BLayout::kKN}})
    for (AlgoCase c : algos) run_shape(ref, s, fused(c), s.M == 1000 ? 2 : 1);
  tw::GemmAllReduceConfig seq;
  seq.path = tw::GemmAllReducePath::kSequential;
  run_shape(ref, {256, 512, 128, BLayout::kKN}, seq, 1);
}

// The sequential path (tw::gemm then tw::allreduce in place), forced and chosen by kAuto (at
// M = 512: above the decode path's M <= 256, below where the relay pays), and kAuto's decode
// path at M <= 256 (the plain GEMM, then the all-reduce in place): same reference, same
// bit-identity.
TEST(GemmAllReduce, SequentialPath) {
  TW_SKIP_UNLESS_SM90();
  EXPECT_FALSE(tw::gemm_allreduce_prefers_fused(512, 1032, 128, 2));
  EXPECT_TRUE(tw::gemm_allreduce_prefers_fused(256, 512, 128, 2));  // the decode path saves a launch
  EXPECT_TRUE(tw::gemm_allreduce_prefers_fused(8192, 8192, 4096, 2));
  GemmReference ref;
  for (const Shape& s : {Shape{512, 1032, 128}, Shape{256, 512, 128}, Shape{7, 5144, 3584}})
    for (tw::GemmAllReducePath path : {tw::GemmAllReducePath::kSequential, tw::GemmAllReducePath::kAuto}) {
      tw::GemmAllReduceConfig cfg;
      cfg.path = path;
      run_shape(ref, s, cfg, s.M == 256 ? 2 : 1);
    }
}

// fp16 A, B and C: the owner algorithm (what kAuto picks for fp16, and kOwner) with fp16 and fp32
// partials, both B layouts, odd shapes (a partial last tile row and column; 8192 x 1024 x 512: 64
// tile rows, 4 tile columns), and the sequential path (cuBLASLt or tw::gemm, then tw::allreduce
// in fp16), every element against the fp16 reference; the 1000 x 1032 calls twice on one
// workspace. P K_local stays within what fp16's range holds (gemm_ref.cuh).
TEST(GemmAllReduce, HalfPrecision) {
  TW_SKIP_UNLESS_SM90();
  GemmReference ref;
  const AlgoCase algos[] = {{Algo::kAuto, PP::kBFloat16},
                            {Algo::kAuto, PP::kFloat32},
                            {Algo::kOwner, PP::kBFloat16},
                            {Algo::kOwner, PP::kFloat32}};
  for (BLayout b : {BLayout::kNK, BLayout::kKN})
    for (const Shape& s : {Shape{1000, 1032, 520, b, DType::kFloat16}, Shape{8192, 1024, 512, b, DType::kFloat16}}) {
      const int calls = s.M == 1000 ? 2 : 1;
      for (AlgoCase c : algos) run_shape(ref, s, fused(c), calls);
      // The sequential path (its partial is fp16: checked as 2-byte partials), forced and as
      // kAuto's path rule picks it (fused for M = 8192, sequential for M = 1000).
      for (tw::GemmAllReducePath path : {tw::GemmAllReducePath::kSequential, tw::GemmAllReducePath::kAuto}) {
        tw::GemmAllReduceConfig cfg;
        cfg.path = path;
        run_shape(ref, s, cfg, calls);
      }
    }
}

// The owner kernel's decode tile (128 x 64, no cluster; plan.hpp owner_tile_is_decode) at
// M <= 256: bf16 and fp16, both partial precisions, both B layouts, a partial last tile column
// (N = 5144 = 80 x 64 + 24; N = 1032 = 16 x 64 + 8) and row, two calls per workspace. Then kAuto
// at M <= 256 with 2-byte partials, which on 2 ranks or more runs the plain GEMM into C and then
// the in-place all-reduce of decode.cu (the same roundings as the owner kernel: each partial
// once, the sum once), at one rank the GEMM alone: every rank's C bitwise the same, and the
// same on both calls. (Alternating with the 128 x 256 layouts on one workspace:
// gemm_allreduce_reuse_test.cu.)
TEST(GemmAllReduce, OwnerDecodeTile) {
  TW_SKIP_UNLESS_SM90();
  GemmReference ref;
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    for (PP pp : {PP::kBFloat16, PP::kFloat32})
      for (const Shape& s : {Shape{1, 5144, 520, BLayout::kNK, t}, Shape{100, 8192, 256, BLayout::kNK, t},
                             Shape{256, 5144, 520, BLayout::kNK, t}, Shape{1, 5144, 520, BLayout::kKN, t},
                             Shape{200, 1032, 264, BLayout::kKN, t}})
        run_shape(ref, s, fused({Algo::kOwner, pp}), 2);
    for (const Shape& s : {Shape{128, 8192, 256, BLayout::kNK, t}, Shape{64, 1032, 520, BLayout::kKN, t},
                           Shape{1, 5144, 520, BLayout::kNK, t}, Shape{200, 1032, 264, BLayout::kKN, t}})
      run_shape(ref, s, fused({Algo::kAuto, PP::kBFloat16}), 2);
  }
}

// Tracing on, for each kernel that records per-tile events (exchange; relay on 2 ranks; owner
// records none): every tile of every rank has each of its six events exactly once, in order
// (mma_start <= mma_end <= partial_leave; partials_seen <= reduce_done <= tile_landed), and C is
// still right. The ring is a raw device buffer here (the host tracer has its own tests).
TEST(GemmAllReduce, TraceEventsPerTile) {
  TW_SKIP_UNLESS_SM90();
  const Shape s{1000, 1032, 520};  // 8 x 5 tiles, the last row and column partial
  const int P = tw_test::team_size();
  const int tiles_m = (s.M + 127) / 128, tiles_n = (s.N + 255) / 256, T = tiles_m * tiles_n;
  const uint32_t cap = 6 * T + 2 * 1024;  // the op's layout: 6 per tile + 2 per CTA (grid <= 1024 CTAs)
  std::vector<Algo> algos = {Algo::kExchange};
  if (P >= 2) algos.push_back(Algo::kRelay);
  GemmReference ref;
  for (Algo algo : algos) {
    SCOPED_TRACE(std::string("algo ") + algo_name(algo) + " on " + std::to_string(P) + " ranks");
    std::vector<std::vector<tw::trace::Event>> ev(P);
    std::vector<unsigned long long> counts(P);
    std::vector<Bytes> got(P);
    tw_test::run_team([&](tw::Comm& comm) {
      const int r = comm.rank();
      Stream st;
      DeviceBuffer events(cap * sizeof(tw::trace::Event)), count(sizeof(unsigned long long));
      TW_CUDA_CHECK(cudaMemsetAsync(count.data(), 0, sizeof(unsigned long long), st));
      TW_CUDA_CHECK(cudaMemsetAsync(events.data(), 0, cap * sizeof(tw::trace::Event), st));
      TW_CUDA_CHECK(cudaStreamSynchronize(st));
      tw::GemmAllReduceConfig cfg;
      cfg.path = tw::GemmAllReducePath::kFused;
      cfg.algo = algo;
      cfg.trace.events = static_cast<tw::trace::Event*>(events.data());
      cfg.trace.count = static_cast<unsigned long long*>(count.data());
      cfg.trace.capacity = cap;
      got[r] = run_rank(comm, s, cfg, 1);
      TW_CUDA_CHECK(cudaMemcpyAsync(&counts[r], count.data(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, st));
      TW_CUDA_CHECK(cudaStreamSynchronize(st));
      ev[r].resize(std::min<unsigned long long>(counts[r], cap));
      TW_CUDA_CHECK(cudaMemcpyAsync(ev[r].data(), events.data(), ev[r].size() * sizeof(tw::trace::Event),
                                    cudaMemcpyDeviceToHost, st));
      TW_CUDA_CHECK(cudaStreamSynchronize(st));
      // The fused op writes fixed slots (emit_at); slots it never wrote stay zero.
      std::erase_if(ev[r], [](const tw::trace::Event& e) { return e.t_ns == 0; });
    });
    expect_correct(ref, s, got, true, tw_test::partial_hops(algo, P));
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
}

// Both rasters, and most of the rank's SM budget reserved (99 of 132 SMs with one rank per
// H200; a virtual team splits the GPU's SMs P ways, Comm::sm_count()).
TEST(GemmAllReduce, ConfigsAndReservedSms) {
  TW_SKIP_UNLESS_SM90();
  int budget = 0;
  tw_test::run_team([&](tw::Comm& comm) {
    if (comm.rank() == 0) budget = comm.sm_count();
  });
  const int most = std::max(0, budget - std::max(2, budget / 4));  // leaves >= one cluster of 2
  GemmReference ref;
  for (tw::GemmRaster r : {tw::GemmRaster::kAlongM, tw::GemmRaster::kAlongN})
    for (int reserved : {0, most}) {
      tw::GemmAllReduceConfig cfg;
      cfg.path = tw::GemmAllReducePath::kFused;
      cfg.raster = r, cfg.reserved_sms = reserved, cfg.swizzle = 2;
      run_shape(ref, {1000, 1032, 520}, cfg, 2);
    }
}

// 1000 calls on one workspace per algorithm: each bit-identical to the first (the call counter and
// the flags' tags advance without drift), the last checked against the reference.
TEST(GemmAllReduce, RepeatedCallsDoNotDrift) {
  TW_SKIP_UNLESS_SM90();
  GemmReference ref;
  for (AlgoCase c : fused_algos(tw_test::team_size(), BLayout::kNK)) run_shape(ref, {384, 768, 256}, fused(c), 1000);
}

// What fused_algos() leaves out, the library refuses with a reason; what it lists (and kAuto),
// can_implement accepts, for both B layouts and both dtypes (bf16, fp16), on this team's size.
TEST(GemmAllReduce, AlgorithmsPerTeamSize) {
  TW_SKIP_UNLESS_SM90();
  tw_test::run_team([&](tw::Comm& comm) {
    const int P = comm.nranks();
    const Shape s{256, 512, 128};
    DeviceBuffer A(size_t(s.M) * s.K * 2), B(size_t(s.N) * s.K * 2);
    tw::Window C = comm.alloc_window(size_t(s.M) * s.N * 2);
    tw::GemmAllReduceArgs a{A.data(), B.data(), C.data(), s.M, s.N, s.K, kT, BLayout::kNK, nullptr};
    struct Kase {
      BLayout b;
      DType t;
      tw::GemmAllReduceConfig cfg;
    };
    std::vector<Kase> cases;
    size_t ws_bytes = 0;
    for (DType t : {DType::kBFloat16, DType::kFloat16})
      for (BLayout b : {BLayout::kNK, BLayout::kKN})
        for (Algo algo : {Algo::kAuto, Algo::kExchange, Algo::kOwner, Algo::kRelay})
          for (PP p : {PP::kBFloat16, PP::kFloat32}) {
            a.b_layout = b, a.dtype = t;
            cases.push_back({b, t, fused({algo, p})});
            ws_bytes = std::max(ws_bytes, tw::workspace_size(a, P, cases.back().cfg));
          }
    tw::Window ws = comm.alloc_window(ws_bytes);
    a.workspace = ws.data();
    for (const Kase& kase : cases) {
      const BLayout b = kase.b;
      const tw::GemmAllReduceConfig& cfg = kase.cfg;
      a.b_layout = b, a.dtype = kase.t;
      const std::vector<AlgoCase> built = fused_algos(P, b, kase.t);
      const bool listed = cfg.algo == Algo::kAuto || std::any_of(built.begin(), built.end(), [&](AlgoCase c) {
                            return c.algo == cfg.algo && c.partials == cfg.partials;
                          });
      const tw::Status st = tw::can_implement(comm, a, cfg);
      EXPECT_EQ(st.ok, listed) << tw::dtype_name(kase.t) << " " << algo_name(cfg.algo)
                               << (cfg.partials == PP::kFloat32 ? " fp32" : " 2-byte") << " partials, B "
                               << (b == BLayout::kKN ? "[K,N]" : "[N,K]") << ", " << P
                               << " ranks: " << (st.ok ? "accepted" : st.reason);
      if (!st.ok) EXPECT_NE(st.reason.find("gemm_allreduce: "), std::string::npos) << st.reason;
    }
    comm.barrier();
  });
}

TEST(GemmAllReduce, BadInputWritesNothing) {
  TW_SKIP_UNLESS_SM90();
  tw_test::run_team([&](tw::Comm& comm) {
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
    // fp16 with the relay or the exchange algorithm (bf16 kernels), on an otherwise valid call:
    // refused with the reason, whatever the path.
    a.K_local = s.K, a.dtype = DType::kFloat16;
    tw::GemmAllReduceConfig relay, exchange;
    relay.algo = Algo::kRelay, exchange.algo = Algo::kExchange;
    tw::Window ws = comm.alloc_window(
        std::max(tw::workspace_size(a, comm.nranks(), relay), tw::workspace_size(a, comm.nranks(), exchange)));
    a.workspace = ws.data();
    for (tw::GemmAllReducePath path :
         {tw::GemmAllReducePath::kFused, tw::GemmAllReducePath::kSequential, tw::GemmAllReducePath::kAuto}) {
      relay.path = exchange.path = path;
      EXPECT_FALSE(tw::can_implement(comm, a, relay).ok);
      EXPECT_TRUE(tw_test::throws_tw([&] { tw::gemm_allreduce(comm, a, relay, st); }, tw::Errc::kInvalidArgument,
                                     {"relay algorithm is built for bf16 only", "kOwner"}));
      EXPECT_TRUE(tw_test::throws_tw([&] { tw::gemm_allreduce(comm, a, exchange, st); }, tw::Errc::kInvalidArgument,
                                     {"exchange algorithm is built for bf16 only", "kOwner"}));
    }
    TW_CUDA_CHECK(cudaStreamSynchronize(st));
    const Bytes c = tw_test::to_host(C.data(), C.bytes(), st);
    EXPECT_EQ(tw_test::check_fill(c, 0, c.size(), tw_test::kPoison, "C"), "");
    comm.barrier();
  });
}

}  // namespace
