// tools/bench_allreduce.cu — `tilewire bench allreduce`: tilewire against NCCL, nccl-tests style.
//
// One process, one thread per local GPU (tw::Comm::run_local); rank r drives GPU devices[r].
// With --virtual P: P virtual ranks on GPU 0 instead (tw::Comm::run_virtual), one thread each,
// no NCCL communicator: (A) and every check run as on P GPUs, (B) and (C) are n/a, and the
// times are labelled as what they are, P ranks sharing one GPU (no NVLink in them).
// For every size of the sweep, every rank runs the same sequence on its own stream:
//
//   (A) tilewire   tw::allreduce      on symmetric windows      tw_send -> tw_recv
//   (B) nccl       ncclAllReduce(sum) on plain cudaMalloc memory nc_send -> nc_recv
//   (C) nccl-symm  ncclAllReduce(sum) on the windows of (A)      tw_send -> tw_recv
//
//   each variant:  [checked run (-c 1)] -> w warmups -> R x { gate; ev0; n iterations; ev1 }
//                  gate: every rank enqueues a kernel that spins on one host-mapped flag, and the
//                  flag is raised only after all ranks have enqueued their whole repeat, so all
//                  GPUs start the timed region together (host-thread launch skew stays out of the
//                  times of tilewire and NCCL alike)
//                  -> checked run (the timed output when -c 1 and out-of-place; else a fresh one)
//
// then rank 0 gathers every rank's times, #wrong and checksums (host memory between two
// barriers) and prints one row. Times are per iteration: median over the R repeats of
// (ev1 - ev0) / n, and the slowest rank's median is reported. With -G 1 the n iterations are
// captured once into a CUDA graph and each repeat is one graph launch. Nothing between ev0
// and ev1 waits on the host.
//
// Buffers, per rank, allocated once for the largest size plus a guard, released after a final
// barrier (all ranks alike: window creation and release are collective):
//   tw_send, tw_recv  Comm::alloc_window: symmetric, peers reach them through the LSA team
//   nc_send, nc_recv  cudaMalloc: NCCL's ordinary path
//   in-place (-i 1):  no send buffers; every variant reads its input from and writes into recv.
//
// Correctness: element i of rank r's input is v(seed, r, i), an integer in [-m, m] (m = 8 for
// up to 32 ranks, smaller beyond), so every partial sum is an integer of magnitude <= 256:
// exact in bf16, fp16 and fp32 in any summation order. Before a checked run recv (and a guard
// past its end) is poisoned with 0xFF bytes, a NaN in every dtype. The check kernel recomputes
// sum_r v(seed, r, i) on the device and counts the elements that differ, plus guard bytes that
// changed (an overrun). A position-sensitive checksum of recv shows whether ranks ended
// bit-identical.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/dtype_dispatch.cuh"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/runtime/version.hpp"

extern char** environ;

