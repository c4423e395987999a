// tilewire/runtime/comm.hpp — communicators and symmetric windows.
//
// A tw::Comm is a team of ranks whose kernels reach each other's symmetric windows with loads
// and stores (the LSA team), plus the library's control window (signals, barriers, and what the
// ops asked of it).
// Two backends, one interface: the ops and the device code cannot tell them apart.
//   NCCL      an NCCL communicator; one rank per GPU; windows registered with NCCL
//             (NCCL_WIN_COLL_SYMMETRIC); GIN for peers outside the LSA team.
//   virtual   P ranks on ONE GPU, one host thread each (run_virtual): windows are slices of one
//             allocation, host collectives a rendezvous between the threads, no NCCL at all.
//             Each rank gets an SM budget (sm_count() = the GPU's SMs / P) that every
//             persistent or co-resident grid honours, so the P grids are resident together.
//             For correctness at any rank count on one GPU; its timings say nothing of NVLink.
//             In virtual nodes (CommConfig::ranks_per_node) the LSA team is the node and peers
//             in other nodes are reached through an emulated GIN (multi-node on one GPU).
// Ways to make one:
//   (a) tw::Comm::create(id, rank, nranks, device): one process per GPU, the NCCL convention.
//       The caller makes the id once (tw::Comm::unique_id()) and distributes it (MPI,
//       torch.distributed, a file).
//   (b) tw::Comm::run_local(devices, fn): one process, one thread per local GPU; fn(comm) runs
//       on every thread and the first exception is rethrown. Used by the CLI, tests and benches.
//   (c) tw::Comm::run_virtual(device, P, fn): P virtual ranks on one GPU, same contract as (b).
// Every collective host call (create, alloc_window, Window::reset, barrier, destruction) must
// be made by all ranks in the same order. Windows are released, and a communicator destroyed,
// only after the work that uses them has completed (synchronize the streams it ran on, e.g.
// Comm::sync(stream)), as NCCL requires of window deregistration: the library does not
// synchronize the device (other ranks and other libraries share it).
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "tilewire/device/context.hpp"

namespace tw {

struct CommConfig {
  // The all-reduce's one-shot staging per (peer, parity), in bytes (0: TILEWIRE_ONESHOT_MAX_BYTES):
  // window sizes are fixed when the communicator is made, so the one op knob creation must know.
  size_t oneshot_max_bytes = 0;
  int signal_count = 1024;  // tw signals available to device code
  int max_blocks = 0;       // 0: 2 x SM count. Bounds the grid of every tilewire kernel.
  bool want_gin = true;     // request GIN contexts when some peer is outside the LSA team
  // Bound on every device wait, in ms (0: TILEWIRE_TIMEOUT_MS, default 300 000). A peer can be
  // late by tens of seconds in a real job (a checkpoint, a compilation, data loading), so the
  // default is minutes; tests that expect a timeout set a short one.
  int64_t timeout_ms = 0;
  // Virtual teams only (run_virtual): ranks per virtual node, L (0: P, one node). The P ranks
  // form P / L nodes of L consecutive ranks; a node is the LSA team, and peers in other nodes
  // are reached only through GIN, which the virtual backend emulates (src/runtime/gin_emu.hpp:
  // NCCL GIN's weakest ordering, by a host proxy). L divides P; every rank passes the same L.
  int ranks_per_node = 0;
};

class Comm;

// Launch knobs every op shares, read from the environment once, when the communicator is created
// (so every rank of a communicator uses the same values, and no launch parses the environment).
// An op's own knobs belong to the op (its need, src/runtime/needs.hpp).
struct KernelTuning {
  bool pdl = true;  // TILEWIRE_PDL
};

// A symmetric window: the same size on every rank, registered with NCCL_WIN_COLL_SYMMETRIC,
// so that a peer's copy of byte `off` is reachable through the LSA team. RAII: deregistered
// and freed when destroyed (collective, like creation).
class Window {
 public:
  Window() = default;
  Window(Window&&) noexcept;
  Window& operator=(Window&&) noexcept;
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;
  ~Window();

