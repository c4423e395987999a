// Launchers for the all-reduce family: validation, algorithm choice, the one runtime ->
// compile-time dispatch on dtype, and the launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "../../runtime/op_entry.hpp"
#include "../../runtime/pdl_launch.hpp"
#include "kernels.cuh"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/dtype_dispatch.cuh"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace {

// The one place the LSA team size becomes a compile-time bound on the sources.
template <class F>
void dispatch_ranks(int P, F&& f) {
  if (P <= 1) f(std::integral_constant<int, 1>{});
  else if (P == 2) f(std::integral_constant<int, 2>{});
  else if (P <= 4) f(std::integral_constant<int, 4>{});
  else f(std::integral_constant<int, 8>{});
}

// Every kernel of the family with programmatic dependent launch (runtime/pdl_launch.hpp).
template <class... Params, class... Args>
void launch(const Comm& comm, void (*kernel)(Params...), int grid, int block, cudaStream_t stream, Args&&... args) {
  launch_pdl(comm, kernel, dim3(grid), dim3(block), 0, stream, std::forward<Args>(args)...);
  comm.launched("allreduce family launch");
}

Status common_checks(const Comm& comm, const char* op) {
  if (comm.aborted()) return Status{false, std::string(op) + ": communicator was aborted; create a new one"};
  int dev = -1;
  cudaGetDevice(&dev);
  if (dev != comm.device())
    return Status{false, std::string(op) + ": current CUDA device is " + std::to_string(dev) + " but the communicator is on device " +
                             std::to_string(comm.device()) + " (call cudaSetDevice first)"};
  if (!comm.all_lsa())
    return Status{false, std::string(op) + ": needs every rank load/store reachable (LSA team " +
                             std::to_string(comm.lsa_size()) + " of " + std::to_string(comm.nranks()) +
                             " ranks); the GIN collective path is not implemented yet"};
  if (comm.lsa_size() > ops::kMaxRanks)
    return Status{false, std::string(op) + ": LSA team of " + std::to_string(comm.lsa_size()) + " exceeds the " +
                             std::to_string(ops::kMaxRanks) + " ranks the kernels are built for"};
  return Status{};
}

Status window_check(const Comm& comm, const void* p, size_t bytes, const char* what, WindowRef* out) {
  try {
    *out = comm.find_window(p, bytes, what);
  } catch (const Error& e) {
    return Status{false, e.what()};
  }
  return Status{};
}

int twoshot_threads(const Comm& comm) { return ops::allreduce_state(comm).knobs->twoshot_threads; }

int twoshot_blocks(const Comm& comm, size_t vectors_per_rank) {
  const ops::AllReduceKnobs& k = *ops::allreduce_state(comm).knobs;
  int cap = k.twoshot_block_cap;
  if (cap <= 0) cap = comm.sm_count();
  cap = std::min(cap, comm.dev_ctx().max_blocks);
  if (comm.is_virtual()) cap = std::min(cap, comm.sm_count());  // the SM budget (Comm checked the knob)
  const size_t per_block = (size_t)k.twoshot_threads * 4;
  const size_t want = (vectors_per_rank + per_block - 1) / per_block;
  return (int)std::max<size_t>(1, std::min<size_t>(cap, want));
}

// The call record TILEWIRE_CHECK_CALLS compares across ranks (Comm::agree_on_call): what must
// match for the kernels to pair up, the windowed buffers' windows and offsets among it (bytes 0:
// the buffer is local, or there is none).
void agree(Comm& comm, const char* op, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
           size_t count, DType dtype, const char* algo) {
  if (!comm.checks_calls()) return;
  const auto at = [&](const void* p, size_t bytes, const char* what) {
    if (bytes == 0) return std::string("-");
    const WindowRef w = comm.find_window(p, bytes, what);
    return "window " + std::to_string(w.ordinal) + " offset " + std::to_string(w.offset);
  };
  comm.agree_on_call(op, {{"count", std::to_string(count)},
                          {"dtype", dtype_name(dtype)},
                          {"algorithm", algo},
                          {"in place", send == recv ? "yes" : "no"},
                          {"send", at(send, send_bytes, "send")},
                          {"recv", at(recv, recv_bytes, "recv")}});
}

}  // namespace

size_t oneshot_max_bytes(const Comm& comm) {
  return ops::allreduce_state(comm).knobs->staging_bytes / (4 * (size_t)comm.lsa_size());
}

AllReduceAlgo resolve_allreduce_algo(const Comm& comm, const AllReduceArgs& a) {
  if (a.algo != AllReduceAlgo::kAuto) return a.algo;
  return choose_allreduce_algo(a.count * dtype_size(a.dtype), comm.nranks(), oneshot_max_bytes(comm));
}

Status can_implement(const Comm& comm, const AllReduceArgs& a) {
  if (Status s = common_checks(comm, "allreduce"); !s) return s;
  if (Status s = check_allreduce_args(a, comm.nranks(), oneshot_max_bytes(comm)); !s) return Status{false, "allreduce: " + s.reason};
  if (a.count == 0) return Status{};
  const size_t bytes = a.count * dtype_size(a.dtype);
  WindowRef w;
  if (Status s = window_check(comm, a.send, bytes, "send", &w); !s) return Status{false, "allreduce: " + s.reason};
  if (Status s = window_check(comm, a.recv, bytes, "recv", &w); !s) return Status{false, "allreduce: " + s.reason};
  return Status{};
}

