// tilewire/runtime/comm.hpp — communicators and symmetric windows.
//
// A tw::Comm wraps an NCCL communicator, its device communicator (ncclDevComm) and the
// library's control window. Two ways to make one:
//   (a) tw::Comm::create(id, rank, nranks, device): one process per GPU, the NCCL convention.
//       The caller makes the id once (tw::Comm::unique_id()) and distributes it (MPI,
//       torch.distributed, a file).
//   (b) tw::Comm::run_local(devices, fn): one process, one thread per local GPU; fn(comm) runs
//       on every thread and the first exception is rethrown. Used by the CLI, tests and benches.
// Every collective host call (create, alloc_window, destruction) must be made by all ranks.
#pragma once
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tilewire/device/context.hpp"

namespace tw {

struct CommConfig {
  // Bytes of one-shot all-reduce staging per (peer, parity). 0: TILEWIRE_ONESHOT_MAX_BYTES.
  size_t oneshot_max_bytes = 0;
  int signal_count = 1024;  // tw signals available to device code
  int max_blocks = 0;       // 0: 2 x SM count. Bounds the grid of every tilewire kernel.
  bool want_gin = true;     // request GIN contexts when some peer is outside the LSA team
};

class Comm;

// Launch knobs, read from the environment once, when the communicator is created (so every
// rank of a communicator uses the same values, and no launch parses the environment).
struct KernelTuning {
  bool pdl = true;              // TILEWIRE_PDL
  int oneshot_threads = 256;    // TILEWIRE_ONESHOT_THREADS
  int twoshot_threads = 512;    // TILEWIRE_ALLREDUCE_THREADS
  int twoshot_block_cap = 0;    // TILEWIRE_ALLREDUCE_BLOCKS (0: SM count)
  enum class Variant { kAuto, kLoad, kPush } twoshot_variant = Variant::kAuto;  // TILEWIRE_TWOSHOT_VARIANT
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

  void* data() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  ncclWindow_t handle() const { return handle_; }
  bool valid() const { return ptr_ != nullptr; }
  void reset();  // collective: deregister and free now

 private:
  friend class Comm;
  Comm* comm_ = nullptr;
  std::weak_ptr<int> alive_;  // expires when comm_ is destroyed (which releases the memory)
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  ncclWindow_t handle_ = nullptr;
};

// A registered window as the ops see it: where a pointer lies.
struct WindowRef {
  ncclWindow_t handle = nullptr;
  size_t offset = 0;  // byte offset of the pointer within the window
};

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

  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

  int rank() const { return ctx_.rank; }
  int nranks() const { return ctx_.nranks; }
  int device() const { return device_; }
  int lsa_size() const { return ctx_.lsa_size; }
  bool all_lsa() const { return ctx_.lsa_size == ctx_.nranks; }
  bool gin_available() const { return ctx_.gin_contexts > 0; }
  int sm_count() const { return sm_count_; }
  ncclComm_t nccl() const { return comm_; }
  const DevCtx& dev_ctx() const { return ctx_; }
  const KernelTuning& tuning() const { return tuning_; }

  // Collective. bytes > 0; rounded up to NCCL_WIN_REQUIRED_ALIGNMENT. Throws when NCCL could
  // not make the registration symmetric (2.28.9 returns success with no handle then).
  Window alloc_window(size_t bytes);

  // The window holding [p, p + bytes), or throws kInvalidArgument saying why (`what` names
  // the argument in the message: "send", "recv").
  WindowRef find_window(const void* p, size_t bytes, const char* what) const;

  // After a failed launch/sync: if a device wait timed out, throw kTimeout with its diagnostic.
  void check_fault() const;
  // Synchronize `stream`; on failure turn a recorded device fault into a tw::Error.
  void sync(cudaStream_t stream) const;

  // Host barrier over all ranks (a one-int NCCL all-reduce, synchronized). Collective.
  void barrier();

  // Abort NCCL (ncclCommAbort) and mark the comm unusable; used on fatal errors.
  void abort() noexcept;
  bool aborted() const { return aborted_.load(); }
  // Throws kState if the comm was aborted or the calling thread's device is not this comm's.
  void require_usable(const char* op) const;

 private:
  Comm() = default;
  void init(const ncclUniqueId& id, int rank, int nranks, int device, const CommConfig& cfg);
  void release_window(Window& w) noexcept;
  friend class Window;

  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  int device_ = -1;
  int sm_count_ = 0;
  std::atomic<bool> aborted_{false};
  ncclComm_t comm_ = nullptr;
  bool devcomm_made_ = false;
  DevCtx ctx_{};
  KernelTuning tuning_{};
  Window control_;
  DeviceFault* fault_host_ = nullptr;
  int* barrier_buf_ = nullptr;
  struct Reg { uintptr_t base; size_t bytes; ncclWindow_t handle; };
  std::vector<Reg> windows_;
};

}  // namespace tw
