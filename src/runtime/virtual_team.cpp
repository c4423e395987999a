// The virtual team's rendezvous and Comm::run_virtual.
#include "virtual_team.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "comm_impl.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

VirtualTeam::VirtualTeam(int nranks, int device, uint64_t timeout_ms, int ranks_per_node, int signal_count)
    : nranks_(nranks),
      device_(device),
      ranks_per_node_(ranks_per_node > 0 ? ranks_per_node : nranks),
      timeout_(timeout_ms),
      ops_(nranks),
      slots_(nranks),
      calls_(nranks) {
  if (ranks_per_node_ < nranks_)
    gin_emu_ = std::make_unique<GinEmu>(device, nranks, signal_count, GinEmuChaos::from_env());
}

VirtualTeam::Round VirtualTeam::exchange(int rank, const std::string& op, const void* p, size_t bytes,
                                         const std::function<void(Round&)>& complete,
                                         const std::function<void()>& give_up) {
  std::unique_lock<std::mutex> lk(mu_);
  TW_REQUIRE(!aborted_, kState,
             "virtual team: " + op + " on rank " + std::to_string(rank) + ": the team was aborted (a rank failed)");
  ops_[rank] = op;
  slots_[rank].assign(static_cast<const char*>(p), static_cast<const char*>(p) + bytes);
  const uint64_t gen = generation_;
  if (++arrived_ == nranks_) {
    Round r;
    for (int q = 0; q < nranks_ && r.error.empty(); ++q)
      if (ops_[q] != ops_[0] || slots_[q].size() != slots_[0].size())
        r.error = "ranks disagree on the collective call: rank 0 made '" + ops_[0] + "' (" +
                  std::to_string(slots_[0].size()) + " bytes), rank " + std::to_string(q) + " made '" + ops_[q] +
                  "' (" + std::to_string(slots_[q].size()) + " bytes); every rank must make the same collective "
                  "calls in the same order";
    r.data = slots_;
    if (r.error.empty() && complete) {
      try {
        complete(r);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
    result_ = std::move(r);
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (generation_ == gen && !aborted_) {
      if (std::chrono::steady_clock::now() >= deadline) {
        aborted_ = true;
        cv_.notify_all();
        throw_error(Errc::kTimeout, __FILE__, __LINE__,
                    "virtual team: rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) +
                        " ms in the host collective '" + op + "' and " + std::to_string(nranks_ - arrived_) +
                        " of " + std::to_string(nranks_) +
                        " ranks never arrived: are all ranks making the same calls in the same order? "
                        "(TILEWIRE_HOST_TIMEOUT_MS sets the bound); the team is aborted");
      }
      cv_.wait_for(lk, std::chrono::milliseconds(give_up ? 5 : 200));
      if (give_up && generation_ == gen && !aborted_) {
        lk.unlock();
        try {
          give_up();
        } catch (...) {
          abort();
          throw;
        }
        lk.lock();
      }
    }
    TW_REQUIRE(generation_ != gen, kState,
               "virtual team: " + op + " on rank " + std::to_string(rank) + ": the team was aborted (a rank failed)");
  }
  Round mine = result_;  // a copy: the next round may replace result_ only after every rank left this one
  if (!mine.error.empty()) throw_error(Errc::kInvalidArgument, __FILE__, __LINE__, "virtual team: " + mine.error);
  return mine;
}

void VirtualTeam::abort() noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  aborted_ = true;
  cv_.notify_all();
}

bool VirtualTeam::aborted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return aborted_;
}

void VirtualTeam::note_call(int rank, const char* op) {
  std::lock_guard<std::mutex> lk(calls_mu_);
  Calls& c = calls_[rank];
  c.op = op;
  ++c.n;
}

std::string VirtualTeam::last_calls() const {
  std::lock_guard<std::mutex> lk(calls_mu_);
  std::string s;
  for (int r = 0; r < nranks_; ++r) {
    const Calls& c = calls_[r];
    s += (r ? ", rank " : "rank ") + std::to_string(r) + ": " +
         (c.n ? std::string(c.op) + " (call " + std::to_string(c.n) + ")" : std::string("none"));
  }
  return s;
}

std::shared_ptr<void> virtual_slab(int device, size_t bytes, bool host) {
  TW_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  if (host) {
    TW_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    void* d = nullptr;
    TW_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    TW_REQUIRE(d == p, kUnsupported, "virtual_slab: host memory is mapped at another device address (no unified addressing)");
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  }
  TW_CUDA_CHECK(cudaMalloc(&p, bytes));
  // Freed by whichever rank lets go last (after the collective release, or after an abort).
  return std::shared_ptr<void>(p, [device](void* q) {
    int cur = -1;
    cudaGetDevice(&cur);
    cudaSetDevice(device);
    cudaFree(q);
    if (cur >= 0) cudaSetDevice(cur);
  });
}

