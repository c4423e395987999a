// Communicator lifecycle: the team (an NCCL communicator, or a virtual team's rendezvous) ->
// agreed SM count and knobs -> GIN device comm (when needed) -> control window. Teardown runs in
// reverse. Any failure after the team exists aborts it.
#include "tilewire/runtime/comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/runtime/version.hpp"
#include "agreement.hpp"
#include "comm_impl.hpp"
#include "nccl_compat.hpp"
#include "nccl_window.hpp"
#include "needs.hpp"
#include "virtual_team.hpp"

namespace tw {

template <class F>
ncclResult_t Comm::nccl_call(F&& f) noexcept {
  std::lock_guard<std::mutex> lk(impl_->nccl_mu);
  if (aborted_) return ncclInvalidUsage;
  const ncclResult_t r = f();
  if (abort_requested_) abort_locked();
  return r;
}

namespace {
// An NCCL call made through nccl_call: an aborted communicator is kState, not an NCCL error.
void nccl_check(const Comm& c, ncclResult_t r, const char* expr, const char* file, int line) {
  if (r == ncclSuccess) return;
  if (c.aborted()) throw_error(Errc::kState, file, line, std::string(expr) + ": the communicator was aborted; create a new one");
  throw_nccl((int)r, expr, file, line);
}
}  // namespace
#define TW_NCCL_CALL(expr) nccl_check(*this, nccl_call([&] { return (expr); }), #expr, __FILE__, __LINE__)

namespace {
constexpr size_t kAlign = NCCL_WIN_REQUIRED_ALIGNMENT;
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
}  // namespace

// ------------------------------------------------------------------------------------ Window
Window::Window(Window&& o) noexcept { *this = std::move(o); }
Window& Window::operator=(Window&& o) noexcept {
  if (this != &o) {
    reset();
    comm_ = o.comm_;
    alive_ = o.alive_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    dev_ = o.dev_;
    o.comm_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.dev_ = DevWindow{};
  }
  return *this;
}
Window::~Window() { reset(); }
void Window::reset() {
  // Also when unwinding from an exception: an error that wrote nothing (kInvalidArgument) leaves
  // the communicator usable, and the release is collective as always. A fatal error has aborted
  // the communicator already (a device fault, run_local's failure path), and the release then
  // only frees memory. A peer that never releases ends the wait in its bound, not a hang.
  if (comm_ != nullptr && ptr_ != nullptr && !alive_.expired()) comm_->release_window(*this);
  comm_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
  dev_ = DevWindow{};
}

// -------------------------------------------------------------------------------------- Comm
Comm::Comm() : impl_(std::make_unique<Impl>()) {}

const Grant& NeedAccess::grant(const Comm& comm, int index) {
  TW_REQUIRE(index >= 0 && index < (int)comm.impl_->grants.size(), kInvalidArgument,
             "need_grant: need " + std::to_string(index) + " is not registered (src/runtime/needs.hpp)");
  return comm.impl_->grants[index];
}

ncclUniqueId Comm::unique_id() {
  check_nccl_runtime();
  ncclUniqueId id;
  TW_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

void Comm::require_device(int device) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  TW_REQUIRE(e == cudaSuccess && ndev > 0, kUnsupported,
             std::string("no CUDA GPU: ") + (e == cudaSuccess ? "no device visible" : cudaGetErrorString(e)));
  TW_REQUIRE(device >= 0 && device < ndev, kInvalidArgument,
             "device " + std::to_string(device) + " is outside the " + std::to_string(ndev) + " visible GPUs");
}

std::unique_ptr<Comm> Comm::create(const ncclUniqueId& id, int rank, int nranks, int device, const CommConfig& cfg) {
  TW_REQUIRE(nranks >= 1, kInvalidArgument, "nranks must be >= 1, got " + std::to_string(nranks));
  TW_REQUIRE(rank >= 0 && rank < nranks, kInvalidArgument,
             "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
  require_device(device);
  std::unique_ptr<Comm> c(new Comm());
  try {
    c->init(id, rank, nranks, device, cfg);
  } catch (...) {
    c->abort();
    throw;
  }
  return c;
}

void Comm::run_local(std::span<const int> devices, const std::function<void(Comm&)>& fn, const CommConfig& cfg) {
  std::vector<int> devs(devices.begin(), devices.end());
  if (devs.empty()) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    TW_REQUIRE(e == cudaSuccess && n > 0, kUnsupported,
               std::string("no CUDA GPU: ") + (e == cudaSuccess ? "no device visible" : cudaGetErrorString(e)));
    for (int i = 0; i < n; ++i) devs.push_back(i);
  }
  ncclUniqueId id = unique_id();
  const int n = (int)devs.size();
  run_threads(
      n,
      [&](int r) {
        TW_CUDA_CHECK(cudaSetDevice(devs[r]));
        return Comm::create(id, r, n, devs[r], cfg);
      },
      fn, [] {});
}

void Comm::run_threads(int n, const std::function<std::unique_ptr<Comm>(int)>& make,
                       const std::function<void(Comm&)>& fn, const std::function<void()>& on_fail) {
  std::mutex mu;
  // The error to report: the first that is not a consequence of the abort. A rank whose wait
  // ends because the team was aborted (kState) can get here before the rank that failed.
  std::exception_ptr first, cause;
  const auto has_code = [](const std::exception_ptr& e, Errc code) {
    try {
      std::rethrow_exception(e);
    } catch (const Error& x) {
      return x.code() == code;
    } catch (...) {
    }
    return false;
  };
  const auto is_consequence = [&](const std::exception_ptr& e) { return has_code(e, Errc::kState); };
  const auto is_timeout = [&](const std::exception_ptr& e) { return has_code(e, Errc::kTimeout); };
  std::vector<Comm*> live(n, nullptr);  // guarded by mu
  bool failed = false;
  auto fail_all = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu);
    if (!first) first = e;
    // A device wait's diagnostic names the cause; the CUDA errors of the ranks that shared the
    // trapped context are its consequences.
    if (!is_consequence(e) && (!cause || (is_timeout(e) && !is_timeout(cause)))) cause = e;
    failed = true;
    on_fail();
    for (Comm* c : live)  // other ranks' communicators, owned by other threads
      if (c) c->request_abort();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Comm> comm = make(r);
        {
          std::lock_guard<std::mutex> lk(mu);
          live[r] = comm.get();
          if (failed) comm->abort();
        }
        try {
          fn(*comm);
        } catch (...) {
          std::exception_ptr e = std::current_exception();
          // The rank's own CUDA call (not the library's) may be what saw the context die after
          // one of its waits timed out: the wait's record is the cause then.
          try {
            comm->check_fault();
          } catch (const Error& x) {
            if (x.code() == Errc::kTimeout) e = std::current_exception();
          } catch (...) {
          }
          fail_all(e);
        }
        std::lock_guard<std::mutex> lk(mu);
        live[r] = nullptr;  // destroyed below, outside the lock
      } catch (...) {
        fail_all(std::current_exception());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (cause) std::rethrow_exception(cause);
  if (first) std::rethrow_exception(first);
}

