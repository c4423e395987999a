// tools/bench_tp.cu — `tilewire bench gemm-rs` and `tilewire bench ag-gemm`: the two GEMMs of
// sequence-parallel tensor parallelism (ops/gemm_scatter_gather.hpp) against the unfused ways to
// get the same result, every row from the same run.
//
//   gemm-rs   C_shard = shard r of sum_q A_q [M, K_local] B_q         (B [N, K_local] or [K_local, N])
//   ag-gemm   C = [A_shard(0); ...; A_shard(P-1)] [M, K] B_r          (B [N_local, K] or [K, N_local])
//
// Rows, per shape, every rank:
//   (a) tw-gemm   tilewire's GEMM alone on the local shape (the op's lower bound)
//   (b) cublas    cuBLASLt alone on the local shape
//   (c) seq       cuBLASLt then ncclReduceScatter / ncclAllGather then cuBLASLt (one stream)
//   (d) chunked   two streams: gemm-rs in c column chunks (chunk j's GEMM on s1, its
//                 ncclReduceScatter on s2, c in --chunks that divide N; B [N, K] only); ag-gemm one
//                 chunk per source shard (ncclBroadcast of shard q on s2, the GEMM of its rows on s1)
//   (e) op        tw::gemm_reducescatter / tw::allgather_gemm (TpPath::kAuto)
//   (f) coll      the NCCL collective alone (T_coll of the overlap efficiency)
//   (g) fused     the op with TpPath::kFused, where it can run (gemm-rs: bf16 and fp16, sm_90, resident;
//                 ag-gemm: bf16 and fp16, sm_90)
//   (h) lockstep  (a) after an LSA barrier kernel on every call: the GEMMs of all ranks run at
//                 once, as they do inside an op that synchronizes them (the basis for (g))
//   (i) fused, no A_gathered (ag-gemm): (g) without the gathered A, which (g) writes
//   (j) pull gather (ag-gemm): barrier, the own shard into a window, barrier, every shard pulled
//                 from its owner's copy into the gathered A (one stream: the gather alone)
//   (k) gather + gemm (ag-gemm): (j), then tilewire's GEMM on the gathered A (no overlap)
// --trace FILE: after the first shape's rows, one fused call traced (TpConfig::trace), clocks
// aligned, written as Perfetto / tilewire JSON by rank 0 with the overlap metrics printed.
// With --virtual P (P ranks on GPU 0, no NCCL) (c), (d), (f) are n/a and the times are P ranks
// sharing one GPU. Each row: one untimed call, then R repeats of `iters` calls between events
// after a host barrier; the slowest rank's median. The rows without NCCL take their repeats in
// turn (time_rows: the GPU's clock falls under sustained load). Inputs: seeded uniform in [-1, 1).
//
// #wrong, after the timing, one more call of each op, on both backends: gemm-rs: every rank's cuBLASLt partial p_q in a
// window; each element of this rank's shard against ref = sum_q p_q (fp32, read through the LSA
// team), |C - ref| <= (P + 4) 2^-8 mag + P K 2^-24, mag = sum_q |p_q| (the op's partials may
// round one ulp apart from cuBLASLt's and the sum rounds once). ag-gemm: the gathered A bitwise
// against the shards (read from the peers' windows), C against cuBLASLt on it within
// 2^-7 |ref| + K 2^-20 (accumulation order; |a b| < 1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.hpp"  // median, parse_virtual_ranks
#include "bench_gate.hpp"  // HostBarrier
#include "commands.hpp"
#include "ops/fused_gemm/cost_model.hpp"
#include "ops/gemm/team_gemm.hpp"  // sms_outside_budget
#include "ops/gemm/cublaslt.hpp"
#include "tilewire/device/barrier.cuh"
#include "tilewire/device/peer.cuh"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/ops/gemm_scatter_gather.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/trace/trace.hpp"

