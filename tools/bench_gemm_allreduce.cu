// tools/bench_gemm_allreduce.cu — `tilewire bench gemm-allreduce`: the fused GEMM + all-reduce
// (ops/gemm_allreduce.hpp) against the unfused ways to get the same C, all in the same run.
//
//   C [M, N] = sum over ranks r of A_r [M, K_local] * B_r^T,  B_r [N, K_local] (kNK), bf16, on every rank
//
// One process, one thread per local GPU (tw::Comm::run_local), or with --virtual P, P virtual ranks
// on GPU 0 (tw::Comm::run_virtual: no NCCL communicator, so (b) (d) (f) and the overlap are n/a;
// (a) (c) (e) and the check run as on P GPUs; the times are P ranks sharing one GPU, not NVLink
// figures). For every shape, every rank times
//
//   (a) gemm       cuBLASLt C_r = A_r B_r^T into C (bf16)                          the lower bound
//   (b) gemm+nccl  cuBLASLt, then ncclAllReduce(sum, bf16) in place on C           C: plain cudaMalloc
//   (c) gemm+tw    cuBLASLt into a window, then tw::allreduce out of place into a second window
//                  (out of place: tw's two-rank push variant needs it)
//   (d) chunked    M in c row chunks (multiples of 128 rows, the last one shorter): chunk i's GEMM on
//                  s1, an event, chunk i's ncclAllReduce on s2, so all-reduce i overlaps GEMM i+1;
//                  s1 waits for s2 at the end of every iteration. Every c of --chunks that splits M
//                  into exactly c chunks is timed; the best is reported
//   (e) fused      tw::gemm_allreduce (C and workspace in windows; workspace zeroed per shape)
//   (f) nccl-ar    ncclAllReduce of the M*N bf16 C alone, in place: T_ar of the overlap efficiency
//
//   each:  >= 1 untimed iteration, then R x { gate; ev0; `iters` iterations; ev1 } on s1 (bench_gate.hpp:
//          all GPUs start every repeat together, launch skew stays out) -> per iteration (ev1 - ev0) /
//          iters, median over R repeats; rank 0 reports the slowest rank's median.
//   inputs: (A_j, B_j), j < sets, per rank, seeded uniform bf16 in [-1, 1) (different per rank, set
//          and operand), rotated call by call; sets >= 2 and > 2x L2 in all (capped so that a GPU
//          holds < 40 GiB), so no GEMM finds its operands in L2. Every variant walks the same
//          rotation from set 0.
//
// Correctness, never skipped (only when (e) cannot run: n/a), after the timed part, on set 0; the
// same on both backends (no NCCL in it):
//   p_r = bf16(A_r B_r^T)                         cuBLASLt, into rank r's window tw_c
//   C   = (e) once, C and 256 guard bytes after it poisoned with 0xFF bytes first (NaN)
//   then (every rank's p_r in place: host barrier) the check kernel reads all P partials at
//   element i through the LSA team (tw::dev::lsa_ptr) and sums them in fp32, in rank order:
//   ref = sum_r p_r,  mag = sum_r |p_r|           per element: the exact sum, and the partials' size
//   #wrong = #{ i : !(|C - ref| <= (P + 4) 2^-8 mag + P K_local 2^-24) }   (NaN is wrong)
//            + guard bytes no longer 0xFF (an overrun)
// Why this bound: ref and C differ by roundings only. ref rounds each partial to bf16 (cuBLASLt's
// output) and sums in fp32 (<= P 2^-24 mag); the fused op rounds each partial to the partial type
// and the sum once (<= 2^-8 mag); cuBLASLt's and tilewire's fp32 partials differ in accumulation
// order (<= K 2^-24 each, |a b| < 1), so a partial may round one bf16 ulp (2^-7 |p_r|) apart.
// Total <= 3 2^-8 mag + P K 2^-24. The bound was set when ref was cuBLASLt + ncclAllReduce, whose
// running sums add up to P - 1 bf16 roundings of their own ((P + 2) 2^-8 mag in all, + 2 margin);
// it is kept, so the check is no looser than it was. Simulated then on Gaussian partials (10^7
// elements each, P = 2, 4, 8, K_local 4096 and 14336, both partial types) the worst element
// reached 0.62 of the bound, while a missing tile (C = 0) was flagged at 92-99% of its elements
// and a missing rank's partial at 78-99%. (The simpler 2^-6 |ref| + 2^-6 0.1 sqrt(K_total)
// flagged 3e-6..5e-3 of correct elements: up to 10^5 per 8192 x 8192 C.)
// identical: a position-sensitive checksum of C (sum of mix64(bits, i)) on every rank, compared.
//
// Measured on nvidia-h200-x2: docs/gemm_allreduce.md names the result files.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <utility>

#include "bench_args.hpp"  // median
#include "bench_gate.hpp"
#include "bench_gemm_allreduce.hpp"
#include "bench_raii.hpp"
#include "commands.hpp"
#include "ops/gemm/cublaslt.hpp"
#include "ops/gemm/team_gemm.hpp"
#include "testing/measurement.hpp"  // testing::set_untraced_kernels
#include "tilewire/device/peer.cuh"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/trace/trace.hpp"