void Comm::init(const ncclUniqueId& id, int rank, int nranks, int device, const CommConfig& cfg) {
  check_nccl_runtime();
  device_ = device;
  TW_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  TW_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  TW_NCCL_CHECK(ncclCommInitRank(&comm_, nranks, id, rank));
  ctx_.rank = rank;
  ctx_.nranks = nranks;
  ncclTeam_t lsa = ncclTeamLsa(comm_);
  ctx_.lsa_rank = lsa.rank;
  ctx_.lsa_size = lsa.nRanks;
  init_common(cfg, prop.multiProcessorCount);
}

void Comm::init_virtual(int rank, int device, const CommConfig& cfg) {
  device_ = device;
  virtual_ = true;
  TW_CUDA_CHECK(cudaSetDevice(device));
  int sms = 0;
  TW_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int P = impl_->team->nranks();
  TW_REQUIRE(sms / P >= 2, kUnsupported,
             "run_virtual: " + std::to_string(P) + " ranks on a GPU of " + std::to_string(sms) +
                 " SMs leave fewer than 2 SMs per rank (the fused kernels run clusters of 2)");
  ctx_.rank = rank;
  ctx_.nranks = P;
  // One GPU: every rank could reach every other with loads and stores; in virtual nodes the LSA
  // team is the node, and other nodes are reached through the emulated GIN.
  const int L = impl_->team->ranks_per_node();
  ctx_.lsa_rank = rank % L;
  ctx_.lsa_size = L;
  init_common(cfg, sms / P);  // the SM budget: P co-resident grids of sm_count() CTAs fit the GPU
}

