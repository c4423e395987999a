// src/runtime/comm_impl.hpp — the communicator's private state (Comm::Impl): what the public
// header does not show. Shared by comm.cpp and virtual_team.cpp (run_virtual hands each rank
// its team).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "needs.hpp"
#include "tilewire/runtime/comm.hpp"
#include "virtual_team.hpp"

namespace tw {

struct Comm::Impl {
  std::map<int, int> signal_ranges;  // reserve_signals: base -> count
  // Held around every NCCL call on the communicator (nccl_call) and by abort, so that
  // request_abort from another thread never runs ncclCommAbort while the owner is inside NCCL.
  std::mutex nccl_mu;
  void* scratch = nullptr;  // NCCL backend: device bounce buffer of the host collectives
  size_t scratch_bytes = 0;
  std::shared_ptr<VirtualTeam> team;  // virtual backend only
  // CallOrder's state: the event recorded after the last call, its stream's id and capture.
  cudaEvent_t last_call = nullptr;
  unsigned long long last_stream_id = 0;
  unsigned long long last_capture = 0;
  bool any_call = false;
  int call_depth = 0;  // nested scopes (the sequential path's all-reduce) order once
  struct Reg {
    uintptr_t base;
    size_t bytes;
    DevWindow dev;
    std::shared_ptr<void> slab;  // virtual backend: the team's allocation this window is a slice of
    uint64_t serial = 0;         // WindowRef::serial
    uint64_t ordinal = 0;        // WindowRef::ordinal
  };
  std::vector<Reg> windows;  // guarded by windows_mu: windows may be made, found and released
  mutable std::mutex windows_mu;  // from several host threads
  // The ops' needs (needs.hpp), in registration order: what each asked, and what it was granted.
  std::vector<NeedRequest> requests;
  std::vector<tw::Grant> grants;
  // Each need's verdict on this rank's knobs ("ok" or its refusal), compared across ranks with
  // the protocol; the first refusal is rethrown once the ranks agree that they all refused alike.
  std::vector<std::string> verdicts;
  std::exception_ptr refused;
};

}  // namespace tw