namespace tw::cli {
namespace {

enum class TpOp { kGemmRs, kAgGemm };

struct TpOptions {
  TpOp op = TpOp::kGemmRs;
  std::vector<int> M = {4096};
  int N = 8192, K = 4096;  // gemm-rs: N, K_local; ag-gemm: N_local, K (the local GEMM's N and K)
  bool llama = false;      // --sweep llama
  DType dtype = DType::kBFloat16;
  BLayout b = BLayout::kNK;
  std::vector<int> chunks = {2, 4, 8};
  int iters = 10, repeats = 5, virtual_ranks = 0;
  double warm_s = 0;  // --warm-s: seconds of the rows in turn, untimed, before the repeats
  std::string json_path;
  std::string trace_path;
  bool help = false;
};

const char* kUsage =
    "usage: tilewire bench gemm-rs|ag-gemm [options]\n"
    "  -m M[,M..]          rows of the full A / C (default 4096)\n"
    "  -n N                gemm-rs: N; ag-gemm: N_local (default 8192)\n"
    "  -k K                gemm-rs: K_local; ag-gemm: K (default 4096)\n"
    "  --sweep llama       M in {1024 .. 16384} x the Llama 3 8B FFN (14336 / 4096), 70B FFN\n"
    "                      (28672 / 8192) and 70B attention output (8192 / 8192), sharded over the ranks\n"
    "  --dtype bf16|fp16   --layout nk|kn   --chunks c[,c..] (default 2,4,8)\n"
    "  --iters N  -R N     --virtual P (P ranks on GPU 0: correctness only)   --json FILE\n"
    "  --warm-s S          then S seconds of every row in turn, untimed, before the repeats (0): each\n"
    "                      row timed with the GPU at its power limit, as after sustained load\n"
    "  --trace FILE        the first shape's fused call traced (per tile, per CTA), clocks aligned:\n"
    "                      Perfetto JSON and the overlap metrics\n";

std::vector<int> int_list(const std::string& s, const char* what) { return parse_int_list(s, std::string("bench: ") + what); }

TpOptions parse(TpOp op, const std::vector<std::string>& argv) {
  TpOptions o;
  o.op = op;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
      continue;
    }
    TW_REQUIRE(i + 1 < argv.size(), kInvalidArgument, "bench: " + a + " needs a value (--help)");
    const std::string& v = argv[++i];
    if (a == "-m") o.M = int_list(v, "-m");
    else if (a == "-n") o.N = int_list(v, "-n").at(0);
    else if (a == "-k") o.K = int_list(v, "-k").at(0);
    else if (a == "--sweep") {
      TW_REQUIRE(v == "llama", kInvalidArgument, "bench: --sweep takes llama, got '" + v + "'");
      o.llama = true;
    } else if (a == "--dtype") {
      const std::optional<DType> t = parse_dtype(v);  // any spelling of bf16 or fp16
      TW_REQUIRE(t == DType::kBFloat16 || t == DType::kFloat16, kInvalidArgument,
                 "bench: --dtype takes bf16 or fp16, got '" + v + "'");
      o.dtype = *t;
    } else if (a == "--layout") {
      const std::optional<BLayout> l = parse_blayout(v);
      TW_REQUIRE(l.has_value(), kInvalidArgument, "bench: --layout takes nk or kn, got '" + v + "'");
      o.b = *l;
    } else if (a == "--chunks") o.chunks = int_list(v, "--chunks");
    else if (a == "--iters") o.iters = int_list(v, "--iters").at(0);
    else if (a == "-R") o.repeats = int_list(v, "-R").at(0);
    else if (a == "--warm-s") {
      char* end = nullptr;
      o.warm_s = std::strtod(v.c_str(), &end);
      TW_REQUIRE(!v.empty() && *end == 0 && o.warm_s >= 0 && o.warm_s <= 600, kInvalidArgument,
                 "bench: --warm-s takes seconds in [0, 600], got '" + v + "'");
    }
    else if (a == "--virtual") o.virtual_ranks = parse_virtual_ranks(a, v);
    else if (a == "--json") o.json_path = v;
    else if (a == "--trace") o.trace_path = v;
    else TW_REQUIRE(false, kInvalidArgument, "bench: unknown option " + a + " (--help)");
  }
  return o;
}

struct Shape {
  int M, N, K;  // the local GEMM's N and K
  std::string name;
};