namespace tw::cli {
using lt::LtHandle;
using lt::LtMatmul;
namespace {

// One event stamped with the GPU's %globaltimer (the sequential baseline's op-level trace).
__global__ void stamp_event(trace::Ring r, trace::EventKind kind, uint32_t id) {
  trace::emit(r, kind, id, ptx::globaltimer());
}


using namespace gemm_ar;

constexpr int kThreads = 256;                // fill / check kernels
constexpr size_t kGuardBytes = 256;          // poisoned bytes past the fused C, checked for overruns
constexpr size_t kRankBudget = 40ull << 30;  // device bytes per GPU the bench plans for
constexpr int kMaxSets = 64;
constexpr size_t kLtWorkspace = LtMatmul::kDefaultWorkspace;

#include "bench_gemm_allreduce_device.cuh"  // inputs, the check kernel, RAII (one TU only)

// Everything one rank owns for the whole sweep, sized for the largest shape. Lives in rank_entry's
// frame, so the comm can be aborted before the windows are released when a rank throws (release
// is collective; peers may be gone). Members are destroyed in reverse: windows first, in the same
// order on every rank.
struct RankState {
  Stream s1, s2;                                   // s1: every op in issue order; s2: (d)'s all-reduces
  Event ev0{cudaEventDefault}, ev1{cudaEventDefault}, join{cudaEventDisableTiming};
  std::vector<Event> chunk_done;                   // (d): chunk i's GEMM is in C (s1 -> s2)
  LtHandle lt;
  DeviceBuffer nc_c, lt_ws, result;                // (a) (b) (d) (f) C; cuBLASLt workspace; CheckResult
  Window tw_c, tw_out, fu_c, fu_ws;                // (c) GEMM out, (c) all-reduce out, (e) C, (e) workspace
  std::unique_ptr<CheckResult, decltype(&cudaFreeHost)> host{nullptr, &cudaFreeHost};  // pinned
  uint32_t gate_gen = 0;                           // generations of the start gate used so far
};

// (d) with c chunks: chunk i = rows [i * rows, min(M, (i + 1) * rows)).
struct Split {
  int c = 0, rows = 0, tail = 0;  // tail: rows of the last chunk (<= rows)
  bool ok = false;                // M splits into exactly c chunks of whole 128-row multiples (but the last)
  std::unique_ptr<LtMatmul> body, last;  // (rows, N, K) for chunks before the last; (tail, N, K) if it differs
  const LtMatmul& plan(int i) const { return (i + 1 < c || !last) ? *body : *last; }
  int rows_of(int i) const { return i + 1 < c ? rows : tail; }
};

Split split_rows(int M, int c) {
  Split s;
  s.c = c;
  s.rows = (M + c - 1) / c;
  s.rows = (s.rows + 127) / 128 * 128;
  s.ok = (M + s.rows - 1) / s.rows == c;
  s.tail = M - (c - 1) * s.rows;
  return s;
}

// One shape on one rank: the rotation sets, the cuBLASLt plans, what may run.
struct ShapeState {
  Shape s;
  int sets = 0;
  std::vector<DeviceBuffer> a, b;  // a[j]: A_r [M, K_local], b[j]: B_r [N, K_local]
  std::unique_ptr<LtMatmul> full;  // (M, N, K_local)
  std::vector<Split> splits;       // one per --chunks entry
  bool tw_ok = false, fused_ok = false;
  std::string note;                // why (c) or (e) is n/a
  size_t count() const { return (size_t)s.m * s.n; }
};

// What rank r reports for one shape (NaN: did not run).
struct RankSample {
  double sec[kVariants];                 // seconds per iteration; kChunked unused
  double chunk_sec[kMaxChunkOptions];    // (d), per --chunks entry
  bool checked = false, gate_expired = false;
  uint64_t wrong = 0, checksum = 0;
  RankSample() {
    std::fill(std::begin(sec), std::end(sec), NAN);
    std::fill(std::begin(chunk_sec), std::end(chunk_sec), NAN);
  }
};

// Shared by the rank threads: samples[r] and votes[r] are written by rank r and read between
// barriers; rows by rank 0 only.
struct Shared {
  explicit Shared(int P) : barrier(P), samples(P), votes(P) {}
  // The first failure of any rank, kept before the barrier is broken: the peers' "another rank
  // failed" errors that follow must not be what the user reads.
  void fail(std::exception_ptr e) noexcept {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!first_error) first_error = e;
    }
    barrier.break_all();
  }
  HostBarrier barrier;
  StartGate gate;
  std::mutex mu;
  std::vector<RankSample> samples;
  std::vector<char> votes;
  std::vector<Row> rows;
  RunInfo info;
  std::exception_ptr first_error;
  std::string trace_json;                               // --trace: the JSON section (rank 0)
};

// note += "; " + what
void add_note(std::string& note, const std::string& what) {
  if (!note.empty()) note += "; ";
  note += what;
}

size_t grid_for(size_t n, int sms) {
  return std::max<size_t>(1, std::min<size_t>((n + kThreads - 1) / kThreads, (size_t)sms * 8));
}

// The slowest rank's value; NaN when any rank has none.
template <class F> double slowest(const std::vector<RankSample>& v, F&& get) {
  double worst = 0;
  for (const RankSample& s : v) {
    const double x = get(s);
    if (std::isnan(x)) return NAN;
    worst = std::max(worst, x);
  }
  return worst;
}