  // Null once the window is released, or once its communicator is gone (which released it).
  void* data() const { return valid() ? ptr_ : nullptr; }
  template <class T> T* as() const { return static_cast<T*>(data()); }
  size_t bytes() const { return bytes_; }
  DevWindow dev() const { return dev_; }            // what kernels take (device/peer.cuh)
  ncclWindow_t nccl_handle() const { return dev_.nccl; }  // null on a virtual team
  bool valid() const { return ptr_ != nullptr && !alive_.expired(); }
  void reset();  // collective: deregister and free now

 private:
  friend class Comm;
  Comm* comm_ = nullptr;
  std::weak_ptr<int> alive_;  // expires when comm_ is destroyed (which releases the memory)
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  DevWindow dev_{};
};

// A registered window as the ops see it: where a pointer lies.
struct WindowRef {
  DevWindow win{};
  size_t offset = 0;  // byte offset of the pointer within the window
  uint64_t serial = 0;  // unique to this allocation in the process (never reused): keys per-window state
  uint64_t ordinal = 0;  // the window's place in its communicator's allocations: equal on every rank
};

enum class HostReduce { kSum, kMin, kMax };

class Comm {
 public:
  static ncclUniqueId unique_id();
  static std::unique_ptr<Comm> create(const ncclUniqueId& id, int rank, int nranks, int device,
                                      const CommConfig& cfg = {});
  // devices empty: every visible GPU. If one rank throws, the others' communicators are aborted
  // (their NCCL calls and bounded waits then fail instead of waiting for the lost rank) and the
  // first exception is rethrown after every thread has joined.
  static void run_local(std::span<const int> devices, const std::function<void(Comm&)>& fn,
                        const CommConfig& cfg = {});
  // P virtual ranks on `device`, one host thread each; fn(comm) runs on every thread, failures
  // as in run_local (a failed rank aborts the team: peers' host collectives and bounded device
  // waits then fail instead of waiting for it). Needs CUDA_DEVICE_MAX_CONNECTIONS >= min(32, 4P)
  // in the environment before the process first uses CUDA (each rank's stream its own hardware
  // queue; otherwise a rank's kernel can wait in a queue behind a peer kernel that waits for it)
  // and, for P > 1, CUDA_MODULE_LOADING=EAGER (a lazy first load of a kernel waits for the
  // device, where a peer's kernel may be waiting for this rank); refused with kUnsupported
  // otherwise.
  static void run_virtual(int device, int nranks, const std::function<void(Comm&)>& fn,
                          const CommConfig& cfg = {});
  // Same, rank r made with per_rank[r] (nranks = per_rank.size()): for tests of ranks that
  // disagree; creation fails on every rank when their configurations shape kernels differently.
  static void run_virtual(int device, std::span<const CommConfig> per_rank, const std::function<void(Comm&)>& fn);

  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

  int rank() const { return ctx_.rank; }
  int nranks() const { return ctx_.nranks; }
  int device() const { return device_; }
  int lsa_size() const { return ctx_.lsa_size; }
  bool all_lsa() const { return ctx_.lsa_size == ctx_.nranks; }
  bool gin_available() const { return ctx_.gin_contexts > 0; }
  // SMs this rank's persistent / co-resident grids may occupy: the smallest GPU's SM count on
  // the NCCL backend, the GPU's SMs / P on a virtual team (agreed by every rank).
  int sm_count() const { return sm_count_; }
  bool is_virtual() const { return virtual_; }
  // Ranks sharing this rank's GPU (1 on the NCCL backend): a device-wide residency limit (e.g.
  // co-resident clusters) is divided by it.
  int ranks_per_device() const { return virtual_ ? ctx_.nranks : 1; }
  const char* backend_name() const { return is_virtual() ? "virtual" : "nccl"; }
  ncclComm_t nccl() const { return comm_; }  // null on a virtual team
  const DevCtx& dev_ctx() const { return ctx_; }
  const KernelTuning& tuning() const { return tuning_; }