// The shapes of a run on P ranks: the Llama sweep sharded as tensor parallelism shards it
// (gemm-rs: the row-parallel layer, N = the model width, K_local = F / P; ag-gemm: the
// column-parallel layer, N_local = F / P, K = the width), or -m x -n x -k.
std::vector<Shape> shapes(const TpOptions& o, int P) {
  std::vector<Shape> v;
  if (!o.llama) {
    for (int m : o.M) v.push_back({m, o.N, o.K, ""});
    return v;
  }
  struct Layer {
    const char* name;
    int F, D;
  };
  for (const Layer& l : {Layer{"8B FFN", 14336, 4096}, Layer{"70B FFN", 28672, 8192}, Layer{"70B attn out", 8192, 8192}})
    for (int m : {1024, 2048, 4096, 8192, 16384}) {
      if (l.F % P) continue;  // not shardable over P ranks
      v.push_back(o.op == TpOp::kGemmRs ? Shape{m, l.D, l.F / P, l.name} : Shape{m, l.F / P, l.D, l.name});
    }
  return v;
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { TW_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

__device__ __forceinline__ float to_f(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float to_f(const __half* p, size_t i) { return __half2float(p[i]); }

// Seeded uniform in [-1, 1), the same on every run.
template <class T>
__global__ void fill_uniform(T* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint64_t z = (seed + 1) * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    const float u = (float)((z >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
    p[i] = T(u);
  }
}

// gemm-rs: element (i, n) of this rank's shard against the sum of every rank's partial, read in
// the partials' window at row r S + i.
template <class T>
__global__ void check_rs(DevCtx ctx, DevWindow pw, const T* C, int rows, int N, int S, int K, unsigned long long* bad) {
  const int P = ctx.nranks, r = ctx.rank;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < (size_t)rows * N; e += (size_t)gridDim.x * blockDim.x) {
    const size_t at = (size_t)r * S * N + e;
    float ref = 0, mag = 0;
    for (int q = 0; q < P; ++q) {
      const float v = to_f(dev::lsa_ptr<const T>(ctx, pw, 0, q), at);
      ref += v, mag += fabsf(v);
    }
    const float c = to_f(C, e);
    if (!(fabsf(c - ref) <= (P + 4) * 0.00390625f * mag + P * K * 5.96e-8f)) atomicAdd(bad, 1ull);
  }
}

// ag-gemm: the gathered A against the shards in the peers' windows (bitwise), C against ref.
template <class T>
__global__ void check_ag(DevCtx ctx, DevWindow sw, const T* G, int M, int K, int S, const T* C, const T* ref, size_t nc,
                         unsigned long long* bad) {
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < (size_t)M * K; e += (size_t)gridDim.x * blockDim.x) {
    const int q = (int)(e / K / S);
    const T want = dev::lsa_ptr<const T>(ctx, sw, 0, q)[e - (size_t)q * S * K];
    if (*reinterpret_cast<const uint16_t*>(&G[e]) != *reinterpret_cast<const uint16_t*>(&want)) atomicAdd(bad, 1ull);
  }
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < nc; e += (size_t)gridDim.x * blockDim.x) {
    const float c = to_f(C, e), r = to_f(ref, e);
    if (!(fabsf(c - r) <= 0.0078125f * fabsf(r) + K * 9.54e-7f)) atomicAdd(bad, 1ull);
  }
}

// (h), (j), (k): every rank's calls in step. Barrier index max_blocks - 1 (device/barrier.cuh:
// every rank makes the same sequence of calls on it).
__global__ void lockstep_barrier(const __grid_constant__ DevCtx ctx) {
  dev::lsa_barrier(dev::Cta{}, ctx, uint32_t(ctx.max_blocks - 1), cuda::memory_order_acq_rel, "bench lockstep");
}

struct Job {
  int row;  // index into the shape's rows
  std::function<void()> call;
};

struct Row {
  std::string what;
  bool ran = false;
  double us = 0;
};

struct Shared {
  std::mutex mu;
  std::vector<std::vector<double>> t;  // [rank] median per row of the shape being timed
  unsigned long long wrong = 0;
};

class TpBench {
 public:
  TpBench(const TpOptions& o, int P) : o_(o), P_(P), barrier_(P) { sh_.t.assign(P, {}); }
  void run(Comm& comm);
  std::vector<std::pair<Shape, std::vector<Row>>> results;  // rank 0's
  Shared& shared() { return sh_; }

 private:
  template <class Op>
  double time(Comm& comm, cudaStream_t s, Op op);
  void time_rows(Comm& comm, cudaStream_t s, std::vector<Job>& jobs, std::vector<double>& t);
  template <class T>
  void shape(Comm& comm, const Shape& sh, bool trace);
  template <class Call>
  void trace_fused(Comm& comm, const Shape& sh, cudaStream_t s, Call call);
  const TpOptions& o_;
  const int P_;
  HostBarrier barrier_;
  std::atomic<bool> warm_more_{false};  // --warm-s: rank 0's verdict, read by every rank between barriers
  Shared sh_;
};

template <class Op>
double TpBench::time(Comm& comm, cudaStream_t s, Op op) {
  op();
  comm.sync(s);
  cudaEvent_t e0, e1;
  TW_CUDA_CHECK(cudaEventCreate(&e0));
  TW_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int r = 0; r < o_.repeats; ++r) {
    barrier_.arrive_and_wait("bench tp repeat");
    TW_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < o_.iters; ++i) op();
    TW_CUDA_CHECK(cudaEventRecord(e1, s));
    comm.sync(s);
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3 / o_.iters);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(t);
}