// ------------------------------------------------------------------ one rank's sweep
class RankRun {
 public:
  RankRun(Comm& comm, const Options& o, Shared& sh, RankState& st)
      : comm_(comm), o_(o), sh_(sh), st_(st), me_(comm.rank()), P_(comm.nranks()),
        has_nccl_(comm.nccl() != nullptr), sms_(comm.sm_count()) {}

  void run() {
    if (me_ == 0) {  // the header needs the team: its SM budget per rank
      sh_.info.sm_budget = comm_.sm_count();
      print_header(o_, sh_.info);
    }
    setup();
    for (const Shape& s : o_.shapes) {
      ShapeState x;
      x.s = s;
      prepare(x);
      const RankSample smp = measure(x);
      report(x, smp);
    }  // x's rotation sets are freed here, before the next shape allocates its own
    comm_.sync(st_.s1.s);
    sh_.barrier.arrive_and_wait("end of sweep");  // nothing in flight anywhere before windows are released
  }

 private:
  // Buffers and windows for the largest shape; windows in the same order on every rank (collective).
  void setup() {
    size_t c_bytes = 0, ws_bytes = 256;
    for (const Shape& s : o_.shapes) {
      c_bytes = std::max(c_bytes, (size_t)s.m * s.n * 2);
      ws_bytes = std::max(ws_bytes, workspace_size(fused_args(s), comm_.lsa_size(), o_.cfg));
    }
    fixed_bytes_ = 4 * c_bytes + kGuardBytes + ws_bytes + kLtWorkspace;
    st_.nc_c = DeviceBuffer(c_bytes);
    st_.lt_ws = DeviceBuffer(kLtWorkspace);
    st_.result = DeviceBuffer(sizeof(CheckResult));
    CheckResult* h = nullptr;
    TW_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h), sizeof(CheckResult), cudaHostAllocDefault));
    st_.host.reset(h);
    st_.tw_c = comm_.alloc_window(c_bytes);
    st_.tw_out = comm_.alloc_window(c_bytes);
    st_.fu_c = comm_.alloc_window(c_bytes + kGuardBytes);
    st_.fu_ws = comm_.alloc_window(ws_bytes);
    for (int i = 0; i < o_.chunks.back(); ++i) st_.chunk_done.emplace_back(cudaEventDisableTiming);
    TW_CUDA_CHECK(cudaDeviceGetAttribute(&l2_, cudaDevAttrL2CacheSize, comm_.device()));  // the GPU's
  }

  GemmAllReduceArgs fused_args(const Shape& s, const void* A = nullptr, const void* B = nullptr) const {
    return GemmAllReduceArgs{A, B, st_.fu_c.data(), s.m, s.n, s.k, DType::kBFloat16, BLayout::kNK, st_.fu_ws.data()};
  }

  // Pairs of (A, B) to rotate over: > 2x L2 together (at least 2), within the rank's share of the
  // per-GPU budget (virtual ranks share one GPU).
  int rotation_sets(const Shape& s) const {
    const size_t set = 2 * ((size_t)s.m * s.k + (size_t)s.n * s.k);
    const size_t want = std::max<size_t>(2, 2 * (size_t)l2_ / set + 1);
    const size_t budget = kRankBudget / (size_t)comm_.ranks_per_device();
    const size_t afford = fixed_bytes_ < budget ? (budget - fixed_bytes_) / set : 0;
    return (int)std::max<size_t>(1, std::min({want, afford, (size_t)kMaxSets}));
  }

  void fill(void* p, size_t n, uint64_t seed) {
    fill_uniform<<<grid_for(n, sms_), kThreads, 0, st_.s1.s>>>(static_cast<__nv_bfloat16*>(p), n, seed);
    TW_CUDA_CHECK(cudaGetLastError());
  }

  // True when `mine` holds on every rank. Every rank must call it at the same point.
  bool all_ranks(bool mine, const char* where) {
    {
      std::lock_guard<std::mutex> lk(sh_.mu);
      sh_.votes[me_] = mine;
    }
    sh_.barrier.arrive_and_wait(where);
    bool all = true;
    {
      std::lock_guard<std::mutex> lk(sh_.mu);
      for (char v : sh_.votes) all = all && v;
    }
    sh_.barrier.arrive_and_wait(where);  // nobody votes again before everyone has counted
    return all;
  }

  void prepare(ShapeState& x) {
    const Shape& s = x.s;
    x.sets = rotation_sets(s);
    for (int j = 0; j < x.sets; ++j) {
      x.a.emplace_back((size_t)s.m * s.k * 2);
      x.b.emplace_back((size_t)s.n * s.k * 2);
      const uint64_t seed = mix64(0x6E3A11ull ^ ((uint64_t)me_ << 40) ^ ((uint64_t)j << 8));
      fill(x.a[j].p, (size_t)s.m * s.k, mix64(seed ^ 1));
      fill(x.b[j].p, (size_t)s.n * s.k, mix64(seed ^ 2));
    }
    // (a) and (c) on this rank's SM budget: on a virtual team each rank has 1/P of the GPU, as the
    // fused kernel does; sized to the whole GPU, the P ranks' GEMMs share every SM between them and
    // (a) is not the same budget's GEMM (docs/fused_gemm.md, "The all-reduce bench's basis").
    const int lt_sms = comm_.ranks_per_device() > 1 ? sms_ : 0;
    x.full = std::make_unique<LtMatmul>(st_.lt.get(), s.m, s.n, s.k, BLayout::kNK, kLtWorkspace, DType::kBFloat16,
                                        lt_sms);
    if (lt_sms > 0 && me_ == 0 && !budget_said_) {
      budget_said_ = true;
      std::printf("# virtual team: (a) and (c) run cuBLASLt sized to a rank's %d SMs (SM_COUNT_TARGET %s)\n", lt_sms,
                  x.full->sm_count_target() == lt_sms ? "taken" : "refused: sized to the whole GPU");
    }
    for (int c : has_nccl_ ? o_.chunks : std::vector<int>{}) {  // (d) is NCCL's
      Split sp = split_rows(s.m, c);
      if (sp.ok && c > 1) sp.body = std::make_unique<LtMatmul>(st_.lt.get(), sp.rows, s.n, s.k, BLayout::kNK);
      if (sp.ok && (c == 1 || sp.tail != sp.rows))
        sp.last = std::make_unique<LtMatmul>(st_.lt.get(), sp.tail, s.n, s.k, BLayout::kNK);
      x.splits.push_back(std::move(sp));
    }
    // What tilewire can run here, decided alike on every rank (both ops are collective).
    const Status tw =
        can_implement(comm_, AllReduceArgs{st_.tw_c.data(), st_.tw_out.data(), x.count(), DType::kBFloat16});
    const Status fu = can_implement(comm_, fused_args(s, x.a[0].p, x.b[0].p), o_.cfg);
    x.tw_ok = all_ranks(tw.ok, "tw allreduce vote");
    x.fused_ok = all_ranks(fu.ok, "fused vote");
    if (!x.tw_ok) add_note(x.note, "(c) n/a: " + (tw.ok ? std::string("rejected on another rank") : tw.reason));
    if (!x.fused_ok) add_note(x.note, "(e) n/a: " + (fu.ok ? std::string("rejected on another rank") : fu.reason));
    // A zeroed workspace per shape: its layout (flags, staging slots) depends on the shape, and
    // stale staging bytes of the last shape could read as flags of this one. Zeroed on every rank
    // before any rank's first call (which stores into its peers' workspaces).
    TW_CUDA_CHECK(cudaMemsetAsync(st_.fu_ws.data(), 0, st_.fu_ws.bytes(), st_.s1.s));
    comm_.sync(st_.s1.s);
    sh_.barrier.arrive_and_wait("workspace zeroed");
  }

  // ---------------------------------------------------------------- the variants' iterations
  void gemm(const ShapeState& x, int j, void* c) { x.full->run(x.a[j].p, x.b[j].p, c, st_.lt_ws.p, st_.s1.s); }

  void nccl_ar(void* c, size_t count, cudaStream_t s) {
    TW_REQUIRE(has_nccl_, kState, "bench gemm-allreduce: ncclAllReduce asked of a team without NCCL (virtual)");
    TW_NCCL_CHECK(ncclAllReduce(c, c, count, ncclBfloat16, ncclSum, comm_.nccl(), s));
  }

  void tw_ar(size_t count) {
    allreduce(comm_, AllReduceArgs{st_.tw_c.data(), st_.tw_out.data(), count, DType::kBFloat16}, st_.s1.s);
  }

  // (d): chunk i's GEMM on s1, its all-reduce on s2 once that GEMM is done; s1 waits for s2 at the end.
  void chunked(const ShapeState& x, const Split& sp, int j) {
    const Shape& s = x.s;
    for (int i = 0; i < sp.c; ++i) {
      const size_t row0 = (size_t)i * sp.rows;
      sp.plan(i).run(at(x.a[j].p, row0 * s.k), x.b[j].p, at(st_.nc_c.p, row0 * s.n), st_.lt_ws.p, st_.s1.s);
      TW_CUDA_CHECK(cudaEventRecord(st_.chunk_done[i].e, st_.s1.s));
      TW_CUDA_CHECK(cudaStreamWaitEvent(st_.s2.s, st_.chunk_done[i].e, 0));
      nccl_ar(at(st_.nc_c.p, row0 * s.n), (size_t)sp.rows_of(i) * s.n, st_.s2.s);
    }
    TW_CUDA_CHECK(cudaEventRecord(st_.join.e, st_.s2.s));
    TW_CUDA_CHECK(cudaStreamWaitEvent(st_.s1.s, st_.join.e, 0));
  }

  void fused(const ShapeState& x, int j) { gemm_allreduce(comm_, fused_args(x.s, x.a[j].p, x.b[j].p), o_.cfg, st_.s1.s); }

  // One repeat of `iteration` (enqueues one iteration on s1; work on s2 joined back into s1),
  // behind the start gate: seconds per iteration on this rank.
  template <class F> double one_repeat(F&& iteration, bool& gate_expired) {
    const uint32_t gen = ++st_.gate_gen;  // the same sequence on every rank
    sh_.gate.hold(st_.s1.s, gen);
    TW_CUDA_CHECK(cudaEventRecord(st_.ev0.e, st_.s1.s));
    for (int i = 0; i < o_.iters; ++i) iteration();
    TW_CUDA_CHECK(cudaEventRecord(st_.ev1.e, st_.s1.s));
    sh_.barrier.arrive_and_wait("start gate");  // every rank has enqueued its whole repeat
    if (me_ == 0) sh_.gate.open(gen);
    comm_.sync(st_.s1.s);  // turns a timed-out device wait into tw::Error(kTimeout)
    gate_expired = gate_expired || sh_.gate.expired(gen);
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, st_.ev0.e, st_.ev1.e));
    return ms * 1e-3 / o_.iters;
  }

  // Seconds per iteration on this rank: warm-up, then the median over the repeats.
  template <class F> double timed(F&& iteration, bool& gate_expired) {
    for (int i = 0; i < std::max(1, o_.warmup); ++i) iteration();  // >= 1: NCCL/cuBLASLt first-use setup
    comm_.sync(st_.s1.s);
    std::vector<double> reps;
    for (int r = 0; r < o_.repeats; ++r) reps.push_back(one_repeat(iteration, gate_expired));
    return median(reps);
  }

  RankSample measure(const ShapeState& x) {
    RankSample smp;
    const size_t count = x.count();
    int j = 0;  // the rotation; every variant starts it at set 0
    auto next = [&] {
      const int k = j;
      j = (j + 1) % x.sets;
      return k;
    };
    auto from_set0 = [&](auto&& iteration) {
      j = 0;
      return timed(iteration, smp.gate_expired);
    };
    void* const c = st_.nc_c.p;
    const cudaStream_t s1 = st_.s1.s;
    // Every variant is warmed up, then the repeats go round-robin over the variants (the start
    // rotating), so each row is timed across the same stretch of the run: an H200's clock drops
    // under sustained GEMM load, and timing rows one after another would hand the later rows the
    // lower clock. (f) runs last on its own (it needs C zeroed: sums of zeros stay zeros).
    struct Variant {
      double* out;
      std::function<void()> iteration;
      std::vector<double> reps;
    };
    std::vector<Variant> vs;
    const bool others = !o_.only_fused;  // --only-fused: (e) alone
    if (others) vs.push_back({&smp.sec[kGemm], [&] { gemm(x, next(), c); }, {}});
    if (others)  // (g): tilewire's GEMM on this rank's SMs, the plan it runs there
      vs.push_back({&smp.sec[kTwGemm], [&] {
                      const int k = next();
                      gemm_impl::team_gemm(
                          comm_, GemmArgs{x.a[k].p, x.b[k].p, c, x.s.m, x.s.n, x.s.k, DType::kBFloat16, BLayout::kNK},
                          0, s1);
                    }, {}});
    if (others && has_nccl_)
      vs.push_back({&smp.sec[kGemmNccl], [&] {
                      gemm(x, next(), c);
                      nccl_ar(c, count, s1);
                    }, {}});
    if (others && x.tw_ok)
      vs.push_back({&smp.sec[kGemmTw], [&] {
                      gemm(x, next(), st_.tw_c.data());
                      tw_ar(count);
                    }, {}});
    for (size_t p = 0; others && p < x.splits.size(); ++p)
      if (x.splits[p].ok) vs.push_back({&smp.chunk_sec[p], [&, p] { chunked(x, x.splits[p], next()); }, {}});
    if (x.fused_ok) vs.push_back({&smp.sec[kFused], [&] { fused(x, next()); }, {}});
    for (Variant& v : vs) {
      j = 0;
      for (int i = 0; i < std::max(1, o_.warmup); ++i) v.iteration();  // >= 1: first-use setup
    }
    comm_.sync(s1);
    // --warm-s: the variants in turn, `iters` calls each, untimed, until rank 0 has seen warm_s
    // seconds pass (every rank makes the same calls: the ops are collective, and the vote ends
    // the loop everywhere at once).
    const auto warm0 = std::chrono::steady_clock::now();
    for (bool more = o_.warm_s > 0; more;) {
      for (Variant& v : vs) {
        j = 0;
        for (int i = 0; i < o_.iters; ++i) v.iteration();
      }
      comm_.sync(s1);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - warm0).count();
      more = !all_ranks(me_ != 0 || s >= o_.warm_s, "warm-s vote");
    }
    for (int r = 0; r < o_.repeats; ++r)
      for (size_t k = 0; k < vs.size(); ++k) {
        Variant& v = vs[(k + (size_t)r) % vs.size()];
        j = 0;
        v.reps.push_back(one_repeat(v.iteration, smp.gate_expired));
      }
    for (Variant& v : vs) *v.out = median(v.reps);
    if (others && has_nccl_) {
      TW_CUDA_CHECK(cudaMemsetAsync(c, 0, count * 2, s1));  // in-place sums of zeros stay zeros
      smp.sec[kNcclAr] = from_set0([&] { nccl_ar(c, count, s1); });
    }
    if (x.fused_ok) check(x, smp);
    if (x.fused_ok && !o_.trace_path.empty() && !traced_) {
      traced_ = true;
      trace_fused(x);
    }
    return smp;
  }

  // --trace FILE (first shape only): the fused op's cost with tracing on (timed like the rows),
  // then one traced call; rank 0 aligns the clocks, writes the Perfetto/tilewire JSON and prints
  // the overlap metrics (tilewire/trace/trace.hpp).
  void trace_fused(const ShapeState& x) {
    const int tiles = ((x.s.m + 127) / 128) * ((x.s.n + 255) / 256);
    trace::TraceBuffer buf(uint32_t(8 * tiles + 1024));
    // Every rank's buffer before any rank's first fused call: an allocation may wait for the
    // device to go idle, and on a virtual team a peer's fused kernel could be waiting for this
    // rank's.
    comm_.sync(st_.s1.s);
    sh_.barrier.arrive_and_wait("trace buffers allocated");
    GemmAllReduceConfig cfg = o_.cfg;
    cfg.trace = buf.ring(me_);
    const cudaStream_t s1 = st_.s1.s;
    int j = 0;
    bool expired = false;
    const double off = timed([&] { fused(x, (j++) % x.sets); }, expired);
    j = 0;
    // The kernel without trace code exists in the measurement build only (-DTILEWIRE_BENCH_KERNELS=ON).
    double out = std::nan("");
    if (testing::untraced_kernels_built()) {
      testing::set_untraced_kernels(true);
      try {
        out = timed([&] { gemm_allreduce(comm_, fused_args(x.s, x.a[j % x.sets].p, x.b[j % x.sets].p), o_.cfg, s1), ++j; },
                    expired);
      } catch (...) {
        testing::set_untraced_kernels(false);
        throw;
      }
      testing::set_untraced_kernels(false);
    }
    j = 0;
    const double on = timed(
        [&] { gemm_allreduce(comm_, fused_args(x.s, x.a[j % x.sets].p, x.b[j % x.sets].p), cfg, s1), ++j; }, expired);
    const trace::ClockSync cs = trace::measure_clock_offsets(comm_);
    buf.reset(s1);
    gemm_allreduce(comm_, fused_args(x.s, x.a[0].p, x.b[0].p), cfg, s1);
    comm_.sync(s1);
    const trace::Trace t = trace::gather_trace(comm_, buf, cs, s1);  // collective: every rank gets it
    if (me_ == 0) {
      std::lock_guard<std::mutex> lk(sh_.mu);
      const trace::Metrics m = trace::compute_metrics(t);
      trace::save_trace_file(o_.trace_path, t, &m);
      std::ostringstream tj;
      const std::string out_json = std::isnan(out) ? std::string("null") : std::to_string(out * 1e6);
      tj << "{\"file\": \"" << o_.trace_path << "\", \"shape\": [" << x.s.m << ", " << x.s.n << ", " << x.s.k
         << "], \"tracing_cost\": {\"compiled_out_us\": " << out_json << ", \"off_us\": " << off * 1e6
         << ", \"on_us\": " << on * 1e6 << "}, \"fused\": " << trace::metrics_json(m);
      sh_.trace_json = tj.str();
      if (std::isnan(out))
        std::printf("# trace: the kernel with the trace code compiled out is in the measurement build only "
                    "(-DTILEWIRE_BENCH_KERNELS=ON; scripts/pack_dist.sh): its column reads nan\n");
      std::printf("# trace %dx%dx%d (rank 0): fused %.1f us with the trace code compiled out, %.1f us with tracing "
                  "off (%+.2f%%), %.1f us on (%+.2f%% vs off); %zu events, "
                  "%llu dropped, clock residual %lld ns -> %s\n%s",
                  x.s.m, x.s.n, x.s.k, out * 1e6, off * 1e6, (off / out - 1) * 100, on * 1e6, (on / off - 1) * 100,
                  t.events.size(),
                  (unsigned long long)t.dropped, (long long)t.residual_ns, o_.trace_path.c_str(),
                  trace::format_metrics(m).c_str());
    }
    sh_.barrier.arrive_and_wait("trace written");
    trace_sequential(x, cs);
  }

  // The sequential baseline (b), traced at op granularity: one-thread kernels stamp %globaltimer
  // events between cuBLASLt's GEMM and ncclAllReduce on the same stream (their kernels cannot emit
  // events themselves): compute = [mma_start, mma_end] around the GEMM, communication =
  // [chunk_send, chunk_recv] around the all-reduce. Launch gaps of a few us sit between them.
  void trace_sequential(const ShapeState& x, const trace::ClockSync& cs) {
    if (!has_nccl_) {  // a virtual team has no NCCL to trace: the fused op's trace alone
      if (me_ == 0) {
        std::lock_guard<std::mutex> lk(sh_.mu);
        sh_.trace_json += ", \"sequential\": null}";
        std::printf("# trace of the sequential baseline: n/a (virtual team: no NCCL)\n");
        if (!o_.plot_path.empty()) {
          try {
            plot_trace_file(o_.trace_path, o_.plot_path);
            std::printf("# timeline: %s\n", o_.plot_path.c_str());
          } catch (const Error& e) {
            std::printf("# --plot skipped: %s\n", e.what());
          }
        }
      }
      sh_.barrier.arrive_and_wait("sequential trace skipped");
      return;
    }
    using K = trace::EventKind;
    trace::TraceBuffer buf(64);
    const cudaStream_t s1 = st_.s1.s;
    void* const c = st_.nc_c.p;
    auto stamp = [&](K k) {
      stamp_event<<<1, 1, 0, s1>>>(buf.ring(me_), k, 0u);
      TW_CUDA_CHECK(cudaGetLastError());
    };
    buf.reset(s1);
    stamp(K::kKernelStart);
    stamp(K::kMmaStart);
    gemm(x, 0, c);
    stamp(K::kMmaEnd);
    stamp(K::kChunkSend);
    nccl_ar(c, x.count(), s1);
    stamp(K::kChunkRecv);
    stamp(K::kKernelEnd);
    comm_.sync(s1);
    const trace::Trace t = trace::gather_trace(comm_, buf, cs, s1);
    if (me_ == 0) {
      std::lock_guard<std::mutex> lk(sh_.mu);
      const trace::Metrics m = trace::compute_metrics(t);
      std::string path = o_.trace_path;
      const size_t dot = path.rfind(".json");
      path.insert(dot == std::string::npos ? path.size() : dot, "_sequential");
      trace::save_trace_file(path, t, &m);
      sh_.trace_json += ", \"sequential_file\": \"" + path + "\", \"sequential\": " + trace::metrics_json(m) + "}";
      if (!o_.plot_path.empty()) {
        std::string seq_png = o_.plot_path;
        const size_t d = seq_png.rfind(".png");
        seq_png.insert(d == std::string::npos ? seq_png.size() : d, "_sequential");
        try {
          plot_trace_file(o_.trace_path, o_.plot_path);
          plot_trace_file(path, seq_png);
          std::printf("# timelines: %s, %s\n", o_.plot_path.c_str(), seq_png.c_str());
        } catch (const Error& e) {
          std::printf("# --plot skipped: %s\n", e.what());  // the trace files are written; plot them elsewhere
        }
      }
      std::printf("# trace of the sequential baseline (cuBLASLt GEMM, then ncclAllReduce) -> %s\n%s", path.c_str(),
                  trace::format_metrics(m).c_str());
    }
    sh_.barrier.arrive_and_wait("sequential trace written");
  }

  // The checked run of (e) (file comment): every rank's partial p_r into its tw_c, then (e) once,
  // then the check kernel reads every rank's p_r. Three host barriers order it across ranks.
  void check(const ShapeState& x, RankSample& smp) {
    const size_t n = x.count();
    const cudaStream_t s = st_.s1.s;
    comm_.sync(s);
    sh_.barrier.arrive_and_wait("timed variants done");  // no peer's (c) still reads this rank's tw_c
    auto* got = st_.fu_c.as<__nv_bfloat16>();
    gemm(x, 0, st_.tw_c.data());  // p_r: cuBLASLt's bf16 partial
    TW_CUDA_CHECK(cudaMemsetAsync(got, 0xFF, n * 2 + kGuardBytes, s));
    fused(x, 0);
    comm_.sync(s);
    sh_.barrier.arrive_and_wait("check partials written");  // every rank's p_r is in its tw_c
    TW_CUDA_CHECK(cudaMemsetAsync(st_.result.p, 0, sizeof(CheckResult), s));
    const float rel = (P_ + 4) / 256.f, abs_tol = (float)P_ * x.s.k / 16777216.f;
    check_kernel<<<grid_for(n, sms_), kThreads, 0, s>>>(got, comm_.dev_ctx(), st_.tw_c.dev(), n, rel, abs_tol,
                                                       static_cast<CheckResult*>(st_.result.p));
    TW_CUDA_CHECK(cudaGetLastError());
    TW_CUDA_CHECK(cudaMemcpyAsync(st_.host.get(), st_.result.p, sizeof(CheckResult), cudaMemcpyDeviceToHost, s));
    comm_.sync(s);
    sh_.barrier.arrive_and_wait("check partials read");  // nobody overwrites a tw_c a peer still reads
    smp.checked = true;
    smp.wrong = st_.host->wrong;
    smp.checksum = st_.host->checksum;
  }

  // Rank 0 turns every rank's sample into the row; nobody overwrites a sample before it has.
  void report(const ShapeState& x, const RankSample& smp) {
    {
      std::lock_guard<std::mutex> lk(sh_.mu);
      sh_.samples[me_] = smp;
    }
    sh_.barrier.arrive_and_wait("samples written");
    if (me_ == 0) {
      std::lock_guard<std::mutex> lk(sh_.mu);
      const std::vector<RankSample>& v = sh_.samples;
      Row row;
      row.s = x.s;
      row.sets = x.sets;
      row.note = x.note;
      if (o_.only_fused) add_note(row.note, "--only-fused: (e) alone");
      const bool ran_fused = o_.cfg.path == GemmAllReducePath::kFused ||
                             (o_.cfg.path == GemmAllReducePath::kAuto &&
                              gemm_allreduce_prefers_fused(x.s.m, x.s.n, x.s.k, P_));
      row.path = gemm_allreduce_path_name(ran_fused ? GemmAllReducePath::kFused : GemmAllReducePath::kSequential);
      for (int k = 0; k < kVariants; ++k)
        if (k != kChunked) row.us[k] = slowest(v, [&](const RankSample& q) { return q.sec[k]; }) * 1e6;
      for (size_t p = 0; p < x.splits.size(); ++p) {
        const double t = slowest(v, [&](const RankSample& q) { return q.chunk_sec[p]; }) * 1e6;
        if (std::isfinite(t) && !(row.us[kChunked] <= t)) row.us[kChunked] = t, row.chunks = x.splits[p].c;
      }
      row.checked = std::all_of(v.begin(), v.end(), [](const RankSample& q) { return q.checked; });
      for (const RankSample& q : v) {
        row.wrong += q.wrong;
        row.identical = row.identical && q.checksum == v[0].checksum;
      }
      if (std::any_of(v.begin(), v.end(), [](const RankSample& q) { return q.gate_expired; }))
        add_note(row.note, "start gate expired (host enqueue > ~10 s?): some times include launch skew");
      print_row(row);
      print_model(row, !has_nccl_);
      sh_.rows.push_back(row);
    }
    sh_.barrier.arrive_and_wait("samples read");
  }

  Comm& comm_;
  const Options& o_;
  Shared& sh_;
  RankState& st_;
  const int me_, P_;
  const bool has_nccl_;  // (b) (d) (f) run: the team has an NCCL communicator (not a virtual one)
  const int sms_;        // fill / check grids: this rank's SMs (comm.sm_count(): 1/P of the GPU if virtual)
  bool budget_said_ = false;  // rank 0 printed (a)'s SM budget
  int l2_ = 0;
  bool traced_ = false;  // --trace: done (first shape with the fused op)
  size_t fixed_bytes_ = 0;  // C buffers, windows and workspaces: what the rotation sets must leave
};