namespace tw::cli {
namespace {

constexpr size_t kGuardBytes = 256;  // poisoned bytes past the end of recv, checked for overruns
constexpr int kThreads = 256;        // fill / check kernels

enum Variant { kTw = 0, kNccl = 1, kSymm = 2, kVariants = 3 };
constexpr const char* kVariantKey[kVariants] = {"tilewire", "nccl", "nccl_symm"};

// ------------------------------------------------------------------ seeded inputs (device)
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// v(seed, r, i) in [-m, m]; rank_key = mix64(seed ^ r).
__device__ __forceinline__ int input_value(uint64_t rank_key, uint64_t i, int m) {
  return (int)(mix64(rank_key ^ i) % (uint64_t)(2 * m + 1)) - m;
}

template <class T> __device__ __forceinline__ T from_float(float f) { return T(f); }
template <> __device__ __forceinline__ __half from_float<__half>(float f) { return __float2half_rn(f); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float f) { return __float2bfloat16_rn(f); }

// x[0, n) = v(seed, rank, i): this rank's input.
// The start gate: one thread spins on a host-mapped flag until it reaches `gen`. Bounded: after
// 10 s it gives up (the times of that repeat then include the skew; nothing hangs).
__global__ void gate_kernel(const volatile uint32_t* flag, uint32_t gen) {
  const uint64_t t0 = clock64();
  while ((int32_t)(*flag - gen) < 0) {
    if (clock64() - t0 > 20000000000ull) break;  // ~10 s at 2 GHz
  }
}

// Rendezvous of the rank threads on the host. Not comm.barrier(): that is an NCCL collective,
// which NCCL orders behind the ncclAllReduce calls already queued behind the gates: a deadlock.
std::barrier<>& host_barrier(int nranks) {
  static std::barrier<>* bar = new std::barrier<>(nranks);  // one bench per process
  return *bar;
}

// One flag for the process (all ranks are threads of it), pinned, mapped and portable.
volatile uint32_t* gate_flag() {
  static volatile uint32_t* flag = [] {
    void* p = nullptr;
    TW_CUDA_CHECK(cudaHostAlloc(&p, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<volatile uint32_t*>(p) = 0;
    return static_cast<volatile uint32_t*>(p);
  }();
  return flag;
}

template <class T>
__global__ void fill_kernel(T* x, size_t n, uint64_t seed, int rank, int m) {
  const uint64_t key = mix64(seed ^ (uint64_t)rank);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = from_float<T>((float)input_value(key, i, m));
}

struct CheckResult {
  unsigned long long wrong;     // elements != exact sum, plus guard bytes != 0xFF
  unsigned long long checksum;  // sum over i of mix64(bits(y[i]), i): order-free, position-sensitive
};

// Counts y[0, n) != sum over ranks of v(seed, r, i), and guard bytes after y[n) that are not 0xFF.
template <class T>
__global__ void check_kernel(const T* y, size_t n, size_t guard_bytes, uint64_t seed, int nranks, int m,
                             CheckResult* out) {
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long wrong = 0, sum = 0;
  for (size_t i = tid; i < n; i += stride) {
    int expect = 0;
    for (int r = 0; r < nranks; ++r) expect += input_value(mix64(seed ^ (uint64_t)r), i, m);
    const float got = float(y[i]);
    wrong += !(got == (float)expect);  // the NaN poison never compares equal
    sum += mix64(((uint64_t)reinterpret_cast<const Bits*>(y)[i] << 40) ^ i);
  }
  const unsigned char* guard = reinterpret_cast<const unsigned char*>(y + n);
  for (size_t j = tid; j < guard_bytes; j += stride) wrong += guard[j] != 0xFF;
  for (int o = 16; o > 0; o >>= 1) {
    wrong += __shfl_down_sync(0xFFFFFFFFu, wrong, o);
    sum += __shfl_down_sync(0xFFFFFFFFu, sum, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&out->wrong, wrong);
    atomicAdd(&out->checksum, sum);
  }
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

// ------------------------------------------------------------------ host RAII
struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { if (p) cudaFree(p); }
  void alloc(size_t bytes) { TW_CUDA_CHECK(cudaMalloc(&p, bytes)); }
};

struct GraphExec {
  cudaGraphExec_t g = nullptr;
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() { if (g) cudaGraphExecDestroy(g); }
};

// Everything one rank owns. Lives in rank_entry's frame so the comm can be aborted before the
// windows are released when the sweep throws (release is collective; peers may be gone).
struct RankState {
  DeviceBuffer nc_send, nc_recv;  // (B), cap bytes each; nc_send unused in-place
  Window tw_send, tw_recv;        // (A) and (C), cap bytes each (rounded up); tw_send unused in-place
  DeviceBuffer result;            // one CheckResult
  CheckResult* host = nullptr;    // pinned mirror of `result`
  cudaStream_t stream = nullptr;
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  RankState() = default;
  RankState(const RankState&) = delete;
  RankState& operator=(const RankState&) = delete;
  ~RankState() {
    if (ev0) cudaEventDestroy(ev0);
    if (ev1) cudaEventDestroy(ev1);
    if (stream) cudaStreamDestroy(stream);
    if (host) cudaFreeHost(host);
  }
};

// ------------------------------------------------------------------ what rank 0 gathers
struct RankSample {              // one rank, one size
  double seconds[kVariants];     // per iteration: median over repeats
  uint64_t wrong[kVariants];     // summed over this size's checked runs
  uint64_t checksum[kVariants];  // combined over this size's checked runs
};

struct Cell {
  bool ran = false;  // false: the variant needs NCCL and the team has none (virtual); the rest is unset
  double time_us = 0, algbw = 0, busbw = 0;
  uint64_t wrong = 0;
  bool identical = true;
};
struct Row {
  uint64_t bytes = 0, count = 0;
  std::string algo;  // tilewire's algorithm at this size (resolved when -a auto)
  Cell cell[kVariants];
};

struct GpuLine {
  int rank, device;
  std::string name, pci;
};

// Shared by the rank threads. samples[r] is written by rank r and read by rank 0 between the
// two barriers of a size (under mu); everything else is written by rank 0 only.
struct Shared {
  std::mutex mu;
  std::vector<RankSample> samples;
  std::vector<Row> rows;
  std::vector<GpuLine> gpus;
  int nranks = 0, lsa_size = 0;
  int sm_budget = 0;     // comm.sm_count(): SMs per rank
  bool virt = false;     // a virtual team: P ranks on GPU 0, no NCCL: (B) and (C) n/a
  uint64_t oneshot_max = 0;
};

size_t grid_for(size_t n, int sms) {
  return std::max<size_t>(1, std::min<size_t>((n + kThreads - 1) / kThreads, (size_t)sms * 8));
}

// NCCL_*, TILEWIRE_* and CUDA_VISIBLE_DEVICES as set now: the knobs that shape these numbers.
// NCCL_VERSION is skipped: container images set it to the NCCL they ship, not the one loaded.
std::vector<std::pair<std::string, std::string>> env_vars() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string k = kv.substr(0, eq);
    if (k == "NCCL_VERSION") continue;
    if (k.rfind("NCCL_", 0) == 0 || k.rfind("TILEWIRE_", 0) == 0 || k == "CUDA_VISIBLE_DEVICES")
      out.emplace_back(k, kv.substr(eq + 1));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string env_line() {
  std::string out;
  for (const auto& [k, v] : env_vars()) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out.empty() ? "(no NCCL_/TILEWIRE_ variables set)" : out;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

void print_header(const BenchArgs& a, const Shared& sh) {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  std::printf("# tilewire bench allreduce: tilewire %s, NCCL %s (headers %s), CUDA runtime %d.%d, driver %d.%d\n",
              kVersion, nccl_version_string(nccl_runtime_version()).c_str(),
              nccl_version_string(nccl_header_version()).c_str(), rt / 1000, rt % 1000 / 10, drv / 1000,
              drv % 1000 / 10);
  if (sh.virt) {
    std::printf("# %d virtual ranks (LSA team %d) on GPU 0, one process, one thread per rank, %d SMs per rank\n",
                sh.nranks, sh.lsa_size, sh.sm_budget);
    std::printf("# virtual team: %d ranks on one GPU; times are not NVLink figures (correctness run); nccl and\n"
                "#   nccl-symm n/a (no NCCL communicator)\n",
                sh.nranks);
  } else {
    std::printf("# %d ranks (LSA team %d), one process, one thread per GPU\n", sh.nranks, sh.lsa_size);
  }
  for (const GpuLine& g : sh.gpus)
    std::printf("#   rank %2d: GPU %d  %s  %s\n", g.rank, g.device, g.name.c_str(), g.pci.c_str());
  std::printf("# options: %s\n# env: %s\n", format_options(a).c_str(), env_line().c_str());
  std::printf("# tilewire: one-shot up to %s per rank, two-shot above (TILEWIRE_ONESHOT_MAX_BYTES)\n",
              format_bytes(sh.oneshot_max).c_str());
  std::printf("# time: median of %d repeats of %d %s iterations, per iteration, slowest rank (us)\n", a.repeats,
              a.iters, a.cudagraph ? "graph-captured" : "back-to-back");
  std::printf("# algbw = size/time, busbw = algbw*2(P-1)/P (GB/s); #wrong = elements != exact sum (+ guard bytes\n"
              "#   overwritten), over all ranks and checks; '*' = ranks not bit-identical; speedup = time ratio\n");
  std::printf("#%46s |%34s |%34s |%25s | %s\n", "", "tilewire              ", "nccl                ",
              "nccl-symm          ", "speedup");
  std::printf("#%11s %12s %9s %11s |%10s %7s %7s %7s |%10s %7s %7s %7s |%10s %7s %6s | %7s %7s\n", "size(B)", "count",
              "type", "algo", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong", "time(us)",
              "busbw", "#wrong", "tw/nccl", "tw/symm");
  std::fflush(stdout);
}

std::string wrong_str(const Cell& c) {
  return c.ran ? std::to_string(c.wrong) + (c.identical ? "" : "*") : "n/a";
}

// "%.2f" of v when the cell ran, else "n/a".
std::string num(const Cell& c, double v) { return c.ran ? fmt("%.2f", v) : "n/a"; }

// NCCL time / tilewire time (above 1: tilewire faster); "n/a" when either did not run.
std::string speedup(const Cell& tw, const Cell& other) {
  return tw.ran && other.ran && tw.time_us > 0 ? fmt("%.2f", other.time_us / tw.time_us) : "n/a";
}

void print_row(const Row& r, DType t) {
  const Cell &A = r.cell[kTw], &B = r.cell[kNccl], &C = r.cell[kSymm];
  std::printf(" %11llu %12llu %9s %11s |%10s %7s %7s %7s |%10s %7s %7s %7s |%10s %7s %6s | %7s %7s\n",
              (unsigned long long)r.bytes, (unsigned long long)r.count, dtype_name(t), r.algo.c_str(),
              num(A, A.time_us).c_str(), num(A, A.algbw).c_str(), num(A, A.busbw).c_str(), wrong_str(A).c_str(),
              num(B, B.time_us).c_str(), num(B, B.algbw).c_str(), num(B, B.busbw).c_str(), wrong_str(B).c_str(),
              num(C, C.time_us).c_str(), num(C, C.busbw).c_str(), wrong_str(C).c_str(), speedup(A, B).c_str(),
              speedup(A, C).c_str());
  std::fflush(stdout);
}

// ------------------------------------------------------------------ one rank's sweep
void run_sweep(Comm& comm, RankState& st, const BenchArgs& a, Shared& sh) {
  const int P = comm.nranks(), me = comm.rank();
  const std::vector<uint64_t> sizes = bench_sizes(a, P);
  const size_t esize = dtype_size(a.dtype), cap = sizes.back() + kGuardBytes;
  const int m = P <= 32 ? 8 : std::max(1, 256 / P);  // |sum| <= P*m <= 256: exact in bf16
  // (B) and (C) call ncclAllReduce: only where the team has an NCCL communicator (not virtual).
  const bool has_nccl = comm.nccl() != nullptr;
  auto runs = [&](int v) { return v == kTw || has_nccl; };

  // Plain buffers first (no collective in flight), then the windows (collective, same order).
  if (has_nccl && !a.inplace) st.nc_send.alloc(cap);
  if (has_nccl) st.nc_recv.alloc(cap);
  if (!a.inplace) st.tw_send = comm.alloc_window(cap);
  st.tw_recv = comm.alloc_window(cap);
  st.result.alloc(sizeof(CheckResult));
  TW_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&st.host), sizeof(CheckResult), cudaHostAllocDefault));
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  TW_CUDA_CHECK(cudaEventCreate(&st.ev0));
  TW_CUDA_CHECK(cudaEventCreate(&st.ev1));
  const cudaStream_t s = st.stream;  // every op of this rank, in issue order

  auto recv_of = [&](int v) { return v == kNccl ? st.nc_recv.p : st.tw_recv.data(); };
  auto send_of = [&](int v) -> void* { return a.inplace ? recv_of(v) : (v == kNccl ? st.nc_send.p : st.tw_send.data()); };

  // A forced algorithm the largest size cannot use fails here, on every rank alike, before any row.
  {
    Status ok = can_implement(comm, AllReduceArgs{send_of(kTw), recv_of(kTw), sizes.back() / esize, a.dtype, a.algo});
    if (!ok) throw Error(Errc::kInvalidArgument, ok.reason);
  }
  // Mirrors the library's rule (src/ops/allreduce/allreduce.cu) to name the algorithm per size.
  const uint64_t oneshot_max = oneshot_max_bytes(comm);

  // Fill and check grids: this rank's share of the GPU (all of it on the NCCL backend, 1/P of it
  // on a virtual team, whose P ranks run these kernels at the same time).
  const int sms = comm.sm_count();

  auto launch = [&](int v, size_t count) {
    if (v == kTw) allreduce(comm, AllReduceArgs{send_of(v), recv_of(v), count, a.dtype, a.algo}, s);
    else TW_NCCL_CHECK(ncclAllReduce(send_of(v), recv_of(v), count, nccl_type(a.dtype), ncclSum, comm.nccl(), s));
  };
  auto fill = [&](void* x, size_t count, uint64_t seed) {
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      fill_kernel<T><<<grid_for(count, sms), kThreads, 0, s>>>(static_cast<T*>(x), count, seed, me, m);
    });
    TW_CUDA_CHECK(cudaGetLastError());
  };
  // rerun: fresh inputs, poisoned recv, one op; else check what recv holds now.
  auto checked = [&](int v, size_t count, uint64_t seed, bool rerun) -> CheckResult {
    const size_t bytes = count * esize;
    if (rerun) {
      if (!a.inplace) fill(send_of(v), count, seed);
      TW_CUDA_CHECK(cudaMemsetAsync(recv_of(v), 0xFF, bytes + kGuardBytes, s));
      if (a.inplace) fill(recv_of(v), count, seed);
      launch(v, count);
    }
    TW_CUDA_CHECK(cudaMemsetAsync(st.result.p, 0, sizeof(CheckResult), s));
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      check_kernel<T><<<grid_for(count, sms), kThreads, 0, s>>>(static_cast<const T*>(recv_of(v)), count, kGuardBytes,
                                                               seed, P, m, static_cast<CheckResult*>(st.result.p));
    });
    TW_CUDA_CHECK(cudaGetLastError());
    TW_CUDA_CHECK(cudaMemcpyAsync(st.host, st.result.p, sizeof(CheckResult), cudaMemcpyDeviceToHost, s));
    comm.sync(s);  // turns a timed-out device wait into tw::Error(kTimeout)
    return *st.host;
  };
  // Seconds per iteration on this rank: median over repeats.
  auto timed = [&](int v, size_t count) -> double {
    for (int i = 0; i < a.warmup_iters; ++i) launch(v, count);
    GraphExec exec;
    if (a.cudagraph) {
      cudaGraph_t g = nullptr;
      TW_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      try {
        for (int i = 0; i < a.iters; ++i) launch(v, count);
      } catch (...) {
        cudaStreamEndCapture(s, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      TW_CUDA_CHECK(cudaStreamEndCapture(s, &g));
      cudaError_t e = cudaGraphInstantiate(&exec.g, g, 0);
      cudaGraphDestroy(g);
      TW_CUDA_CHECK(e);
      TW_CUDA_CHECK(cudaGraphLaunch(exec.g, s));  // first launch uploads; untimed
    }
    comm.sync(s);
    std::vector<double> reps;
    volatile uint32_t* flag = gate_flag();
    for (int r = 0; r < a.repeats; ++r) {
      comm.barrier();  // every rank has read the flag's current value
      const uint32_t gen = *flag + 1;
      comm.barrier();
      gate_kernel<<<1, 1, 0, s>>>(flag, gen);
      TW_CUDA_CHECK(cudaGetLastError());
      TW_CUDA_CHECK(cudaEventRecord(st.ev0, s));
      if (exec.g) TW_CUDA_CHECK(cudaGraphLaunch(exec.g, s));
      else
        for (int i = 0; i < a.iters; ++i) launch(v, count);
      TW_CUDA_CHECK(cudaEventRecord(st.ev1, s));
      host_barrier(P).arrive_and_wait();  // every rank has enqueued its whole repeat behind its gate
      if (me == 0) *flag = gen;           // open every gate at once
      comm.sync(s);
      float ms = 0;
      TW_CUDA_CHECK(cudaEventElapsedTime(&ms, st.ev0, st.ev1));
      reps.push_back(ms * 1e-3 / a.iters);
    }
    return median(reps);
  };

  if (me == 0) {
    sh.nranks = P;
    sh.lsa_size = comm.lsa_size();
    sh.sm_budget = comm.sm_count();
    sh.virt = comm.is_virtual();
    sh.oneshot_max = oneshot_max;
    print_header(a, sh);
  }

  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t count = sizes[k] / esize;
    RankSample smp{};
    for (int v = 0; v < kVariants; ++v) {
      if (!runs(v)) continue;  // n/a in the row (rank 0 reads runs() the same way)
      const uint64_t seed = mix64(0x71E3D1AEull ^ (k << 8) ^ (uint64_t)v);  // differs per size and variant
      uint64_t wrong = 0, sum = 0;
      auto take = [&](const CheckResult& c) {
        wrong += c.wrong;
        sum = mix64(sum ^ c.checksum);
      };
      if (a.check) take(checked(v, count, seed, /*rerun=*/true));
      else {  // inputs for the timed loop; the check follows it
        if (!a.inplace) fill(send_of(v), count, seed);
        else fill(recv_of(v), count, seed);
      }
      smp.seconds[v] = timed(v, count);
      // Out-of-place with -c 1, the timed loop's last output must still be exact; otherwise
      // (in-place inputs were overwritten; -c 0 has not checked yet) run once more and check.
      take(checked(v, count, seed, /*rerun=*/!a.check || a.inplace));
      smp.wrong[v] = wrong;
      smp.checksum[v] = sum;
    }
    {
      std::lock_guard<std::mutex> lk(sh.mu);
      sh.samples[me] = smp;
    }
    comm.barrier();  // every sample written
    if (me == 0) {
      std::lock_guard<std::mutex> lk(sh.mu);
      Row row;
      row.bytes = sizes[k];
      row.count = count;
      row.algo = algo_name(a.algo != AllReduceAlgo::kAuto ? a.algo : choose_allreduce_algo(sizes[k], P, oneshot_max));
      for (int v = 0; v < kVariants; ++v) {
        Cell& c = row.cell[v];
        c.ran = runs(v);
        if (!c.ran) continue;
        double worst = 0;
        for (const RankSample& r : sh.samples) {
          worst = std::max(worst, r.seconds[v]);
          c.wrong += r.wrong[v];
          c.identical = c.identical && r.checksum[v] == sh.samples[0].checksum[v];
        }
        const Bandwidth bw = allreduce_bandwidth(sizes[k], worst, P);
        c.time_us = worst * 1e6;
        c.algbw = bw.algbw_gbps;
        c.busbw = bw.busbw_gbps;
      }
      print_row(row, a.dtype);
      sh.rows.push_back(row);
    }
    comm.barrier();  // rank 0 has read every sample before anyone overwrites it
  }
  comm.barrier();  // nothing in flight anywhere before buffers and windows are released
}