// Every job warmed up, then R repeats, each timing every job once with the start rotating, so
// that each row is timed across the same stretch of the run: an H200's clock drops under sustained
// GEMM load, and rows timed one after another would hand the later rows the lower clock. Every
// rank has the same jobs in the same order (the ops among them synchronize the ranks).
void TpBench::time_rows(Comm& comm, cudaStream_t s, std::vector<Job>& jobs, std::vector<double>& t) {
  for (Job& j : jobs) j.call();
  comm.sync(s);
  // --warm-s: the jobs in turn, `iters` calls each, untimed, until rank 0 has seen warm_s seconds
  // pass. Every rank makes the same calls (the ops are collective): rank 0's verdict crosses a
  // barrier, and a second one keeps it from changing before every rank has read it.
  const auto w0 = std::chrono::steady_clock::now();
  for (bool more = o_.warm_s > 0; more;) {
    for (Job& j : jobs)
      for (int i = 0; i < o_.iters; ++i) j.call();
    comm.sync(s);
    if (comm.rank() == 0)
      warm_more_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() < o_.warm_s;
    barrier_.arrive_and_wait("bench tp warm-s");
    more = warm_more_;
    barrier_.arrive_and_wait("bench tp warm-s read");
  }
  cudaEvent_t e0, e1;
  TW_CUDA_CHECK(cudaEventCreate(&e0));
  TW_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<std::vector<double>> reps(jobs.size());
  for (int r = 0; r < o_.repeats; ++r)
    for (size_t k = 0; k < jobs.size(); ++k) {
      const size_t x = (k + (size_t)r) % jobs.size();
      barrier_.arrive_and_wait("bench tp repeat");
      TW_CUDA_CHECK(cudaEventRecord(e0, s));
      for (int i = 0; i < o_.iters; ++i) jobs[x].call();
      TW_CUDA_CHECK(cudaEventRecord(e1, s));
      comm.sync(s);
      float ms = 0;
      TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      reps[x].push_back(ms * 1e3 / o_.iters);
    }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (size_t k = 0; k < jobs.size(); ++k) t[jobs[k].row] = median(reps[k]);
}

// One fused call traced (every rank: the clock sync and the gather are collective); rank 0 writes
// the file and prints the metrics (tilewire/trace/trace.hpp). call(cfg) runs the op once.
template <class Call>
void TpBench::trace_fused(Comm& comm, const Shape& sh, cudaStream_t s, Call call) {
  const int me = comm.rank();
  const uint32_t tiles = uint32_t(((sh.M + 127) / 128) * ((sh.N + 255) / 256));
  trace::TraceBuffer buf(8 * tiles + 4096);
  TpConfig cfg;
  cfg.path = TpPath::kFused;
  cfg.trace = buf.ring(me);
  const trace::ClockSync cs = trace::measure_clock_offsets(comm);
  buf.reset(s);
  comm.sync(s);
  comm.barrier();
  call(cfg);
  comm.sync(s);
  const trace::Trace t = trace::gather_trace(comm, buf, cs, s);
  if (me == 0) {
    const trace::Metrics m = trace::compute_metrics(t);
    trace::save_trace_file(o_.trace_path, t, &m);
    std::printf("# trace %dx%dx%d, fused: %zu events, %llu dropped, clock residual %lld ns -> %s\n%s", sh.M, sh.N, sh.K,
                t.events.size(), (unsigned long long)t.dropped, (long long)t.residual_ns, o_.trace_path.c_str(),
                trace::format_metrics(m).c_str());
  }
  barrier_.arrive_and_wait("bench tp trace written");
}

