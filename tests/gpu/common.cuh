// tests/gpu/common.cuh — what every GPU test file shares: skipping without GPUs, RAII device
// buffers and streams, seeded fill kernels, poisoning, copies back, and error expectations.
//
// The team a multi-rank test runs on (run_team, team_size): one rank per visible GPU (the NCCL
// backend), or, when TILEWIRE_TEST_VIRTUAL=P is set, P virtual ranks sharing GPU 0
// (Comm::run_virtual). scripts/gpu_run.sh runs the whole binary once per P in {1, 2, 3, 4, 8}.
//
// Conventions of the GPU tests:
//   * inputs are seeded (host_ref.hpp) and never all zero; outputs are poisoned with 0xFF bytes
//     (NaN in fp32, fp16 and bf16) before every run, so "nothing written" is visible;
//   * references are computed on the host, independently of the kernels under test;
//   * inside Comm::run_local every rank makes the same collective calls and never returns early
//     (a rank that leaves while its peers wait in a collective hangs the run): use EXPECT_*, not
//     ASSERT_*, inside the per-rank function.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../scoped_env.hpp"
#include "host_ref.hpp"
#include "tilewire/device/ptx.cuh"  // globaltimer (hold_stream)
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw_test {

// ------------------------------------------------------------------------------ skipping
// Visible CUDA GPUs; 0 (and why, in *why) when there are none or no usable driver.
// Largest element count the tests use: TW_TEST_MAX_COUNT caps it (compute-sanitizer runs set
// it, instrumented kernels on 64M elements would not fit the device call).
inline size_t max_test_count() {
  const char* e = std::getenv("TW_TEST_MAX_COUNT");
  return e ? std::strtoull(e, nullptr, 10) : ~size_t{0};
}

inline int gpu_count(std::string* why = nullptr) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "the driver reports 0 devices";
  return n;
}

// "" when `n` GPUs are visible, else the reason a test needing them is skipped.
inline std::string gpu_skip_reason(int n) {
  std::string why;
  const int have = gpu_count(&why);
  if (have == 0) return "no CUDA GPU (" + why + ")";
  if (have < n) return "needs " + std::to_string(n) + " GPUs, " + std::to_string(have) + " visible";
  return "";
}

// "" when at least `n` GPUs are visible and every visible GPU is sm_90 (the sm_90a kernels), else why not.
inline std::string sm90_skip_reason(int n = 1) {
  std::string why = gpu_skip_reason(n);
  if (!why.empty()) return why;
  const int count = gpu_count();
  for (int d = 0; d < count; ++d) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
    if (major != 9 || minor != 0)
      return "needs sm_90 (Hopper), device " + std::to_string(d) + " is sm_" + std::to_string(major * 10 + minor);
  }
  return "";
}
// Virtual ranks requested through TILEWIRE_TEST_VIRTUAL (0: unset, use one rank per GPU).
inline int virtual_ranks() {
  const char* e = std::getenv("TILEWIRE_TEST_VIRTUAL");
  return e && *e ? std::atoi(e) : 0;
}

// Ranks per virtual node (TILEWIRE_TEST_RANKS_PER_NODE; 0: unset, one node): a virtual team in
// nodes, the peers of other nodes reached through the emulated GIN (CommConfig::ranks_per_node).
inline int ranks_per_node() {
  const char* e = std::getenv("TILEWIRE_TEST_RANKS_PER_NODE");
  return e && *e ? std::atoi(e) : 0;
}

// Ranks of the team run_team() makes: P virtual ranks, or one per visible GPU (0 without a GPU).
inline int team_size() {
  const int v = virtual_ranks();
  if (v > 0) return gpu_count() > 0 ? v : 0;
  return gpu_count();
}

// "" when the team has at least `n` ranks, else why a test needing them is skipped.
inline std::string ranks_skip_reason(int n) {
  std::string why;
  if (gpu_count(&why) == 0) return "no CUDA GPU (" + why + ")";
  const int have = team_size();
  if (have < n)
    return "needs " + std::to_string(n) + " ranks, the team has " + std::to_string(have) +
           (virtual_ranks() > 0 ? " (TILEWIRE_TEST_VIRTUAL)" : " (one per GPU; TILEWIRE_TEST_VIRTUAL=P runs P on one GPU)");
  return "";
}