void rank_entry(Comm& comm, const BenchArgs& a, Shared& sh) {
  RankState st;
  try {
    run_sweep(comm, st, a, sh);
  } catch (...) {
    comm.abort();  // before st's windows go: their collective release cannot complete now
    throw;
  }
}

// ------------------------------------------------------------------ JSON
std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    if ((unsigned char)c < 0x20) continue;
    o += c;
  }
  return o + "\"";
}
std::string jnum(double v) { return std::isfinite(v) ? fmt("%.6g", v) : "null"; }

std::string commit_id() { return bench_commit(); }

std::string to_json(const BenchArgs& a, const Shared& sh, bool all_ok) {
  std::ostringstream o;
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char when[32] = {};
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string commit = commit_id();

  o << "{\n  \"tool\": \"tilewire bench allreduce\",\n  \"tilewire_version\": " << jstr(kVersion)
    << ",\n  \"commit\": " << (commit.empty() ? "null" : jstr(commit)) << ",\n  \"timestamp\": " << jstr(when)
    << ",\n  \"host\": " << jstr(host) << ",\n  \"nccl_version\": " << jstr(nccl_version_string(nccl_runtime_version()))
    << ",\n  \"nccl_header\": " << jstr(nccl_version_string(nccl_header_version())) << ",\n  \"cuda_runtime\": " << rt
    << ",\n  \"cuda_driver\": " << drv << ",\n  \"backend\": " << jstr(sh.virt ? "virtual" : "nccl")
    << ",\n  \"virtual_ranks\": " << (sh.virt ? std::to_string(sh.nranks) : "null")
    << ",\n  \"times_are_nvlink\": " << (sh.virt ? "false" : "true") << ",\n  \"nranks\": " << sh.nranks
    << ",\n  \"lsa_size\": " << sh.lsa_size << ",\n  \"sms_per_rank\": " << sh.sm_budget
    << ",\n  \"gpu_name\": " << jstr(sh.gpus.empty() ? "" : sh.gpus[0].name) << ",\n  \"gpus\": [";
  for (size_t i = 0; i < sh.gpus.size(); ++i)
    o << (i ? ", " : "") << "{\"rank\": " << sh.gpus[i].rank << ", \"device\": " << sh.gpus[i].device
      << ", \"name\": " << jstr(sh.gpus[i].name) << ", \"pci_bus_id\": " << jstr(sh.gpus[i].pci) << "}";
  o << "],\n  \"options\": {\"minbytes\": " << a.minbytes << ", \"maxbytes\": " << a.maxbytes
    << ", \"stepfactor\": " << a.stepfactor << ", \"iters\": " << a.iters << ", \"warmup_iters\": " << a.warmup_iters
    << ", \"repeats\": " << a.repeats << ", \"check\": " << (a.check ? "true" : "false")
    << ", \"datatype\": " << jstr(dtype_name(a.dtype)) << ", \"algo\": " << jstr(algo_name(a.algo))
    << ", \"cudagraph\": " << (a.cudagraph ? "true" : "false") << ", \"op\": " << jstr(a.op)
    << ", \"inplace\": " << (a.inplace ? "true" : "false") << ", \"ngpus\": " << a.ngpus
    << ", \"virtual\": " << a.virtual_ranks
    << ", \"command_line\": " << jstr(format_options(a)) << "},\n  \"env\": {";
  {
    bool first = true;
    for (const auto& [k, v] : env_vars()) {
      o << (first ? "" : ", ") << jstr(k) << ": " << jstr(v);
      first = false;
    }
  }
  o << "}"
    << ",\n  \"oneshot_max_bytes\": " << sh.oneshot_max
    << ",\n  \"timing\": \"per-iteration time: median over repeats of (n iterations)/n, slowest rank; GB = 1e9 B; "
       "busbw = algbw*2(P-1)/P"
    << (sh.virt ? "; virtual team: P ranks on one GPU, times are not NVLink figures (correctness run); nccl and "
                  "nccl_symm null (no NCCL communicator)"
                : "")
    << "\",\n  \"rows\": [";
  for (size_t i = 0; i < sh.rows.size(); ++i) {
    const Row& r = sh.rows[i];
    o << (i ? "," : "") << "\n    {\"bytes\": " << r.bytes << ", \"count\": " << r.count
      << ", \"dtype\": " << jstr(dtype_name(a.dtype)) << ", \"algo\": " << jstr(r.algo);
    for (int v = 0; v < kVariants; ++v) {
      const Cell& c = r.cell[v];
      if (!c.ran) {
        o << ", " << jstr(kVariantKey[v]) << ": null";
        continue;
      }
      o << ", " << jstr(kVariantKey[v]) << ": {\"time_us\": " << jnum(c.time_us) << ", \"algbw_gbps\": " << jnum(c.algbw)
        << ", \"busbw_gbps\": " << jnum(c.busbw) << ", \"wrong\": " << c.wrong
        << ", \"ranks_identical\": " << (c.identical ? "true" : "false") << "}";
    }
    const double tw = r.cell[kTw].time_us;
    auto ratio = [&](int v) { return r.cell[v].ran ? jnum(tw > 0 ? r.cell[v].time_us / tw : 0) : "null"; };
    o << ", \"speedup_vs_nccl\": " << ratio(kNccl) << ", \"speedup_vs_nccl_symm\": " << ratio(kSymm) << "}";
  }
  o << "\n  ],\n  \"all_correct\": " << (all_ok ? "true" : "false") << "\n}\n";
  return o.str();
}

}  // namespace