template <class T>
void TpBench::shape(Comm& comm, const Shape& sh, bool trace) {
  const int me = comm.rank(), P = comm.nranks(), M = sh.M, N = sh.N, K = sh.K;
  const int S = shard_rows(M, P), rows = shard_rows_of(M, P, me);
  const bool rs = o_.op == TpOp::kGemmRs;
  const size_t e = sizeof(T);
  cudaStream_t s1 = nullptr, s2 = nullptr;
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  lt::LtHandle lth;
  const size_t lt_ws_bytes = lt::LtMatmul::kDefaultWorkspace;
  Dev lt_ws(lt_ws_bytes), bad(8);
  // Operands: gemm-rs A [M, K], B, partial [P S, N] (a window: the check reads it), C_shard;
  // ag-gemm A_shard [S, K] (a window: the check reads it), gathered [P S, K], B, C [M, N].
  const size_t a_rows = rs ? (size_t)M : (size_t)S;
  Dev A(a_rows * K * e), B((size_t)N * K * e), C((size_t)(rs ? S : M) * N * e), ref((size_t)std::max(M, S) * N * e),
      gathered((size_t)P * S * K * e);
  Window part = comm.alloc_window(std::max<size_t>((size_t)P * S * N * e, 256));
  Window shard = comm.alloc_window(std::max<size_t>((size_t)S * K * e, 256));
  const size_t ws_bytes = rs ? gemm_reducescatter_workspace_size(M, N, o_.dtype, P) : allgather_gemm_workspace_size(M, K, o_.dtype, P);
  Window ws = comm.alloc_window(ws_bytes);
  const uint64_t seed = 1000ull * me + 7;
  fill_uniform<T><<<1024, 256, 0, s1>>>(static_cast<T*>(rs ? A.p : shard.data()), a_rows * K, seed);
  fill_uniform<T><<<1024, 256, 0, s1>>>(static_cast<T*>(B.p), (size_t)N * K, seed + 1);
  TW_CUDA_CHECK(cudaMemsetAsync(bad.p, 0, 8, s1));
  const void* A_local = rs ? A.p : shard.data();
  // The local GEMM: gemm-rs on A [M, K], ag-gemm on the gathered A [M, K].
  const void* gemm_a = rs ? A.p : gathered.p;
  lt::LtMatmul full(lth.get(), M, N, K, o_.b, lt_ws_bytes, o_.dtype);
  GemmArgs tg{gemm_a, B.p, rs ? part.data() : C.p, M, N, K, o_.dtype, o_.b};
  std::vector<Row> rows_out = {{"(a) tw-gemm"}, {"(b) cublas"}, {"(c) seq cublas+nccl"}, {"(d) chunked"},
                               {"(e) op (auto)"}, {"(f) nccl collective"}, {"(g) op fused"},
                               {"(h) tw-gemm lockstep"}, {"(i) fused, no A_gathered"}, {"(j) pull gather"},
                               {"(k) pull gather, then tw-gemm"}, {"(l) op sequential"}};
  std::vector<double> t(rows_out.size(), -1);
  comm.sync(s1);
  comm.barrier();
  GemmConfig gc;  // on a virtual team tilewire's GEMM keeps to the rank's SM budget, as the op's does
  gc.reserved_sms = gemm_impl::sms_outside_budget(comm);
  // The rows without NCCL, timed round-robin (time_rows); then each op's output checked.
  std::vector<Job> jobs;
  jobs.push_back({0, [&] { gemm(tg, gc, s1); }});
  jobs.push_back({1, [&] { full.run(gemm_a, B.p, rs ? part.data() : C.p, lt_ws.p, s1); }});
  const auto lockstep = [&] {
    lockstep_barrier<<<1, 32, 0, s1>>>(comm.dev_ctx());
    TW_CUDA_CHECK(cudaGetLastError());
  };
  jobs.push_back({7, [&] {
                    lockstep();
                    gemm(tg, gc, s1);
                  }});
  // (j), (k): the gather of a pull design alone, then with the GEMM after it (ag-gemm)
  Window pull = comm.alloc_window(rs ? 256 : (size_t)P * S * K * e);
  const DevWindow pw = pull.dev();
  const size_t rb = (size_t)K * e;
  const auto gather = [&] {
    lockstep();
    if (rows > 0)
      TW_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(pull.data()) + (size_t)me * S * rb, shard.data(), (size_t)rows * rb,
                                    cudaMemcpyDeviceToDevice, s1));
    lockstep();
    for (int k = 0; k < P; ++k) {
      const int q = (me + k) % P, n = shard_rows_of(M, P, q);
      if (n > 0)
        TW_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(gathered.p) + (size_t)q * S * rb,
                                      pw.lsa_base + (size_t)q * pw.lsa_stride + (size_t)q * S * rb, (size_t)n * rb,
                                      cudaMemcpyDeviceToDevice, s1));
    }
  };
  if (!rs) {
    jobs.push_back({9, gather});
    jobs.push_back({10, [&] {
                      gather();
                      gemm(tg, gc, s1);
                    }});
  }
  TpConfig fused, seq;
  fused.path = TpPath::kFused;
  seq.path = TpPath::kSequential;
  GemmReduceScatterArgs rsa{A.p, B.p, C.p, M, N, K, o_.dtype, o_.b, ws.data()};
  AllGatherGemmArgs aga{A_local, B.p, C.p, gathered.p, M, N, K, o_.dtype, o_.b, ws.data()};
  AllGatherGemmArgs c_only = aga;
  c_only.A_gathered = nullptr;
  const bool fused_ok = rs ? can_implement(comm, rsa, fused).ok : can_implement(comm, aga, fused).ok;
  if (rs) {
    jobs.push_back({4, [&] { gemm_reducescatter(comm, rsa, {}, s1); }});
    jobs.push_back({11, [&] { gemm_reducescatter(comm, rsa, seq, s1); }});
    if (fused_ok) jobs.push_back({6, [&] { gemm_reducescatter(comm, rsa, fused, s1); }});
  } else {
    jobs.push_back({4, [&] { allgather_gemm(comm, aga, {}, s1); }});
    jobs.push_back({11, [&] { allgather_gemm(comm, aga, seq, s1); }});
    if (fused_ok) {
      jobs.push_back({6, [&] { allgather_gemm(comm, aga, fused, s1); }});
      jobs.push_back({8, [&] { allgather_gemm(comm, c_only, fused, s1); }});
    }
  }
  comm.sync(s1);
  comm.barrier();
  time_rows(comm, s1, jobs, t);
  comm.sync(s1);
  comm.barrier();  // no peer still reads the pull window
  ncclComm_t nc = comm.nccl();
  const ncclDataType_t nt = o_.dtype == DType::kBFloat16 ? ncclBfloat16 : ncclFloat16;
  if (nc != nullptr) {
    if (rs) {
      const auto coll = [&] { TW_NCCL_CHECK(ncclReduceScatter(part.data(), ref.p, (size_t)S * N, nt, ncclSum, nc, s1)); };
      t[2] = time(comm, s1, [&] {
        full.run(A.p, B.p, part.data(), lt_ws.p, s1);
        coll();
      });
      t[5] = time(comm, s1, coll);
      // (d): column chunks of B [N, K] (contiguous rows of B); each chunk's partial [P S, Nc].
      double best = -1;
      for (int c : o_.chunks) {
        if (o_.b != BLayout::kNK || N % c || (N / c) * e % 16) continue;
        const int Nc = N / c;
        lt::LtMatmul part_mm(lth.get(), M, Nc, K, o_.b, lt_ws_bytes, o_.dtype);
        Dev chunk_part((size_t)c * P * S * Nc * e), chunk_out((size_t)c * S * Nc * e);
        std::vector<cudaEvent_t> ev(c);
        for (auto& x : ev) TW_CUDA_CHECK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
        cudaEvent_t joined;
        TW_CUDA_CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
        const double tc = time(comm, s1, [&] {
          for (int j = 0; j < c; ++j) {
            char* pj = static_cast<char*>(chunk_part.p) + (size_t)j * P * S * Nc * e;
            part_mm.run(A.p, static_cast<const char*>(B.p) + (size_t)j * Nc * K * e, pj, lt_ws.p, s1);
            TW_CUDA_CHECK(cudaEventRecord(ev[j], s1));
            TW_CUDA_CHECK(cudaStreamWaitEvent(s2, ev[j], 0));
            TW_NCCL_CHECK(ncclReduceScatter(pj, static_cast<char*>(chunk_out.p) + (size_t)j * S * Nc * e, (size_t)S * Nc,
                                            nt, ncclSum, nc, s2));
          }
          TW_CUDA_CHECK(cudaEventRecord(joined, s2));
          TW_CUDA_CHECK(cudaStreamWaitEvent(s1, joined, 0));
        });
        if (best < 0 || tc < best) best = tc, rows_out[3].what = "(d) chunked, " + std::to_string(c) + " column chunks";
        for (auto& x : ev) cudaEventDestroy(x);
        cudaEventDestroy(joined);
      }
      t[3] = best;
    } else {
      const auto coll = [&] { TW_NCCL_CHECK(ncclAllGather(shard.data(), gathered.p, (size_t)S * K, nt, nc, s1)); };
      t[2] = time(comm, s1, [&] {
        coll();
        full.run(gathered.p, B.p, C.p, lt_ws.p, s1);
      });
      t[5] = time(comm, s1, coll);
      // (d): shard q broadcast on s2, the GEMM of its rows on s1 once it landed.
      std::vector<std::unique_ptr<lt::LtMatmul>> blk(P);
      for (int q = 0; q < P; ++q)
        if (int rq = shard_rows_of(M, P, q); rq > 0) blk[q] = std::make_unique<lt::LtMatmul>(lth.get(), rq, N, K, o_.b, lt_ws_bytes, o_.dtype);
      std::vector<cudaEvent_t> ev(P);
      for (auto& x : ev) TW_CUDA_CHECK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
      cudaEvent_t start;
      TW_CUDA_CHECK(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
      t[3] = time(comm, s1, [&] {
        TW_CUDA_CHECK(cudaEventRecord(start, s1));
        TW_CUDA_CHECK(cudaStreamWaitEvent(s2, start, 0));
        for (int q = 0; q < P; ++q) {
          char* gq = static_cast<char*>(gathered.p) + (size_t)q * S * K * e;
          TW_NCCL_CHECK(ncclBroadcast(shard.data(), gq, (size_t)S * K, nt, q, nc, s2));
          TW_CUDA_CHECK(cudaEventRecord(ev[q], s2));
        }
        for (int q = 0; q < P; ++q) {
          TW_CUDA_CHECK(cudaStreamWaitEvent(s1, ev[q], 0));
          if (blk[q])
            blk[q]->run(static_cast<char*>(gathered.p) + (size_t)q * S * K * e, B.p,
                        static_cast<char*>(C.p) + (size_t)q * S * N * e, lt_ws.p, s1);
        }
      });
      rows_out[3].what = "(d) chunked, a chunk per source shard";
      for (auto& x : ev) cudaEventDestroy(x);
      cudaEventDestroy(start);
    }
  }
  // Each op's output, checked after one more call (outputs poisoned first).
  if (rs) {
    const auto check = [&] {
      full.run(A.p, B.p, part.data(), lt_ws.p, s1);  // this rank's partial for the check
      comm.sync(s1);
      comm.barrier();  // every rank's partial is in its window
      check_rs<T><<<1024, 256, 0, s1>>>(comm.dev_ctx(), part.dev(), static_cast<const T*>(C.p), rows, N, S, K,
                                        static_cast<unsigned long long*>(bad.p));
      comm.sync(s1);
      comm.barrier();  // every rank's check read the partials before they are overwritten
    };
    const size_t c_bytes = std::max<size_t>((size_t)rows * N * e, 256);
    TW_CUDA_CHECK(cudaMemsetAsync(C.p, 0xFF, c_bytes, s1));  // NaN: an output never written is wrong
    gemm_reducescatter(comm, rsa, {}, s1);
    check();
    TW_CUDA_CHECK(cudaMemsetAsync(C.p, 0xFF, c_bytes, s1));
    gemm_reducescatter(comm, rsa, seq, s1);
    check();
    if (fused_ok) {
      TW_CUDA_CHECK(cudaMemsetAsync(C.p, 0xFF, c_bytes, s1));
      gemm_reducescatter(comm, rsa, fused, s1);
      check();
      if (trace) trace_fused(comm, sh, s1, [&](const TpConfig& c) { gemm_reducescatter(comm, rsa, c, s1); });
    }
  } else {
    const auto poison = [&] {  // NaN: an output never written is wrong
      TW_CUDA_CHECK(cudaMemsetAsync(C.p, 0xFF, (size_t)M * N * e, s1));
      TW_CUDA_CHECK(cudaMemsetAsync(gathered.p, 0xFF, (size_t)P * S * K * e, s1));
    };
    const auto check = [&] {
      full.run(gathered.p, B.p, ref.p, lt_ws.p, s1);  // cuBLASLt on the op's gathered A
      comm.sync(s1);
      comm.barrier();
      check_ag<T><<<1024, 256, 0, s1>>>(comm.dev_ctx(), shard.dev(), static_cast<const T*>(gathered.p), M, K, S,
                                        static_cast<const T*>(C.p), static_cast<const T*>(ref.p), (size_t)M * N,
                                        static_cast<unsigned long long*>(bad.p));
      comm.sync(s1);
      comm.barrier();  // every rank's check read the shards before the next op overwrites them
    };
    poison();
    allgather_gemm(comm, aga, {}, s1);
    check();
    poison();
    allgather_gemm(comm, aga, seq, s1);
    check();
    if (fused_ok) {
      poison();
      allgather_gemm(comm, aga, fused, s1);
      check();
      TW_CUDA_CHECK(cudaMemsetAsync(C.p, 0xFF, (size_t)M * N * e, s1));
      allgather_gemm(comm, c_only, fused, s1);
      check();  // C; the gathered A the call before's
      if (trace) trace_fused(comm, sh, s1, [&](const TpConfig& c) { allgather_gemm(comm, aga, c, s1); });
    }
  }
  unsigned long long nbad = 0;
  TW_CUDA_CHECK(cudaMemcpyAsync(&nbad, bad.p, 8, cudaMemcpyDeviceToHost, s1));
  comm.sync(s1);
  {
    std::lock_guard<std::mutex> lk(sh_.mu);
    sh_.t[me] = t;
    sh_.wrong += nbad;
  }
  barrier_.arrive_and_wait("bench tp results");
  if (me == 0) {
    for (size_t i = 0; i < rows_out.size(); ++i) {
      double worst = -1;
      for (int q = 0; q < P; ++q) worst = std::max(worst, sh_.t[q][i]);
      rows_out[i].ran = worst >= 0;
      rows_out[i].us = worst;
    }
    results.push_back({sh, rows_out});
  }
  barrier_.arrive_and_wait("bench tp rows");
  comm.barrier();  // nothing of this shape in flight anywhere before its windows go
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

void TpBench::run(Comm& comm) {
  bool first = true;
  for (const Shape& sh : shapes(o_, comm.nranks())) {
    const bool trace = first && !o_.trace_path.empty();
    first = false;
    if (o_.dtype == DType::kBFloat16) shape<__nv_bfloat16>(comm, sh, trace);
    else shape<__half>(comm, sh, trace);
  }
}

}  // namespace