void Comm::init_common(const CommConfig& cfg, int device_sms) {
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TW_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->last_call, cudaEventDisableTiming));
  // Agree on the SM count (the grid of every kernel, and so the barrier indices, must match).
  {
    uint64_t v = (uint64_t)device_sms;
    allreduce_host(&v, 1, HostReduce::kMin);
    sm_count_ = (int)v;
  }
  const int rank = ctx_.rank, nranks = ctx_.nranks;
  int max_blocks = cfg.max_blocks > 0 ? cfg.max_blocks : (int)env::get_int("TILEWIRE_MAX_BLOCKS");
  if (max_blocks <= 0) max_blocks = 2 * sm_count_;
  // What the ops need of this communicator (needs.hpp); each need checks its own knobs. A need
  // that refuses them is not thrown at once: its verdict goes into the protocol record, so that
  // every rank fails together (the same message where every rank refused alike, else the
  // agreement's, naming the need) instead of one rank failing while its peers wait for it.
  const CommShape shape{nranks, ctx_.lsa_size, sm_count_, is_virtual(), &cfg};
  for (const Need& n : needs()) {
    NeedRequest q;
    std::string verdict = "ok";
    try {
      q = n.fn(shape);
    } catch (const Error& e) {
      if (!impl_->refused) impl_->refused = std::current_exception();
      verdict = e.what();
    }
    impl_->verdicts.push_back(std::move(verdict));
    max_blocks = std::max(max_blocks, q.grid_blocks);
    impl_->requests.push_back(std::move(q));
  }
  ctx_.max_blocks = max_blocks;
  // PDL lets a rank's next kernel become resident while its previous one still runs: on a virtual
  // team that grid would sit on SMs of the budget its peers' waiting grids need (measured: the
  // two-shot all-reduce at 8 ranks then never met its peers), so the virtual backend runs without.
  tuning_.pdl = env::get_bool("TILEWIRE_PDL") && !is_virtual();
  const int64_t timeout_ms = cfg.timeout_ms > 0 ? cfg.timeout_ms : env::get_int("TILEWIRE_TIMEOUT_MS");
  ctx_.timeout_ns = (uint64_t)std::max<int64_t>(1, timeout_ms) * 1000000ull;
  ctx_.signal_count = std::max(1, cfg.signal_count);

  agree_on_protocol(cfg);

  // GIN device communicator only when some peer is outside the LSA team (and the user allows
  // it). LSA needs none: barriers and signals live in tilewire's control window.
  const bool need_gin = cfg.want_gin && env::get_bool("TILEWIRE_GIN") && ctx_.lsa_size < nranks;
  if (need_gin && is_virtual()) {  // virtual nodes: the emulated backend (gin_emu.hpp)
    ctx_.gin_emu = impl_->team->gin_emu()->view(rank);
    ctx_.gin_contexts = 1;
  } else if (need_gin) {
    const ncclDevCommRequirements reqs = nccl_compat::gin_requirements(1, ctx_.signal_count);
    TW_NCCL_CALL(ncclDevCommCreate(comm_, &reqs, &ctx_.comm));
    devcomm_made_ = true;
    ctx_.gin_contexts = (int)ctx_.comm.ginContextCount;
  }

  // Control window: [signals | barrier inboxes (max_blocks x lsa_size uint32) | each need's bytes].
  ctx_.signal_offset = 0;
  ctx_.barrier_offset = round_up(sizeof(uint64_t) * ctx_.signal_count, kAlign);
  size_t control_bytes = round_up(ctx_.barrier_offset + sizeof(uint32_t) * (size_t)max_blocks * ctx_.lsa_size, kAlign);
  for (const NeedRequest& q : impl_->requests) {
    Grant g;
    g.control_offset = control_bytes;
    control_bytes = round_up(control_bytes + q.control_bytes, kAlign);
    g.record = q.record;
    impl_->grants.push_back(std::move(g));
  }
  control_ = alloc_window(control_bytes);
  ctx_.control = control_.dev();
  TW_CUDA_CHECK(cudaMemsetAsync(control_.data(), 0, control_.bytes(), stream_));
  for (size_t i = 0; i < impl_->requests.size(); ++i) {
    const size_t bytes = impl_->requests[i].local_bytes;
    if (bytes == 0) continue;
    TW_CUDA_CHECK(cudaMalloc(&impl_->grants[i].local, bytes));
    TW_CUDA_CHECK(cudaMemsetAsync(impl_->grants[i].local, 0, bytes, stream_));
  }
  TW_CUDA_CHECK(cudaMalloc(&ctx_.barrier_epochs, sizeof(uint32_t) * max_blocks));
  TW_CUDA_CHECK(cudaMemsetAsync(ctx_.barrier_epochs, 0, sizeof(uint32_t) * max_blocks, stream_));
  TW_CUDA_CHECK(cudaStreamSynchronize(stream_));

  TW_CUDA_CHECK(cudaHostAlloc(&fault_host_, sizeof(DeviceFault), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(fault_host_, 0, sizeof(DeviceFault));
  TW_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ctx_.fault), fault_host_, 0));

  barrier();  // every rank's control window is zeroed before anyone's kernel writes into it

  if (env::get_bool("TILEWIRE_DEBUG"))
    std::fprintf(stderr,
                 "tilewire: rank %d/%d device %d (%s): NCCL %s, LSA team %d (rank %d), GIN contexts %d, SMs %d, "
                 "max blocks %d, control window %zu bytes\n",
                 rank, nranks, device_, backend_name(),
                 is_virtual() ? "unused" : nccl_version_string(nccl_runtime_version()).c_str(), ctx_.lsa_size,
                 ctx_.lsa_rank, ctx_.gin_contexts, sm_count_, max_blocks, control_.bytes());
}

