// The parts of tilewire._C (module.cpp): the communicator and its windows (comm.cpp), the ops
// (ops.cpp), the grouped GEMM and the MoE FFN (moe.cpp).
#pragma once
#include <nanobind/nanobind.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "tilewire/runtime/comm.hpp"

namespace tw_py {

// Pointers and streams cross from Python as integers.
template <class T = void>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}
inline cudaStream_t stream_of(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// The windows a Python communicator made, by creation index (the same on every rank: window
// creation is collective). A tensor's memory stays registered until collect() or close(): the
// Python garbage collector drops tensors at different times on different ranks, and releasing a
// window is collective, so a destructor only marks its window free (pending); collect() frees
// the windows pending on every rank, in creation order, on every rank alike.
struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::unique_ptr<tw::Window>> windows;
  std::set<uint64_t> pending;
  uint64_t next = 0;
  bool closed = false;
};

struct PyComm {
  std::unique_ptr<tw::Comm> comm;
  std::shared_ptr<Registry> reg = std::make_shared<Registry>();
  ~PyComm();
  tw::Comm& get() const;  // throws kState once closed
};

void bind_comm(nanobind::module_& m);
void bind_ops(nanobind::module_& m);
void bind_moe(nanobind::module_& m);  // moe.cpp: the grouped GEMM and the MoE FFN

}  // namespace tw_py
