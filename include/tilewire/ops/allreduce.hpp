// tilewire/ops/allreduce.hpp — device-initiated all-reduce (sum), reduce-scatter, all-gather
// over the LSA team.
//
// Algorithms (every rank ends bit-identical: partials are summed in fp32 in rank order 0..P-1
// and rounded once):
//
//   one-shot (small)  every rank pushes its whole input, LL-encoded (8 data bytes + 2 flags per
//                     16-byte store), into every peer's staging; each rank sums all P inputs.
//                     No barrier: flags carry a per-block epoch, staging is double-buffered.
//
//        rank0  --x0-->  staging@rank1          rank1 --x1--> staging@rank0
//        rank0: y = x0 + x1 (own x0 local)      rank1: y = x0 + x1
//
//   two-shot (large)  shard s of the buffer is owned by rank s. The owner loads shard s from
//                     every peer's send window (LSA loads), sums in rank order, and stores the
//                     result into every rank's recv window (LSA stores). One LSA barrier per
//                     block at entry (inputs final, outputs free) and exit (all stores landed,
//                     inputs no longer read).
//
//        shard:     [   s0   |   s1   ]
//        rank0:     reduce s0 = x0[s0]+x1[s0] -> y[s0] on rank0 and rank1
//        rank1:     reduce s1 = x0[s1]+x1[s1] -> y[s1] on rank0 and rank1
//
// reduce_scatter is the first half of two-shot (recv is rank r's shard, local memory);
// all_gather the second (each rank stores its block into every rank's recv window).
//
// Buffers: send and recv must lie inside windows from Comm::alloc_window (all ranks passing
// the same offsets), 16-byte aligned. In-place (send == recv) is allowed for all-reduce.
// Calls on one communicator must be issued in the same order on every rank; on the device they
// run in that order whatever stream each is made on (Comm::CallOrder). CUDA-graph capturable.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <optional>
#include <string>

#include "tilewire/runtime/dtype.hpp"
#include "tilewire/runtime/errors.hpp"  // tw::Status

namespace tw {

class Comm;

enum class AllReduceAlgo { kAuto, kOneShot, kTwoShot };
// "auto", "oneshot", "twoshot"; parse_algo also accepts one-shot|1 and two-shot|2 (the CLI's -a
// and Python's algo take the same spellings; src/ops/names.cpp).
const char* algo_name(AllReduceAlgo a);
std::optional<AllReduceAlgo> parse_algo(const std::string& s);

struct AllReduceArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements per rank
  DType dtype = DType::kBFloat16;
  AllReduceAlgo algo = AllReduceAlgo::kAuto;
};

// Size -> algorithm. One-shot while bytes <= oneshot_max_bytes (TILEWIRE_ONESHOT_MAX_BYTES),
// else two-shot. `nranks` is part of the rule for the day it depends on it.
AllReduceAlgo choose_allreduce_algo(size_t bytes, int nranks, size_t oneshot_max_bytes);

// Largest all-reduce (bytes per rank) `comm` runs one-shot (its staging size).
size_t oneshot_max_bytes(const Comm& comm);
// The algorithm allreduce(comm, a, ...) will run (a.algo unless kAuto).
AllReduceAlgo resolve_allreduce_algo(const Comm& comm, const AllReduceArgs& a);

// Checks that need no communicator: nulls, alignment, count, forced algorithm vs limits.
Status check_allreduce_args(const AllReduceArgs& a, int nranks, size_t oneshot_max_bytes);

// CUTLASS-style: can_implement() says why not; allreduce() throws tw::Error with that reason
// (nothing written) or enqueues the kernel on `stream`.
Status can_implement(const Comm& comm, const AllReduceArgs& a);
void allreduce(Comm& comm, const AllReduceArgs& a, cudaStream_t stream);

enum class ScatterGather { kReduceScatter, kAllGather };
const char* scatter_gather_name(ScatterGather op);  // "reduce_scatter", "all_gather"
std::optional<ScatterGather> parse_scatter_gather(const std::string& s);  // exactly those

// Checks of reduce_scatter / all_gather that need no communicator: nulls, alignment, dtype, the
// size count x element size x nranks without overflow, and send and recv disjoint (neither runs
// in place). `count` is recv_count (reduce-scatter) or send_count (all-gather). The launchers
// check the windowed buffer's extent between the two (check_overlap false, then true): an
// extent past the end of its window is what to report first.
Status check_scatter_gather_args(ScatterGather op, const void* send, const void* recv, size_t count, DType dtype,
                                 int nranks, bool check_overlap = true);

// send: count*nranks elements in a window; recv: count elements (any device memory).
void reduce_scatter(Comm& comm, const void* send, void* recv, size_t recv_count, DType dtype,
                    cudaStream_t stream);
// send: count elements (any device memory); recv: count*nranks elements in a window.
void all_gather(Comm& comm, const void* send, void* recv, size_t send_count, DType dtype,
                cudaStream_t stream);

}  // namespace tw