void Comm::agree_on_call(const char* op, std::initializer_list<CallField> fields) {
  if (!check_calls_) return;
  agreement::Record r{{"op", op}};
  for (const CallField& f : fields) r.push_back({f.name, f.value});
  // Host collectives inside a stream capture: relaxed mode lets this thread synchronize the
  // library's own (uncaptured) stream without invalidating the capture.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  TW_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  std::string why;
  try {
    why = first_difference(agreement::encode(r));
  } catch (...) {
    cudaThreadExchangeStreamCaptureMode(&mode);
    throw;
  }
  TW_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  if (!why.empty())
    throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
                std::string(op) + ": ranks made different calls (TILEWIRE_CHECK_CALLS): " + why +
                    ". Every rank must make the same calls in the same order, with buffers at the same offsets of the "
                    "same windows; nothing was enqueued");
}

std::string Comm::first_difference(const std::string& encoded_record) {
  const agreement::Record r = agreement::decode(encoded_record);
  uint64_t lo = agreement::hash(r), hi = lo;
  allreduce_host(&lo, 1, HostReduce::kMin);
  allreduce_host(&hi, 1, HostReduce::kMax);
  if (lo == hi) return "";
  // Some rank differs: gather every record (fixed-size slots) to say what, on every rank.
  constexpr size_t kSlot = 16384;
  std::string mine = encoded_record;
  mine.resize(kSlot, '\0');
  std::vector<char> all(kSlot * ctx_.nranks);
  allgather_host(mine.data(), all.data(), kSlot);
  std::vector<agreement::Record> records;
  for (int q = 0; q < ctx_.nranks; ++q) records.push_back(agreement::decode(std::string(all.data() + q * kSlot)));
  std::string why = agreement::first_disagreement(records);
  return why.empty() ? "the records differ (hashes " + std::to_string(lo) + " and " + std::to_string(hi) + ")" : why;
}

void Comm::agree_on_protocol(const CommConfig& cfg) {
  // What every rank's kernels must share (agreement.hpp), the ops' needs' knobs among it.
  agreement::Record r = agreement::environment_knobs();
  auto add = [&](const char* name, const std::string& v) { r.push_back({name, v}); };
  add("tilewire version", kVersion);
  add("NCCL headers", nccl_version_string(nccl_header_version()));
  add("backend", backend_name());
  add("ranks", std::to_string(ctx_.nranks));
  add("LSA team size", std::to_string(ctx_.lsa_size));
  add("SM count (agreed)", std::to_string(sm_count_));
  add("max blocks", std::to_string(ctx_.max_blocks));
  add("CommConfig.signal_count", std::to_string(ctx_.signal_count));
  add("CommConfig.max_blocks", std::to_string(cfg.max_blocks));
  add("CommConfig.want_gin", cfg.want_gin ? "1" : "0");
  add("PDL", tuning_.pdl ? "1" : "0");
  const std::vector<Need>& ns = needs();
  for (size_t i = 0; i < impl_->requests.size(); ++i) {
    add((std::string(ns[i].owner) + ": verdict").c_str(), impl_->verdicts[i]);
    for (const agreement::Knob& k : impl_->requests[i].agree) add((std::string(ns[i].owner) + ": " + k.name).c_str(), k.value);
  }
  const std::string why = first_difference(agreement::encode(r));
  if (why.empty()) {
    if (impl_->refused) std::rethrow_exception(impl_->refused);  // every rank refused alike
    check_calls_ = env::get_bool("TILEWIRE_CHECK_CALLS");  // agreed: it is in the record
    return;
  }
  throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
              "ranks disagree on the protocol, so their kernels cannot work together: " + why +
                  ". Give every rank the same TILEWIRE_* environment and CommConfig (and the same tilewire and NCCL "
                  "builds).");
}

void Comm::abort_if_context_lost() noexcept {
  if (aborted_ || stream_ == nullptr) return;
  const cudaError_t e = cudaStreamQuery(stream_);
  if (e != cudaSuccess && e != cudaErrorNotReady) abort();  // a sticky error: no collective can complete
}

