// src/runtime/op_entry.hpp — the one way every communicator op enters (collectives, the fused
// GEMM ops, EP, the clock sync). In this order:
//   0. the call is noted (Comm::note_call: on a virtual team a device timeout names each rank's
//      last call); an op entered inside another on the same thread (dispatch runs layout) is part
//      of the outer call and is not noted, so the timeout names the call the caller made;
//   1. the communicator is usable: not aborted, and the current device is its device (kState);
//   2. the op's own argument checks: a Status that is not ok throws kInvalidArgument with its
//      reason (the checks may also throw their own error); either way nothing has been launched
//      or written, on this rank or any other;
//   3. under TILEWIRE_CHECK_CALLS, the call record every rank must agree on (Comm::agree_on_call);
//      the record is built only then, since it looks windows up;
//   4. unless the call moves nothing, its place in the communicator's order (Comm::CallOrder: the
//      stream waits for the previous call when that one was on another stream), held until the
//      OpEntry goes out of scope, after the op's last launch.
// A call that moves nothing (an empty all-reduce, say) makes steps 1-3 and returns.
#pragma once
#include <optional>
#include <utility>

#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {

class OpEntry {
 public:
  // op: the op's name, a string literal (Comm::note_call keeps the pointer). check: () -> Status;
  // record: () -> void, calls comm.agree_on_call(op, {...}). A refusal's error names the op's own
  // file and line (the call site's, by default).
  template <class Check, class Record>
  OpEntry(Comm& comm, const char* op, cudaStream_t stream, Check&& check, Record&& record, bool moves_nothing = false,
          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (nest_.outermost()) comm.note_call(op);
    comm.require_usable(op);
    const Status st = std::forward<Check>(check)();
    if (!st.ok) throw_error(Errc::kInvalidArgument, file, line, st.reason);
    if (comm.checks_calls()) std::forward<Record>(record)();
    if (!moves_nothing) order_.emplace(comm, stream);
  }
  OpEntry(const OpEntry&) = delete;
  OpEntry& operator=(const OpEntry&) = delete;

  // Whether the call has nothing to move: the op returns without a launch.
  bool moves_nothing() const { return !order_.has_value(); }

 private:
  // The depth of OpEntries alive on this thread (a virtual team runs each rank on its own
  // thread); a member, so a throwing constructor still unwinds it.
  class Nest {
   public:
    Nest() { ++depth_; }
    ~Nest() { --depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    bool outermost() const { return depth_ == 1; }

   private:
    static inline thread_local int depth_ = 0;
  };
  Nest nest_;
  std::optional<Comm::CallOrder> order_;
};

}  // namespace tw
