// tilewire/device/context.hpp — what a kernel needs to talk to its peers.
//
// tw::DevCtx is trivially copyable and passed by value to kernels (like ncclDevComm, which it
// carries for GIN). The host fills it once per communicator (tw::Comm::dev_ctx()); device code
// reads it. tw::DevWindow is how a kernel reaches every LSA peer's copy of a symmetric window.
// This header compiles in host and device code.
#pragma once
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>
#include <type_traits>

namespace tw {

// Written by a device wait that timed out, read by the host after the failing launch. Lives in
// pinned, mapped host memory so it survives the trap that ends the kernel.
struct DeviceFault {
  uint32_t flag;          // 0: no fault; 1: a wait timed out
  int32_t rank;           // world rank of the waiter
  int32_t block, thread;  // where it waited
  uint64_t expected, seen;
  uint64_t waited_ns;
  char what[48];          // which wait ("allreduce.ll", "barrier", "signal", ...)
  uint32_t abort;         // set by the host when the communicator is aborted: waits end (trap) now
};

// A symmetric window as kernels see it: LSA peer p's copy of byte `off` is at
//   lsa_base + p * lsa_stride + off
// The host fills it (tw::Window::dev()): from NCCL's mapping of a registered window, checked
// for every LSA peer when the window is made, or from slices of one allocation on a virtual
// team (P ranks on one GPU). Kernels never ask NCCL for pointers themselves, so both backends
// run the same device code. `nccl` is the NCCL handle for GIN transfers (null on a virtual team).
struct DevWindow {
  char* lsa_base = nullptr;  // byte 0 of LSA rank 0's copy
  uint64_t lsa_stride = 0;   // bytes from one LSA rank's copy to the next
  ncclWindow_t nccl = nullptr;
};

// One GIN operation as the emulated backend carries it (a virtual team in nodes: device/impl/
// gin_emu.cuh writes it, src/runtime/gin_emu.cpp delivers it). `seq` is written last: the slot's
// sequence number + 1 once the rest is in place, 0 while the slot is free.
struct GinEmuOp {
  uint64_t seq;
  uint64_t src, dst;  // device addresses: this rank's source, the peer's destination
  uint64_t bytes;     // 0: a signal alone
  uint64_t value;     // signal add
  int32_t peer;       // world rank
  int32_t signal;     // -1: none
};

// A rank's side of the emulated GIN backend (null ring: the backend is not emulated). The ring
// and the signals live in pinned host memory mapped into the device; the proxy thread of the
// team reads the ring, moves the data with memcpy (the windows are host memory) and writes the signals.
struct GinEmuView {
  GinEmuOp* ring = nullptr;            // host-mapped, ring_slots slots
  unsigned long long* tail = nullptr;  // device memory: ops this rank claimed (atomicAdd)
  const uint64_t* signals = nullptr;   // host-mapped: this rank's GIN signal values
  const uint64_t* consumed = nullptr;  // host-mapped: every op below this sequence read its source
  uint32_t ring_slots = 0;
};

struct DevCtx {
  ncclDevComm comm;         // NCCL device communicator, for GIN only (zero on a virtual team)
  int rank, nranks;         // world
  int lsa_rank, lsa_size;   // load/store-reachable team (NVLink/PCIe P2P); world ranks
                            // [rank - lsa_rank, rank - lsa_rank + lsa_size) are its members
  int gin_contexts;         // 0 when GPU-initiated networking is unavailable
  GinEmuView gin_emu;       // the emulated GIN backend (virtual nodes); ring null: NCCL's GIN
  int max_blocks;           // LSA barriers and per-block channels sized for this many CTAs
  uint64_t timeout_ns;      // bound on every device wait (TILEWIRE_TIMEOUT_MS)
  DeviceFault* fault;       // host-mapped; first timed-out waiter records itself here

  // Signals: a uint64 counter per index, local copy in the control window at signal_offset.
  DevWindow control;        // library-owned symmetric window (signals, barriers, the ops' needs)
  uint64_t signal_offset;   // byte offset of signals[0] in `control`
  int signal_count;
  // LSA barriers (device/barrier.cuh): max_blocks x lsa_size uint32 inbox slots in `control`
  // (slot [index][src]: the last epoch LSA rank src arrived with at barrier `index`), and this
  // rank's own epoch per barrier in local device memory.
  uint64_t barrier_offset;
  uint32_t* barrier_epochs;
  // The rest of `control` holds what the ops asked of the communicator at its creation (their
  // needs: src/runtime/needs.hpp); each op knows its own offsets (need_grant).
};

static_assert(std::is_trivially_copyable_v<DevWindow>, "DevWindow is passed to kernels by value");
static_assert(std::is_trivially_copyable_v<DevCtx>, "DevCtx is passed to kernels by value");

}  // namespace tw
