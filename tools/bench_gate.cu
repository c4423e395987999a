// The start gate and host barrier of the multi-GPU benches (bench_gate.hpp).
#include "bench_gate.hpp"

#include <string>

#include "tilewire/runtime/errors.hpp"

namespace tw::cli {
namespace {

// One thread spins on the host-mapped flag[0] until it reaches `gen` (rolling compare), or ~10 s;
// then it writes `gen` to flag[1] (a plain store; ranks that expire together write the same value).
__global__ void gate_kernel(volatile uint32_t* flag, uint32_t gen) {
  const uint64_t t0 = clock64();
  while ((int32_t)(flag[0] - gen) < 0) {
    if (clock64() - t0 > 20000000000ull) {  // ~10 s at 2 GHz
      flag[1] = gen;
      __threadfence_system();
      break;
    }
  }
}

}  // namespace

HostBarrier::HostBarrier(int n, std::chrono::seconds timeout) : n_(n), timeout_(timeout) {}

void HostBarrier::arrive_and_wait(const char* where) {
  std::unique_lock<std::mutex> lk(mu_);
  TW_REQUIRE(!broken_, kState, std::string("host barrier at ") + where + ": another rank failed");
  const uint64_t gen = generation_;
  if (++arrived_ == n_) {  // the last one in releases everyone
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const bool done = cv_.wait_for(lk, timeout_, [&] { return generation_ != gen || broken_; });
  if (done && generation_ != gen) return;
  --arrived_;
  TW_REQUIRE(!broken_, kState, std::string("host barrier at ") + where + ": another rank failed");
  broken_ = true;  // timed out: the others must not wait another `timeout_` for this rank
  cv_.notify_all();
  throw_error(Errc::kTimeout, __FILE__, __LINE__,
              std::string("host barrier at ") + where + ": " + std::to_string(n_ - arrived_ - 1) + " of " +
                  std::to_string(n_) + " ranks did not arrive within " + std::to_string(timeout_.count()) + " s");
}

void HostBarrier::break_all() noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  broken_ = true;
  cv_.notify_all();
}

StartGate::StartGate() {
  void* p = nullptr;
  TW_CUDA_CHECK(cudaHostAlloc(&p, 2 * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  flag_ = static_cast<volatile uint32_t*>(p);
  flag_[0] = 0;
  flag_[1] = 0;
}

StartGate::~StartGate() {
  if (flag_) cudaFreeHost(const_cast<uint32_t*>(flag_));
}

void StartGate::hold(cudaStream_t stream, uint32_t gen) const {
  gate_kernel<<<1, 1, 0, stream>>>(flag_, gen);
  TW_CUDA_CHECK(cudaGetLastError());
}

void StartGate::open(uint32_t gen) const { flag_[0] = gen; }

}  // namespace tw::cli
