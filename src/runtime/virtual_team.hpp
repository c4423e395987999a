// src/runtime/virtual_team.hpp — the host side of a virtual team: P ranks, one host thread
// each, on one GPU. Replaces NCCL's bootstrap for the host collectives the library makes
// (barrier, small reductions, gathers, window allocation): a rendezvous under one mutex.
//
// Every wait is bounded (the communicator's timeout): a rank that never arrives ends in
// kTimeout naming the collective and who had arrived, and the team is aborted, so no thread
// waits forever. abort() (a failed rank, run_virtual's clean-up) wakes every waiter with kState.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gin_emu.hpp"

namespace tw {

class VirtualTeam {
 public:
  // What one collective round gave every rank: each rank's contribution in rank order, and an
  // object the completing rank made (a shared allocation).
  struct Round {
    std::vector<std::vector<char>> data;
    std::shared_ptr<void> obj;
    std::string error;  // set by `complete`: every rank throws kInvalidArgument with it
  };

  // ranks_per_node < nranks: virtual nodes, with the emulated GIN between them (gin_emu.hpp,
  // signal_count signals per rank).
  VirtualTeam(int nranks, int device, uint64_t timeout_ms, int ranks_per_node = 0, int signal_count = 0);
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  int ranks_per_node() const { return ranks_per_node_; }
  GinEmu* gin_emu() const { return gin_emu_.get(); }  // null in one node

  // Collective: rank `rank` contributes `bytes` at `p` to round `op`. When the last rank
  // arrives, `complete` (optional) runs under the lock on the full round. Ranks that call
  // different ops, or different sizes, all fail with a message naming both. While it waits,
  // `give_up` (optional) is polled every few ms: when it throws (a device fault of this rank's),
  // the team is aborted and the exception leaves exchange().
  Round exchange(int rank, const std::string& op, const void* p, size_t bytes,
                 const std::function<void(Round&)>& complete = {}, const std::function<void()>& give_up = {});

  void abort() noexcept;
  bool aborted() const;

  // What each rank's host last entered (every op's OpEntry, before its checks): a device wait's
  // timeout names them, so that a rank that never made the call the others wait in shows. `op`
  // is kept as given (no copy per call): a string literal, as every OpEntry's op name is.
  void note_call(int rank, const char* op);
  std::string last_calls() const;  // "rank 0: EpBuffer::dispatch (call 3), rank 1: none, ..."

 private:
  const int nranks_, device_, ranks_per_node_;
  std::unique_ptr<GinEmu> gin_emu_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<std::string> ops_;
  std::vector<std::vector<char>> slots_;
  struct Calls {
    const char* op = nullptr;
    uint64_t n = 0;  // calls entered
  };
  mutable std::mutex calls_mu_;
  std::vector<Calls> calls_;
  Round result_;
};

// A device allocation shared by the ranks of a virtual team (one slice per rank); freed when
// the last rank lets go of it. host: pinned host memory mapped into the device instead (the
// windows of a team in nodes, moved by the emulated GIN's proxy), at the same address on both sides.
std::shared_ptr<void> virtual_slab(int device, size_t bytes, bool host = false);
// The bytes from one rank's slice of a window to the next (the window's LSA stride): its size
// rounded up to 256 bytes, so that every rank's copy of an aligned offset is aligned alike (TMA
// loads the peers' copies: allgather_gemm's fused path). NCCL's strides are 4 GiB multiples.
inline size_t virtual_slice(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace tw