void rank_entry(Comm& comm, const Options& o, Shared& sh) {
  std::optional<RankState> st;
  try {
    st.emplace();
    RankRun(comm, o, sh, *st).run();
  } catch (...) {
    // A device wait that timed out on this rank says what it waited for (the fault record).
    try {
      comm.check_fault();
    } catch (const Error& f) {
      std::fprintf(stderr, "tilewire bench gemm-allreduce: rank %d: %s\n", comm.rank(), f.what());
    } catch (...) {
    }
    sh.fail(std::current_exception());  // peers waiting on the host throw instead of waiting for this rank
    comm.abort();                       // before st's windows go: their collective release cannot complete now
    throw;
  }
}

// GPU 0 describes every GPU of the run (one GPU when virtual).
RunInfo run_info(int nranks, bool virt) {
  cudaDeviceProp p{};
  TW_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  RunInfo r;
  r.gpu = p.name;
  r.nranks = nranks;
  r.virt = virt;
  r.sms = p.multiProcessorCount;
  r.l2_bytes = (size_t)p.l2CacheSize;
  return r;
}

}  // namespace

int bench_gemm_allreduce(const std::vector<std::string>& argv) {
  const Options o = parse_options(argv);
  if (o.help) {
    std::fputs(usage(), stdout);
    return 0;
  }
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    throw Error(Errc::kUnsupported, std::string("bench gemm-allreduce: no CUDA GPU (") +
                                        (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  lt::lt_api();  // no cuBLASLt: one line now, not one per rank thread later
  std::ofstream json;  // opened now so a bad path fails before minutes of measurement
  if (!o.json_path.empty()) {
    json.open(o.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(json.good(), kInvalidArgument,
               "--json " + o.json_path + ": cannot open for writing (" + std::strerror(errno) + ")");
  }

  const bool virt = o.virtual_ranks > 0;  // P ranks on GPU 0
  const int P = virt ? o.virtual_ranks : ndev;
  Shared sh(P);
  sh.info = run_info(P, virt);  // rank 0 prints the header once the team exists
  try {
    auto entry = [&](Comm& comm) { rank_entry(comm, o, sh); };
    if (virt) {
      Comm::run_virtual(0, P, entry);
    } else {
      std::vector<int> devices(ndev);
      std::iota(devices.begin(), devices.end(), 0);
      Comm::run_local(devices, entry);
    }
  } catch (...) {
    if (json.is_open()) {  // no half-written evidence: the file appears only for a finished sweep
      json.close();
      std::remove(o.json_path.c_str());
    }
    if (sh.first_error) std::rethrow_exception(sh.first_error);
    throw;
  }

  const long bad = std::count_if(sh.rows.begin(), sh.rows.end(), [](const Row& r) { return !r.ok(); });
  const long na = std::count_if(sh.rows.begin(), sh.rows.end(), [](const Row& r) { return !r.checked; });
  const long total = (long)sh.rows.size();
  const bool ok = bad == 0 && na < total;  // a run that checked nothing (fused n/a everywhere) proves nothing
  if (ok)
    std::printf("# tilewire bench gemm-allreduce: every checked shape correct and bit-identical (%ld shapes, %ld "
                "with the fused op n/a%s)\n",
                total, na, virt ? ("; virtual team of " + std::to_string(P) + " ranks on GPU 0").c_str() : "");
  else if (bad)
    std::printf("# tilewire bench gemm-allreduce: FAILED: %ld of %ld shapes with #wrong > 0 or ranks not "
                "bit-identical\n",
                bad, total);
  else
    std::printf("# tilewire bench gemm-allreduce: FAILED: the fused op ran on none of the %ld shapes (see the "
                "notes)\n",
                total);
  if (json.is_open()) {
    json << to_json(o, sh.info, sh.rows, ok, sh.trace_json);
    json.close();
    TW_REQUIRE(!json.fail(), kState, "--json " + o.json_path + ": write failed");
    std::printf("# wrote %s\n", o.json_path.c_str());
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace tw::cli