  // Collective. bytes > 0; rounded up to NCCL_WIN_REQUIRED_ALIGNMENT. Throws when NCCL could
  // not make the registration symmetric (2.28.9 returns success with no handle then).
  Window alloc_window(size_t bytes);

  // The window holding [p, p + bytes), or throws kInvalidArgument saying why (`what` names
  // the argument in the message: "send", "recv").
  WindowRef find_window(const void* p, size_t bytes, const char* what) const;

  // After a failed launch/sync: if a device wait timed out, abort the communicator and throw
  // kTimeout with the wait's diagnostic.
  void check_fault() const;
  // Right after enqueueing a kernel: a launch error becomes check_fault()'s kTimeout when a device
  // wait of this communicator faulted, else kCuda naming `op`.
  void check_launch(const char* op) const;
  // Synchronize `stream`; on failure turn a recorded device fault into a tw::Error.
  void sync(cudaStream_t stream) const;

  // Host barrier over all ranks. Collective.
  void barrier();
  // Called by every launcher right after it enqueued a kernel that waits on other ranks. NCCL
  // backend: nothing. Virtual team: a host rendezvous, so that every rank has enqueued its kernel
  // of this collective before any rank enqueues more work: a GPU hardware queue runs in order,
  // and a rank's later work queued ahead of a peer's kernel in a shared queue would block it
  // behind a kernel that waits for that peer. Collective (ranks make the same calls anyway).
  void launched(const char* op) const;
  // Called by every op on entry (before its checks) with its name, a string literal. Virtual
  // team: recorded per rank, and a device wait's timeout lists each rank's last call entered.
  // NCCL backend: nothing.
  void note_call(const char* op) const;
  // One field of a call's record (agree_on_call).
  struct CallField {
    const char* name;
    std::string value;
  };
  // TILEWIRE_CHECK_CALLS=1 (agreed by every rank at creation): compare this call's record (the
  // op and the fields that must match: sizes, dtypes, algorithms, buffers' windows and offsets)
  // across ranks in a host collective; a call that differs throws kInvalidArgument on every rank,
  // naming the first field that differs and both values, before anything is enqueued. Ops call it
  // after their local checks. Off (the default): nothing, as the round trip costs a host
  // collective per call. Collective when on.
  void agree_on_call(const char* op, std::initializer_list<CallField> fields);
  bool checks_calls() const { return check_calls_; }
  // Calls on one communicator run in the order the host makes them, whatever stream each is
  // made on: the device protocol's state (epochs, staging, workspaces) belongs to the
  // communicator, so two of its calls must never run at once. Every op opens a CallOrder before
  // its first launch: when the previous call was on another stream (and in the same capture, or
  // neither captured), this call's stream waits for it. On success the scope records the
  // communicator's event on the stream. One host thread makes a communicator's calls at a time
  // (as with NCCL); a CUDA graph's replays are ordered by the stream they are launched on.
  class CallOrder {
   public:
    CallOrder(Comm& comm, cudaStream_t stream);
    ~CallOrder();
    CallOrder(const CallOrder&) = delete;
    CallOrder& operator=(const CallOrder&) = delete;

   private:
    Comm& comm_;
    cudaStream_t stream_;
    unsigned long long capture_ = 0;
    int exceptions_ = 0;
    bool outer_ = false;
  };
  // `n` consecutive signal indices for one object's protocol (the EP buffer's GIN path), taken
  // from the top of [0, signal_count - 1): the last index is clock sync's, and user code counts
  // from 0. Collective (the caller is, as every rank makes the same objects in the same order):
  // ranks that would get different indices throw kState on every rank. kInvalidArgument when
  // they do not fit (CommConfig::signal_count). release_signals(base) gives them back (local).
  int reserve_signals(int n, const char* owner);
  void release_signals(int base) noexcept;
  // Host collectives on host memory, synchronous (NCCL on a private stream, or the virtual
  // team's rendezvous). Every rank passes the same n / bytes. Collective.
  void allreduce_host(uint64_t* values, size_t n, HostReduce op);
  void allgather_host(const void* send, void* recv, size_t bytes);  // recv: nranks x bytes, rank order