// Device buffers freed while a team runs are freed when it ends. cudaFree synchronizes the
// device: on a virtual team a rank blocked there while a peer's kernel spins for that rank's
// next launch would deadlock until the peer's bounded wait gives up.
struct DeferredFrees {
  std::mutex mu;
  int teams = 0;
  std::vector<void*> ptrs;
  static DeferredFrees& get() {
    static DeferredFrees d;
    return d;
  }
  void free(void* p) {
    std::unique_lock<std::mutex> lk(mu);
    if (teams > 0) ptrs.push_back(p);
    else {
      lk.unlock();
      cudaFree(p);
    }
  }
  void enter() {
    std::lock_guard<std::mutex> lk(mu);
    ++teams;
  }
  void leave() {  // the team's threads have joined: nothing of it is in flight
    std::vector<void*> v;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (--teams > 0) return;
      v.swap(ptrs);
    }
    for (void* p : v) cudaFree(p);
  }
};

// TILEWIRE_TEST_GIN_CHAOS=S (a team in nodes): the k-th team a process makes runs its emulated
// GIN under chaos seed S + k, reordering among 16 ready puts, delays up to 50 us, late signals up
// to 200 us and slow flushes up to 300 us (a knob the test set itself is kept). With
// --gtest_repeat=R every test then runs under R seeds; each team prints its seed.
struct GinChaos {
  std::optional<ScopedEnv> seed, reorder, delay, late, flush;
  GinChaos() {
    const char* base = std::getenv("TILEWIRE_TEST_GIN_CHAOS");
    if (!base || !*base || virtual_ranks() == 0 || ranks_per_node() == 0) return;
    static int teams = 0;
    const std::string s = std::to_string(std::atoll(base) + teams++);
    const auto keep = [](std::optional<ScopedEnv>& e, const char* name, const char* value) {
      if (!std::getenv(name)) e.emplace(name, value);
    };
    keep(seed, "TILEWIRE_GIN_EMU_SEED", s.c_str());
    keep(reorder, "TILEWIRE_GIN_EMU_REORDER", "16");
    keep(delay, "TILEWIRE_GIN_EMU_DELAY_US", "50");
    keep(late, "TILEWIRE_GIN_EMU_LATE_SIGNAL_US", "200");
    keep(flush, "TILEWIRE_GIN_EMU_SLOW_FLUSH_US", "300");
    std::printf("[ gin chaos ] seed %s\n", std::getenv("TILEWIRE_GIN_EMU_SEED"));
  }
};

// fn(comm) on every rank of the test team (see the top of this file).
inline void run_team(const std::function<void(tw::Comm&)>& fn, const tw::CommConfig& cfg = {}) {
  struct Scope {
    Scope() { DeferredFrees::get().enter(); }
    ~Scope() { DeferredFrees::get().leave(); }
  } scope;
  const int v = virtual_ranks();
  if (v > 0) {
    const GinChaos chaos;
    tw::CommConfig c = cfg;
    if (c.ranks_per_node == 0) c.ranks_per_node = ranks_per_node();
    tw::Comm::run_virtual(0, v, fn, c);
  } else {
    tw::Comm::run_local({}, fn, cfg);
  }
}

#define TW_SKIP_UNLESS_SM90()                                      \
  do {                                                             \
    const std::string tw_why_ = ::tw_test::sm90_skip_reason();    \
    if (!tw_why_.empty()) GTEST_SKIP() << tw_why_;                 \
  } while (0)

}  // namespace tw_test

// Skip the calling test unless the test team (run_team) has at least `n` ranks.
#define TW_SKIP_UNLESS_RANKS(n)                                      \
  do {                                                               \
    const std::string tw_skip_why_ = ::tw_test::ranks_skip_reason(n); \
    if (!tw_skip_why_.empty()) GTEST_SKIP() << tw_skip_why_;         \
  } while (0)

// Skip the calling test (GTEST_SKIP returns from it) unless `n` GPUs are visible.
#define TW_SKIP_UNLESS_GPUS(n)                                      \
  do {                                                              \
    const std::string tw_skip_why_ = ::tw_test::gpu_skip_reason(n); \
    if (!tw_skip_why_.empty()) GTEST_SKIP() << tw_skip_why_;        \
  } while (0)

namespace tw_test {

// -------------------------------------------------------------------------------- RAII
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s) cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return s; }
};

// Plain device memory (cudaMalloc): deliberately *not* a window.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { TW_CUDA_CHECK(cudaMalloc(&p, n)); }
  ~DeviceBuffer() {
    if (p) DeferredFrees::get().free(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return p; }
};