int bench_tp(const std::string& op_name, const std::vector<std::string>& argv) {
  const TpOp op = op_name == "gemm-rs" ? TpOp::kGemmRs : TpOp::kAgGemm;
  const TpOptions o = parse(op, argv);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  int ngpu = 0;
  TW_REQUIRE(cudaGetDeviceCount(&ngpu) == cudaSuccess && ngpu > 0, kUnsupported, "bench " + op_name + ": no CUDA GPU");
  const int P = o.virtual_ranks > 0 ? o.virtual_ranks : ngpu;
  TpBench bench(o, P);
  auto body = [&](Comm& comm) { bench.run(comm); };
  if (o.virtual_ranks > 0) Comm::run_virtual(0, P, body);
  else Comm::run_local({}, body);
  const bool rs = op == TpOp::kGemmRs;
  std::printf("# tilewire bench %s: %d %s ranks, %s, B %s; times: per call, median of %d repeats of %d calls, slowest rank\n",
              op_name.c_str(), P, o.virtual_ranks > 0 ? "virtual (one GPU: correctness only)" : "GPU",
              dtype_name(o.dtype), blayout_name(o.b), o.repeats, o.iters);
  std::printf("# %s; e = the faster of (e), (g); op/gemm = e/(a); speedup = min((c), (d)) / e; overlap = ((a) + (f) - e) / min((a), (f))\n",
              rs ? "M x N x K_local, C_shard = rows of shard r of sum_q A_q B_q" : "M x N_local x K, C = gathered A x B_r");
  std::ofstream json;
  if (!o.json_path.empty()) {
    json.open(o.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(json.good(), kInvalidArgument, "--json " + o.json_path + ": cannot open for writing");
    json << "{\"bench\": \"" << op_name << "\", \"ranks\": " << P << ", \"virtual\": " << (o.virtual_ranks > 0 ? "true" : "false")
         << ", \"dtype\": \"" << dtype_name(o.dtype) << "\", \"layout\": \"" << blayout_name(o.b)
         << "\", \"wrong\": " << bench.shared().wrong << ", \"shapes\": [";
  }
  bool first = true;
  for (const auto& [sh, rows] : bench.results) {
    std::printf("  %s%6d x %6d x %6d\n", sh.name.empty() ? "" : (sh.name + "  ").c_str(), sh.M, sh.N, sh.K);
    for (const Row& r : rows)
      if (r.ran) std::printf("    %-44s %10.1f us\n", r.what.c_str(), r.us);
      else std::printf("    %-44s %10s\n", r.what.c_str(), "n/a");
    const double a = rows[0].us, c = rows[2].ran ? rows[2].us : -1, d = rows[3].ran ? rows[3].us : -1,
                 e = rows[6].ran ? std::min(rows[4].us, rows[6].us) : rows[4].us, f = rows[5].ran ? rows[5].us : -1;
    const double best = c > 0 && d > 0 ? std::min(c, d) : std::max(c, d);
    std::printf("    op/gemm %.3f", e / a);
    if (best > 0) std::printf("   speedup %.3f", best / e);
    if (f > 0) std::printf("   overlap %.2f", (a + f - e) / std::min(a, f));
    // The fused op against the GEMM alone, the same GEMM after a barrier (h) and the op's own
    // sequential path (l), all from this run.
    if (rows[6].ran) {
      std::printf("   fused/gemm %.3f", rows[6].us / a);
      if (rows[7].ran) std::printf("   fused/lockstep %.3f", rows[6].us / rows[7].us);
      if (rows[11].ran) std::printf("   fused/seq %.3f", rows[6].us / rows[11].us);
    }
    std::printf("\n");
    // The cost model's fused and sequential times at P = 2, 4, 8 on H200 NVLink, for the
    // multi-GPU runs to check; its GEMM time: (a) on a real rank, its own estimate on a virtual
    // team (where a rank has 1/P of the GPU).
    const fused_gemm::Shape ms{sh.M, sh.N, sh.K, (int)dtype_size(o.dtype)};
    const double tg = o.virtual_ranks > 0 ? fused_gemm::estimate_gemm_us(ms.M, ms.N, ms.K, ms.dtype_bytes) : a;
    const std::string model = fused_gemm::predictions_line(
        o.op == TpOp::kGemmRs ? fused_gemm::FusedOp::kGemmReduceScatter : fused_gemm::FusedOp::kAllGatherGemm, ms, tg);
    std::printf("    %s\n", model.c_str());
    if (json.is_open()) {
      json << (first ? "" : ", ") << "{\"name\": \"" << sh.name << "\", \"M\": " << sh.M << ", \"N\": " << sh.N
           << ", \"K\": " << sh.K << ", \"model\": \"" << model << "\", \"rows\": [";
      for (size_t i = 0; i < rows.size(); ++i)
        json << (i ? ", " : "") << "{\"op\": \"" << rows[i].what << "\", \"ran\": " << (rows[i].ran ? "true" : "false")
             << ", \"us\": " << rows[i].us << "}";
      json << "]}";
      first = false;
    }
  }
  if (json.is_open()) json << "]}\n";
  std::printf("# #wrong %llu%s\n", bench.shared().wrong, bench.shared().wrong ? "  <-- WRONG RESULTS" : "");
  return bench.shared().wrong == 0 ? 0 : 1;
}

}  // namespace tw::cli