  // Abort NCCL (ncclCommAbort), end this rank's device waits (they trap within about a
  // millisecond) and mark the comm unusable; used on fatal errors. Call it on the thread that
  // makes the communicator's calls; from any other thread use request_abort().
  void abort() noexcept;
  // From another thread (run_local's failure path): the device waits end and the virtual team's
  // rendezvous fail at once; NCCL is aborted now unless the owner is inside an NCCL call on this
  // communicator, in which case the owner aborts it when that call returns (ncclCommAbort
  // racing a call on the same communicator is undefined). The owner's next call fails (kState).
  void request_abort() noexcept;
  bool aborted() const { return aborted_.load() || abort_requested_.load(); }
  // Throws kState if the comm was aborted or the calling thread's device is not this comm's.
  void require_usable(const char* op) const;

 private:
  struct Impl;  // src/runtime/comm_impl.hpp: registries, locks, the virtual team, call order, grants
  friend struct NeedAccess;  // src/runtime/needs.hpp: what this communicator placed for each op's need
  Comm();
  void init(const ncclUniqueId& id, int rank, int nranks, int device, const CommConfig& cfg);
  void init_virtual(int rank, int device, const CommConfig& cfg);  // impl_->team set first
  void init_common(const CommConfig& cfg, int device_sms);  // everything after the team exists
  void agree_on_protocol(const CommConfig& cfg);            // every rank's knobs equal, or throw
  // "" when every rank's record (agreement.hpp, encoded) equals this one's, else what differs (the
  // same on every rank).
  std::string first_difference(const std::string& encoded_record);
  void release_window(Window& w) noexcept;
  void reserve_scratch(size_t bytes);
  static void require_device(int device);  // a visible CUDA device, or kUnsupported / kInvalidArgument
  // A sticky CUDA error (a trapped kernel, a fault) leaves the context unusable: abort, so that
  // release and teardown skip their collectives instead of waiting for peers in vain.
  void abort_if_context_lost() noexcept;
  void abort_locked() noexcept;  // abort() with nccl_mu_ held
  // Runs f (an NCCL call on comm_) with nccl_mu_ held; if the communicator was aborted it is
  // not called and ncclInvalidUsage is returned. A request_abort that came meanwhile is acted on.
  template <class F>
  ncclResult_t nccl_call(F&& f) noexcept;
  // One thread per rank: make(r) builds rank r's communicator, fn runs on it; the first failure
  // aborts every live communicator (and calls on_fail) and is rethrown after all have joined.
  static void run_threads(int n, const std::function<std::unique_ptr<Comm>(int)>& make,
                          const std::function<void(Comm&)>& fn, const std::function<void()>& on_fail);
  friend class Window;

  std::unique_ptr<Impl> impl_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  int device_ = -1;
  int sm_count_ = 0;
  bool virtual_ = false;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> abort_requested_{false};  // request_abort: the owner aborts at its next NCCL exit
  ncclComm_t comm_ = nullptr;
  bool devcomm_made_ = false;
  DevCtx ctx_{};
  KernelTuning tuning_{};
  Window control_;
  DeviceFault* fault_host_ = nullptr;
  cudaStream_t stream_ = nullptr;   // the library's own work (host collectives, window probes)
  bool check_calls_ = false;  // TILEWIRE_CHECK_CALLS, agreed at creation
  uint64_t windows_made_ = 0;  // WindowRef::ordinal of the next window
};

}  // namespace tw