Comm::~Comm() {
  if (device_ >= 0) cudaSetDevice(device_);
  if (abort_requested_) abort();
  abort_if_context_lost();
  // No device synchronization: the caller has completed its work on our windows (comm.hpp). The
  // barrier makes sure no peer still uses them when they go.
  if (!aborted_ && (comm_ != nullptr || impl_->team != nullptr)) {
    try {
      barrier();
      // Nothing the emulated GIN still carries may land in windows freed below.
      if (impl_->team && impl_->team->gin_emu()) impl_->team->gin_emu()->drain((int64_t)(ctx_.timeout_ns / 1000000));
    } catch (...) {
      abort();
    }
  }
  // User windows still registered: release them (their Window objects become empty shells).
  std::lock_guard<std::mutex> lk(impl_->windows_mu);
  const uintptr_t control = reinterpret_cast<uintptr_t>(control_.data());
  for (auto& r : impl_->windows) {
    if (r.base == control) continue;
    if (!impl_->team) {
      (void)nccl_call([&] { return ncclCommWindowDeregister(comm_, r.dev.nccl); });  // skipped once aborted
      ncclMemFree(reinterpret_cast<void*>(r.base));
    }
  }
  impl_->windows.erase(std::remove_if(impl_->windows.begin(), impl_->windows.end(), [&](const Impl::Reg& r) { return r.base != control; }),
                 impl_->windows.end());
  {
    // The control window, without another collective: every rank passed the barrier above.
    auto it = std::find_if(impl_->windows.begin(), impl_->windows.end(), [&](const Impl::Reg& r) { return r.base == control; });
    if (it != impl_->windows.end()) {
      if (!impl_->team) {
        (void)nccl_call([&] { return ncclCommWindowDeregister(comm_, it->dev.nccl); });
        ncclMemFree(reinterpret_cast<void*>(it->base));
      }
      impl_->windows.erase(it);
    }
    control_.comm_ = nullptr;  // released above: the Window object is an empty shell now
    control_.reset();
  }
  if (devcomm_made_) (void)nccl_call([&] { return ncclDevCommDestroy(comm_, &ctx_.comm); });
  if (stream_) cudaStreamSynchronize(stream_);
  for (const Grant& g : impl_->grants)
    if (g.local) cudaFree(g.local);
  if (ctx_.barrier_epochs) cudaFree(ctx_.barrier_epochs);
  if (fault_host_) cudaFreeHost(fault_host_);
  if (impl_->scratch) cudaFree(impl_->scratch);
  if (stream_) cudaStreamDestroy(stream_);
  if (impl_->last_call) cudaEventDestroy(impl_->last_call);
  if (comm_ != nullptr)
    (void)nccl_call([&] {
      ncclCommFinalize(comm_);
      return ncclCommDestroy(comm_);
    });
}

void Comm::abort() noexcept {
  std::lock_guard<std::mutex> lk(impl_->nccl_mu);
  abort_locked();
}

void Comm::abort_locked() noexcept {
  if (fault_host_) static_cast<volatile DeviceFault*>(fault_host_)->abort = 1u;  // device waits end now
  if (impl_->team) impl_->team->abort();
  if (aborted_.exchange(true)) return;
  if (comm_ != nullptr) ncclCommAbort(comm_);
}

void Comm::request_abort() noexcept {
  abort_requested_ = true;
  if (fault_host_) static_cast<volatile DeviceFault*>(fault_host_)->abort = 1u;
  if (impl_->team) impl_->team->abort();  // rendezvous waiters fail now (the team's own lock)
  std::unique_lock<std::mutex> lk(impl_->nccl_mu, std::try_to_lock);
  if (lk.owns_lock()) abort_locked();  // else the owner is inside NCCL: nccl_call aborts on its way out
}

void Comm::require_usable(const char* op) const {
  TW_REQUIRE(!aborted(), kState, std::string(op) + ": the communicator was aborted; create a new one");
  int dev = -1;
  TW_CUDA_CHECK(cudaGetDevice(&dev));
  TW_REQUIRE(dev == device_, kState,
             std::string(op) + ": current device " + std::to_string(dev) + " is not the communicator's device " +
                 std::to_string(device_) + " (cudaSetDevice first)");
}