// Holds stream `s` for about `ns` nanoseconds (one warp spinning on %globaltimer): a rank held
// back, so that its peers reach their waits first, or work queued behind a slow kernel.
static __global__ void hold_kernel(uint64_t ns) {
  const uint64_t t0 = tw::ptx::globaltimer();
  while (tw::ptx::globaltimer() - t0 < ns) __nanosleep(1000);
}
inline void hold_stream(cudaStream_t s, uint64_t ns) { hold_kernel<<<1, 32, 0, s>>>(ns); }

// ------------------------------------------------------------------------ seeded fills
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// p[i] = input_value(f, seed, rank, first + i) as T (exact: the values are representable).
template <class T>
__global__ void fill_kernel(T* p, size_t n, Fill f, uint64_t seed, int rank, uint64_t first, tw::DType t) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = from_float<T>(input_value(f, seed, rank, first + i, t));
}

// The tests' one runtime dtype -> type dispatch.
template <class F>
void with_type(tw::DType t, F&& f) {
  switch (t) {
    case tw::DType::kFloat32:
      f(float{});
      return;
    case tw::DType::kFloat16:
      f(__half{});
      return;
    case tw::DType::kBFloat16:
      f(__nv_bfloat16{});
      return;
  }
}

inline void fill(void* p, tw::DType t, size_t n, Fill f, uint64_t seed, int rank, cudaStream_t s, uint64_t first = 0) {
  if (n == 0) return;
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    const int grid = (int)std::min<size_t>((n + 255) / 256, 4096);
    fill_kernel<T><<<grid, 256, 0, s>>>(static_cast<T*>(p), n, f, seed, rank, first, t);
  });
  TW_CUDA_CHECK(cudaGetLastError());
}

inline constexpr uint8_t kPoison = 0xFF;  // 0xFFFF / 0xFFFFFFFF: NaN in every tilewire dtype
inline void poison(void* p, size_t bytes, cudaStream_t s) { TW_CUDA_CHECK(cudaMemsetAsync(p, kPoison, bytes, s)); }

// Copy `bytes` of device memory back, ordered after the work already on `s`.
inline Bytes to_host(const void* p, size_t bytes, cudaStream_t s) {
  Bytes b(bytes);
  TW_CUDA_CHECK(cudaMemcpyAsync(b.data(), p, bytes, cudaMemcpyDeviceToHost, s));
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  return b;
}

// n elements of T back from the device, after the work already on `s`; and v onto the device,
// ordered on `s`.
template <class T>
std::vector<T> download(const void* p, size_t n, cudaStream_t s) {
  std::vector<T> v(n);
  if (n) TW_CUDA_CHECK(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, s));
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  return v;
}
template <class T>
void upload(void* dst, const std::vector<T>& v, cudaStream_t s) {
  if (!v.empty()) TW_CUDA_CHECK(cudaMemcpyAsync(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
}

// "" when every rank's first `bytes` equal rank 0's, else the first difference.
inline std::string compare_ranks(const std::vector<Bytes>& per_rank, size_t bytes) {
  for (size_t r = 1; r < per_rank.size(); ++r)
    for (size_t i = 0; i < bytes; ++i)
      if (per_rank[r][i] != per_rank[0][i])
        return "rank " + std::to_string(r) + " differs from rank 0 at byte " + std::to_string(i) + ": " +
               hex(per_rank[r][i]) + " vs " + hex(per_rank[0][i]);
  return "";
}

// ------------------------------------------------------------------------- expectations
// Success when f() throws tw::Error with `code` and a message containing every needle.
template <class F>
::testing::AssertionResult throws_tw(F&& f, tw::Errc code, const std::vector<const char*>& needles) {
  try {
    f();
  } catch (const tw::Error& e) {
    const std::string m = e.what();
    if (e.code() != code)
      return ::testing::AssertionFailure()
             << "threw '" << tw::errc_name(e.code()) << "', expected '" << tw::errc_name(code) << "': " << m;
    for (const char* n : needles)
      if (m.find(n) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << n << "\": " << m;
    return ::testing::AssertionSuccess() << m;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-tilewire exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

inline const char* name(tw::DType t) { return tw::dtype_name(t); }
inline const char* name(tw::AllReduceAlgo a) { return tw::algo_name(a); }

}  // namespace tw_test