void allreduce(Comm& comm, const AllReduceArgs& a, cudaStream_t stream) {
  const size_t bytes = a.count * dtype_size(a.dtype);
  AllReduceAlgo algo = AllReduceAlgo::kAuto;
  const auto check = [&] {
    if (Status s = can_implement(comm, a); !s) return s;
    algo = resolve_allreduce_algo(comm, a);
    return Status{};
  };
  const auto record = [&] { agree(comm, "allreduce", a.send, bytes, a.recv, bytes, a.count, a.dtype, algo_name(algo)); };
  const OpEntry entry(comm, "allreduce", stream, check, record, a.count == 0);
  if (entry.moves_nothing()) return;
  const DevCtx& ctx = comm.dev_ctx();
  const ops::AllReduceState st = ops::allreduce_state(comm);
  const ops::AllReduceKnobs& k = *st.knobs;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (algo == AllReduceAlgo::kOneShot) {
      ops::OneShotLayout lay;
      lay.base = st.staging_offset;
      lay.epochs = st.epochs;
      lay.nranks = ctx.lsa_size;
      lay.blocks = k.oneshot_blocks;
      lay.blk_lines = k.staging_bytes / (2 * (size_t)ctx.lsa_size * k.oneshot_blocks * 16);
      launch(comm, ops::oneshot_allreduce<T>, k.oneshot_blocks, k.oneshot_threads, stream, ctx,
             static_cast<const T*>(a.send), static_cast<T*>(a.recv), a.count, lay);
    } else {
      WindowRef ws = comm.find_window(a.send, bytes, "send"), wr = comm.find_window(a.recv, bytes, "recv");
      const size_t vecs = bytes / 16 / comm.nranks() + 1;
      const int grid = twoshot_blocks(comm, vecs);
      const auto variant = k.twoshot_variant;
      using V = ops::TwoShotVariant;
      // Push (stores only) wins from ~8 MiB (364 vs 343 GB/s at 1 GiB); below, its extra barrier
      // costs more than it saves (measured on 2xH200, see docs/allreduce.md).
      const bool push = comm.lsa_size() == 2 && a.send != a.recv &&
                        (variant == V::kPush || (variant == V::kAuto && bytes >= (size_t(8) << 20)));
      dispatch_ranks(comm.lsa_size(), [&](auto kp) {
        constexpr int kP = decltype(kp)::value;
        auto kernel = push ? ops::twoshot<T, 2, ops::Mode::kAllReducePush> : ops::twoshot<T, kP, ops::Mode::kAllReduce>;
        launch(comm, kernel, grid, twoshot_threads(comm), stream, ctx, ws.win, ws.offset, static_cast<const T*>(a.send),
               wr.win, wr.offset, static_cast<T*>(a.recv), a.count);
      });
    }
  });
  comm.check_launch("allreduce launch");
}

void reduce_scatter(Comm& comm, const void* send, void* recv, size_t recv_count, DType dtype, cudaStream_t stream) {
  const size_t bytes = recv_count * dtype_size(dtype);
  WindowRef ws;
  const auto check = [&] {
    if (Status s = common_checks(comm, "reduce_scatter"); !s) return s;
    const auto args = [&](bool full) {
      return check_scatter_gather_args(ScatterGather::kReduceScatter, send, recv, recv_count, dtype, comm.nranks(), full);
    };
    if (Status s = args(false); !s) return s;
    if (recv_count) ws = comm.find_window(send, bytes * comm.nranks(), "send");  // throws its own error
    return args(true);
  };
  const auto record = [&] {  // recv: local
    agree(comm, "reduce_scatter", send, bytes * comm.nranks(), recv, 0, recv_count, dtype, "twoshot");
  };
  const OpEntry entry(comm, "reduce_scatter", stream, check, record, recv_count == 0);
  if (entry.moves_nothing()) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_ranks(comm.lsa_size(), [&](auto kp) {
      launch(comm, ops::twoshot<T, decltype(kp)::value, ops::Mode::kReduceScatter>, twoshot_blocks(comm, bytes / 16 + 1),
             twoshot_threads(comm), stream, comm.dev_ctx(), ws.win, ws.offset, static_cast<const T*>(send),
             DevWindow{}, size_t{0}, static_cast<T*>(recv), recv_count);
    });
  });
  comm.check_launch("reduce_scatter launch");
}

void all_gather(Comm& comm, const void* send, void* recv, size_t send_count, DType dtype, cudaStream_t stream) {
  const size_t bytes = send_count * dtype_size(dtype);
  WindowRef wr;
  const auto check = [&] {
    if (Status s = common_checks(comm, "all_gather"); !s) return s;
    const auto args = [&](bool full) {
      return check_scatter_gather_args(ScatterGather::kAllGather, send, recv, send_count, dtype, comm.nranks(), full);
    };
    if (Status s = args(false); !s) return s;
    if (send_count) wr = comm.find_window(recv, bytes * comm.nranks(), "recv");  // throws its own error
    return args(true);
  };
  const auto record = [&] {  // send: local
    agree(comm, "all_gather", send, 0, recv, bytes * comm.nranks(), send_count, dtype, "twoshot");
  };
  const OpEntry entry(comm, "all_gather", stream, check, record, send_count == 0);
  if (entry.moves_nothing()) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(comm, ops::twoshot<T, 1, ops::Mode::kAllGather>, twoshot_blocks(comm, bytes / 16 + 1),
           twoshot_threads(comm), stream,
           comm.dev_ctx(), DevWindow{}, size_t{0}, static_cast<const T*>(send), wr.win, wr.offset,
           static_cast<T*>(recv), send_count);
  });
  comm.check_launch("all_gather launch");
}

}  // namespace tw