Window Comm::alloc_window(size_t bytes) {
  require_usable("alloc_window");
  TW_REQUIRE(bytes > 0, kInvalidArgument, "alloc_window: size must be > 0");
  const size_t size = round_up(bytes, kAlign);
  Window w;
  Impl::Reg reg{};
  if (impl_->team) {
    // One allocation of P slices, made by the rank that completes the round; every rank asked
    // for the same size (checked: a symmetric window is the same size everywhere).
    const int P = ctx_.nranks;
    const uint64_t mine = size;
    VirtualTeam::Round r = impl_->team->exchange(ctx_.rank, "alloc_window", &mine, sizeof(mine), [&](VirtualTeam::Round& rd) {
      uint64_t s0 = 0;
      for (int q = 0; q < P; ++q) {
        uint64_t sq = 0;
        std::memcpy(&sq, rd.data[q].data(), sizeof(sq));
        if (q == 0) s0 = sq;
        if (sq != s0) {
          rd.error = "alloc_window: rank 0 asked for " + std::to_string(s0) + " bytes, rank " + std::to_string(q) +
                     " for " + std::to_string(sq) + "; a symmetric window has the same size on every rank";
          return;
        }
      }
      // A team in nodes puts the windows the emulated GIN moves data between in mapped host
      // memory (src/runtime/gin_emu.hpp says why); the control window (the first one made) stays
      // in device memory: its signals and barriers take system-scope atomics.
      const bool host = impl_->team->gin_emu() != nullptr && control_.data() != nullptr;
      rd.obj = virtual_slab(device_, virtual_slice(s0) * P, host);
    });
    reg.slab = r.obj;
    char* base = static_cast<char*>(r.obj.get());
    w.ptr_ = base + (size_t)ctx_.rank * virtual_slice(size);
    reg.dev.lsa_base = base + (size_t)(ctx_.rank - ctx_.lsa_rank) * virtual_slice(size);  // this node's rank 0
    reg.dev.lsa_stride = virtual_slice(size);
  } else {
    TW_NCCL_CHECK(ncclMemAlloc(&w.ptr_, size));
    ncclWindow_t h = nullptr;
    ncclResult_t r = nccl_call([&] { return ncclCommWindowRegister(comm_, w.ptr_, size, &h, NCCL_WIN_COLL_SYMMETRIC); });
    if (r != ncclSuccess || h == nullptr) {
      ncclMemFree(w.ptr_);
      w.ptr_ = nullptr;
      nccl_check(*this, r, "ncclCommWindowRegister", __FILE__, __LINE__);
      throw_error(Errc::kUnsupported, __FILE__, __LINE__,
                  "ncclCommWindowRegister returned success but no symmetric window (NCCL fell back to a "
                  "non-symmetric registration: CUMEM disabled, or peers not P2P reachable). tilewire needs "
                  "symmetric windows; check NCCL_CUMEM_ENABLE and NCCL_P2P_DISABLE, NCCL_DEBUG=INFO says why.");
    }
    try {
      reg.dev = nccl_dev_window(h, ctx_.lsa_rank, ctx_.lsa_size, size, stream_);
    } catch (...) {
      (void)nccl_call([&] { return ncclCommWindowDeregister(comm_, h); });
      ncclMemFree(w.ptr_);
      w.ptr_ = nullptr;
      throw;
    }
  }
  w.comm_ = this;
  w.alive_ = alive_;
  w.bytes_ = size;
  w.dev_ = reg.dev;
  reg.base = reinterpret_cast<uintptr_t>(w.ptr_);
  reg.bytes = size;
  static std::atomic<uint64_t> next_serial{1};
  reg.serial = next_serial.fetch_add(1);
  reg.ordinal = windows_made_++;
  {
    std::lock_guard<std::mutex> lk(impl_->windows_mu);
    impl_->windows.push_back(std::move(reg));
  }
  return w;
}

void Comm::release_window(Window& w) noexcept {
  Impl::Reg reg;
  {
    std::lock_guard<std::mutex> lk(impl_->windows_mu);
    auto it = std::find_if(impl_->windows.begin(), impl_->windows.end(),
                           [&](const Impl::Reg& r) { return r.base == reinterpret_cast<uintptr_t>(w.ptr_); });
    if (it == impl_->windows.end()) return;  // already released by ~Comm
    reg = std::move(*it);
    impl_->windows.erase(it);  // no longer found by find_window from here on
  }
  cudaSetDevice(device_);
  abort_if_context_lost();
  if (impl_->team) {
    // Collective: no rank lets go before every rank got here (its work on the window is done),
    // nor before the emulated GIN delivered every op posted so far (some may put into it).
    if (!aborted()) {
      try {
        const uint64_t b = reg.bytes;
        impl_->team->exchange(ctx_.rank, "release_window", &b, sizeof(b));
        if (impl_->team->gin_emu()) impl_->team->gin_emu()->drain((int64_t)(ctx_.timeout_ns / 1000000));
      } catch (...) {
        abort();
      }
    }
    return;  // `reg` goes out of scope: the last rank to drop the slab frees it
  }
  (void)nccl_call([&] { return ncclCommWindowDeregister(comm_, reg.dev.nccl); });
  ncclMemFree(reinterpret_cast<void*>(reg.base));
}

WindowRef Comm::find_window(const void* p, size_t bytes, const char* what) const {
  TW_REQUIRE(p != nullptr, kInvalidArgument, std::string(what) + " is null");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lk(impl_->windows_mu);
  for (const Impl::Reg& r : impl_->windows) {
    if (r.base == reinterpret_cast<uintptr_t>(control_.data())) continue;
    if (a >= r.base && a < r.base + r.bytes) {
      TW_REQUIRE(bytes <= r.base + r.bytes - a, kInvalidArgument,
                 std::string(what) + ": " + std::to_string(bytes) + " bytes at offset " + std::to_string(a - r.base) +
                     " run past the end of its window (" + std::to_string(r.bytes) +
                     " bytes); allocate a larger window or send fewer elements");
      return WindowRef{r.dev, a - r.base, r.serial, r.ordinal};
    }
  }
  throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
              std::string(what) + " (" + std::to_string(a) +
                  ") is not inside a window of this communicator; allocate it with Comm::alloc_window (peers "
                  "reach it only through a symmetric window)");
}