int bench_allreduce(const BenchArgs& a) {
  // No GPU: one line, nothing else (main prints it).
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    throw Error(Errc::kUnsupported,
                std::string("no CUDA GPU to run on (") +
                    (e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)
                                      : std::string("the driver reports 0 devices")) +
                    ")");
  }
  TW_REQUIRE(a.ngpus <= ndev, kInvalidArgument,
             "-g " + std::to_string(a.ngpus) + " asks for more GPUs than the " + std::to_string(ndev) + " visible");
  const bool virt = a.virtual_ranks > 0;  // P ranks on GPU 0
  const int P = virt ? a.virtual_ranks : a.ngpus > 0 ? a.ngpus : ndev;
  std::vector<int> devices(P);  // devices[r]: rank r's GPU
  for (int i = 0; i < P; ++i) devices[i] = virt ? 0 : i;

  std::ofstream json;  // opened now so a bad path fails before minutes of measurement
  if (!a.json_path.empty()) {
    json.open(a.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(json.good(), kInvalidArgument,
               "--json " + a.json_path + ": cannot open for writing (" + std::strerror(errno) + ")");
  }

  Shared sh;
  sh.samples.resize(P);
  for (int r = 0; r < P; ++r) {
    cudaDeviceProp p{};
    TW_CUDA_CHECK(cudaGetDeviceProperties(&p, devices[r]));
    char pci[32] = {};
    cudaDeviceGetPCIBusId(pci, sizeof(pci), devices[r]);
    sh.gpus.push_back(GpuLine{r, devices[r], p.name, pci});
  }

  try {
    auto entry = [&](Comm& comm) { rank_entry(comm, a, sh); };
    if (virt) Comm::run_virtual(0, P, entry);
    else Comm::run_local(devices, entry);
  } catch (...) {
    if (json.is_open()) {  // no half-written evidence: the file appears only for a finished sweep
      json.close();
      std::remove(a.json_path.c_str());
    }
    throw;
  }

  // Summary over all rows (rank 0's view, now on the main thread).
  uint64_t bad[kVariants] = {}, differ[kVariants] = {};
  for (const Row& r : sh.rows)
    for (int v = 0; v < kVariants; ++v) {
      if (!r.cell[v].ran) continue;  // n/a: nothing to count
      bad[v] += r.cell[v].wrong > 0;
      differ[v] += !r.cell[v].identical;
    }
  bool ok = true;
  for (int v = 0; v < kVariants; ++v) ok = ok && bad[v] == 0 && differ[v] == 0;
  if (ok) {
    std::printf("# tilewire bench allreduce: all sizes correct%s\n",
                virt ? (" (virtual team of " + std::to_string(P) + " ranks on GPU 0; nccl columns n/a)").c_str() : "");
  } else {
    constexpr const char* kName[kVariants] = {"tilewire", "nccl", "nccl-symm"};
    std::string why;
    for (int v = 0; v < kVariants; ++v) {
      if (bad[v] == 0 && differ[v] == 0) continue;
      why += std::string(why.empty() ? " " : "; ") + kName[v] + ": ";
      if (bad[v]) why += std::to_string(bad[v]) + " of " + std::to_string(sh.rows.size()) + " sizes with #wrong > 0";
      if (bad[v] && differ[v]) why += ", ";
      if (differ[v]) why += std::to_string(differ[v]) + " sizes where ranks are not bit-identical";
    }
    std::printf("# tilewire bench allreduce: FAILED:%s\n", why.c_str());
  }
  if (json.is_open()) {
    json << to_json(a, sh, ok);
    json.close();
    TW_REQUIRE(!json.fail(), kState, "--json " + a.json_path + ": write failed");
    std::printf("# wrote %s\n", a.json_path.c_str());
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace tw::cli