void Comm::run_virtual(int device, int nranks, const std::function<void(Comm&)>& fn, const CommConfig& cfg) {
  TW_REQUIRE(nranks >= 1 && nranks <= 32, kInvalidArgument,
             "run_virtual: nranks must be in [1, 32], got " + std::to_string(nranks));
  const std::vector<CommConfig> per_rank(nranks, cfg);
  run_virtual(device, per_rank, fn);
}

void Comm::run_virtual(int device, std::span<const CommConfig> per_rank, const std::function<void(Comm&)>& fn) {
  const int nranks = (int)per_rank.size();
  require_device(device);
  TW_REQUIRE(nranks >= 1 && nranks <= 32, kInvalidArgument,
             "run_virtual: nranks must be in [1, 32], got " + std::to_string(nranks));
  // Virtual nodes: one L for the team, dividing P (checked here, before any rank exists).
  const int L = per_rank[0].ranks_per_node > 0 ? per_rank[0].ranks_per_node : nranks;
  int signals = 0;
  for (int r = 0; r < nranks; ++r) {
    const int Lr = per_rank[r].ranks_per_node > 0 ? per_rank[r].ranks_per_node : nranks;
    TW_REQUIRE(Lr == L, kInvalidArgument,
               "run_virtual: CommConfig::ranks_per_node is " + std::to_string(L) + " on rank 0 and " +
                   std::to_string(Lr) + " on rank " + std::to_string(r) + "; every rank passes the same");
    signals = std::max(signals, per_rank[r].signal_count);
  }
  TW_REQUIRE(per_rank[0].ranks_per_node >= 0 && nranks % L == 0, kInvalidArgument,
             "run_virtual: CommConfig::ranks_per_node = " + std::to_string(per_rank[0].ranks_per_node) +
                 " does not divide the " + std::to_string(nranks) + " ranks into nodes");
  // The ranks' streams must not share a hardware work queue: a queue runs its commands in order, so
  // a rank's kernel queued behind another rank's kernel that waits for it would never start
  // (measured: the one-shot all-reduce at 3 and 8 ranks with CUDA's default of 8 queues). The
  // queue count is fixed when the process first uses CUDA, so it cannot be raised from here.
  {
    const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    const int have = c ? std::atoi(c) : 8;
    const int need = std::min(32, 4 * nranks);
    TW_REQUIRE(have >= need, kUnsupported,
               "run_virtual: " + std::to_string(nranks) + " ranks need CUDA_DEVICE_MAX_CONNECTIONS >= " +
                   std::to_string(need) + " (32 recommended; it is " + (c ? std::string(c) : std::string("unset: 8")) +
                   ") set in the environment before the process first uses CUDA, so that the ranks' streams get "
                   "their own hardware queues and cannot wait behind each other's kernels");
  }
  // Lazy module loading (CUDA's default) loads a kernel at its first launch, and the load waits
  // for the device: a rank launching a kernel for the first time while a peer's kernel spins for
  // that rank's next launch stalls until the peer's bounded wait gives up (measured: the EP
  // dispatch at 2 and 3 ranks, whichever rank first launched the layout kernel). Like the queue
  // count, the mode is fixed when the process first uses CUDA.
  if (nranks > 1) {
    const char* m = std::getenv("CUDA_MODULE_LOADING");
    TW_REQUIRE(m != nullptr && std::string(m) == "EAGER", kUnsupported,
               "run_virtual: " + std::to_string(nranks) + " ranks need CUDA_MODULE_LOADING=EAGER (it is " +
                   (m ? std::string(m) : std::string("unset: lazy")) +
                   ") set in the environment before the process first uses CUDA: a kernel's lazy first load waits "
                   "for the device, where a peer rank's kernel may be waiting for this rank");
  }
  auto team = std::make_shared<VirtualTeam>(
      nranks, device, (uint64_t)std::max<int64_t>(1, env::get_int("TILEWIRE_HOST_TIMEOUT_MS")), L, signals);
  run_threads(
      nranks,
      [&](int r) {
        TW_CUDA_CHECK(cudaSetDevice(device));
        std::unique_ptr<Comm> comm(new Comm());
        try {
          comm->impl_->team = team;
          comm->init_virtual(r, device, per_rank[r]);
        } catch (...) {
          comm->abort();
          throw;
        }
        return comm;
      },
      fn, [&] { team->abort(); });
}

}  // namespace tw