void Comm::check_fault() const {
  if (fault_host_ == nullptr) return;
  volatile DeviceFault* f = fault_host_;
  if (f->flag != 1) {
    if (f->abort != 0u)  // the waits trapped because the communicator was aborted
      throw_error(Errc::kState, __FILE__, __LINE__,
                  "the communicator was aborted (another rank failed, or a fault) while this rank's kernel waited; "
                  "create a new one");
    return;
  }
  // A trapped kernel leaves the CUDA context unusable: the communicator is aborted here, so its
  // destruction and every later call skip collectives (and cannot wait for peers).
  const_cast<Comm*>(this)->abort();
  char what[sizeof(f->what) + 1] = {};
  for (size_t i = 0; i < sizeof(f->what); ++i) what[i] = f->what[i];
  throw_error(Errc::kTimeout, __FILE__, __LINE__,
              "device wait timed out: rank " + std::to_string(f->rank) + " block " + std::to_string(f->block) +
                  " thread " + std::to_string(f->thread) + " waited " + std::to_string(f->waited_ns / 1000000) +
                  " ms in '" + what + "' for >= " + std::to_string(f->expected) + ", saw " + std::to_string(f->seen) +
                  ". A peer never arrived: are all ranks making the same calls in the same order? "
                  "(TILEWIRE_TIMEOUT_MS sets the bound)" +
                  (impl_->team ? ". The ranks' last calls entered: " + impl_->team->last_calls() : std::string()));
}

void Comm::check_launch(const char* op) const {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    check_fault();
    throw_cuda(e, op, __FILE__, __LINE__);
  }
}

void Comm::sync(cudaStream_t stream) const {
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    check_fault();
    throw_cuda(e, "cudaStreamSynchronize", __FILE__, __LINE__);
  }
}

void Comm::barrier() {
  require_usable("barrier");
  uint64_t v = 0;
  allreduce_host(&v, 1, HostReduce::kSum);
}

void Comm::reserve_scratch(size_t bytes) {
  if (impl_->scratch_bytes >= bytes) return;
  if (impl_->scratch) cudaFree(impl_->scratch);
  impl_->scratch = nullptr;
  impl_->scratch_bytes = 0;
  TW_CUDA_CHECK(cudaMalloc(&impl_->scratch, bytes));
  impl_->scratch_bytes = bytes;
}

void Comm::note_call(const char* op) const {
  if (impl_->team) impl_->team->note_call(ctx_.rank, op);
}

void Comm::launched(const char* op) const {
  if (!impl_->team || aborted()) return;
  // While peers are still to enqueue theirs, this rank's kernel may already have timed out: its
  // diagnostic ends the wait (kTimeout), not the host bound.
  impl_->team->exchange(ctx_.rank, op, nullptr, 0, {}, [this] { check_fault(); });
}

// An event per call rather than one only when the stream changes: the previous call's stream
// may have been destroyed by then, and a stream handle can be reused by a new stream (the ids
// compared below never are).
Comm::CallOrder::CallOrder(Comm& comm, cudaStream_t stream)
    : comm_(comm), stream_(stream), exceptions_(std::uncaught_exceptions()) {
  if (comm_.impl_->call_depth++ > 0) return;
  outer_ = true;
  try {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    TW_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &st, &capture_));
    if (st != cudaStreamCaptureStatusActive) capture_ = 0;
    // cudaStreamGetId is refused on a capturing stream (cudaErrorStreamCaptureUnsupported).
    // Inside one capture the handle names the stream (it cannot be destroyed while captured);
    // its complement keeps it apart from the small ids cudaStreamGetId hands out.
    unsigned long long id = ~static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(stream));
    if (capture_ == 0) TW_CUDA_CHECK(cudaStreamGetId(stream, &id));
    // Across a capture boundary no edge can be made (cudaErrorStreamCaptureIsolation), nor is
    // one needed: a graph runs when it is launched, ordered by the stream it is launched on.
    if (comm_.impl_->any_call && id != comm_.impl_->last_stream_id && capture_ == comm_.impl_->last_capture)
      TW_CUDA_CHECK(cudaStreamWaitEvent(stream, comm_.impl_->last_call, 0));
    comm_.impl_->last_stream_id = id;
  } catch (...) {
    --comm_.impl_->call_depth;
    throw;
  }
}

Comm::CallOrder::~CallOrder() {
  --comm_.impl_->call_depth;
  if (!outer_ || std::uncaught_exceptions() > exceptions_) return;  // a failed call launched nothing usable
  if (cudaEventRecord(comm_.impl_->last_call, stream_) == cudaSuccess) {
    comm_.impl_->last_capture = capture_;
    comm_.impl_->any_call = true;
  } else {
    // The next call could not be ordered after this one: the communicator is unusable.
    (void)cudaGetLastError();
    comm_.abort();
  }
}

int Comm::reserve_signals(int n, const char* owner) {
  require_usable(owner);
  // Highest free range below the clock-sync index: walk the reserved ranges from the top.
  int top = ctx_.signal_count - 1;
  for (auto it = impl_->signal_ranges.rbegin(); it != impl_->signal_ranges.rend(); ++it)
    if (it->first + it->second > top - n) top = std::min(top, it->first);
  const int base = top - n;
  TW_REQUIRE(n > 0 && base >= 0, kInvalidArgument,
             std::string(owner) + ": needs " + std::to_string(n) + " signals, " + std::to_string(std::max(0, top)) +
                 " are free below the reserved ones (CommConfig::signal_count " + std::to_string(ctx_.signal_count) + ")");
  // One host collective: the largest base and the largest complement (= the smallest base).
  uint64_t v[2] = {(uint64_t)base, ~(uint64_t)base};
  allreduce_host(v, 2, HostReduce::kMax);
  const uint64_t hi = v[0], lo = ~v[1];
  TW_REQUIRE(lo == hi, kState,
             std::string(owner) + ": ranks reserved different signal ranges (from " + std::to_string(lo) + " to " +
                 std::to_string(hi) + "): they made or destroyed their objects in different orders");
  impl_->signal_ranges[base] = n;
  return base;
}

void Comm::release_signals(int base) noexcept { impl_->signal_ranges.erase(base); }

void Comm::allreduce_host(uint64_t* values, size_t n, HostReduce op) {
  TW_REQUIRE(!aborted(), kState, "host collective: the communicator was aborted; create a new one");
  if (impl_->team) {
    const VirtualTeam::Round r =
        impl_->team->exchange(ctx_.rank, "allreduce_host", values, n * sizeof(uint64_t), {}, [this] { check_fault(); });
    for (size_t i = 0; i < n; ++i) {
      uint64_t acc = 0;
      for (int q = 0; q < ctx_.nranks; ++q) {
        uint64_t v;
        std::memcpy(&v, r.data[q].data() + i * sizeof(uint64_t), sizeof(v));
        acc = q == 0 ? v : op == HostReduce::kSum ? acc + v : op == HostReduce::kMin ? std::min(acc, v) : std::max(acc, v);
      }
      values[i] = acc;
    }
    return;
  }
  if (n == 0) return;
  const size_t bytes = n * sizeof(uint64_t);
  reserve_scratch(bytes);
  const ncclRedOp_t nop = op == HostReduce::kSum ? ncclSum : op == HostReduce::kMin ? ncclMin : ncclMax;
  TW_CUDA_CHECK(cudaMemcpyAsync(impl_->scratch, values, bytes, cudaMemcpyHostToDevice, stream_));
  TW_NCCL_CALL(ncclAllReduce(impl_->scratch, impl_->scratch, n, ncclUint64, nop, comm_, stream_));
  TW_CUDA_CHECK(cudaMemcpyAsync(values, impl_->scratch, bytes, cudaMemcpyDeviceToHost, stream_));
  sync(stream_);
}

void Comm::allgather_host(const void* send, void* recv, size_t bytes) {
  TW_REQUIRE(!aborted(), kState, "host collective: the communicator was aborted; create a new one");
  if (impl_->team) {
    const VirtualTeam::Round r = impl_->team->exchange(ctx_.rank, "allgather_host", send, bytes, {}, [this] { check_fault(); });
    for (int q = 0; q < ctx_.nranks; ++q)
      if (bytes) std::memcpy(static_cast<char*>(recv) + (size_t)q * bytes, r.data[q].data(), bytes);
    return;
  }
  if (bytes == 0) return;
  reserve_scratch(bytes * ((size_t)ctx_.nranks + 1));
  char* in = static_cast<char*>(impl_->scratch) + bytes * ctx_.nranks;
  TW_CUDA_CHECK(cudaMemcpyAsync(in, send, bytes, cudaMemcpyHostToDevice, stream_));
  TW_NCCL_CALL(ncclAllGather(in, impl_->scratch, bytes, ncclUint8, comm_, stream_));
  TW_CUDA_CHECK(cudaMemcpyAsync(recv, impl_->scratch, bytes * ctx_.nranks, cudaMemcpyDeviceToHost, stream_));
  sync(stream_);
}

}  // namespace tw
