// tilewire._C.Comm: a communicator from an NCCL unique id, its symmetric tensors (DLPack), the
// deferred release of their windows (bindings.hpp's Registry), and its host collectives.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "tilewire/runtime/errors.hpp"

namespace nb = nanobind;

namespace tw_py {

PyComm::~PyComm() {
  if (!comm) return;
  // Garbage-collected without close(): nothing collective may run here (peers drop theirs at
  // other times), so the communicator is aborted, which skips every collective of teardown.
  std::fprintf(stderr, "tilewire: a Comm was garbage-collected without close(); it was aborted (call close() on "
                       "every rank)\n");
  comm->abort();
  {
    std::lock_guard<std::mutex> lk(reg->mu);
    reg->windows.clear();
    reg->closed = true;
  }
  comm.reset();
}

tw::Comm& PyComm::get() const {
  TW_REQUIRE(comm != nullptr, kState, "the communicator was closed");
  return *comm;
}

namespace {

// The tensor's owner: when the last reference goes, its window is marked pending (not freed).
struct Owner {
  std::shared_ptr<Registry> reg;
  uint64_t index;
};

nb::dlpack::dtype dlpack_dtype(const std::string& name, size_t* size) {
  if (name == "bfloat16") return *size = 2, nb::dlpack::dtype{(uint8_t)nb::dlpack::dtype_code::Bfloat, 16, 1};
  if (name == "float16") return *size = 2, nb::dlpack::dtype{(uint8_t)nb::dlpack::dtype_code::Float, 16, 1};
  if (name == "float32") return *size = 4, nb::dlpack::dtype{(uint8_t)nb::dlpack::dtype_code::Float, 32, 1};
  if (name == "uint8") return *size = 1, nb::dlpack::dtype{(uint8_t)nb::dlpack::dtype_code::UInt, 8, 1};
  if (name == "int32") return *size = 4, nb::dlpack::dtype{(uint8_t)nb::dlpack::dtype_code::Int, 32, 1};
  if (name == "int64") return *size = 8, nb::dlpack::dtype{(uint8_t)nb::dlpack::dtype_code::Int, 64, 1};
  throw tw::Error(tw::Errc::kInvalidArgument,
                  "dtype '" + name + "' is not one of bfloat16, float16, float32, uint8, int32, int64");
}

// Collective: the windows pending on every rank, freed in creation order.
size_t collect(PyComm& pc) {
  tw::Comm& c = pc.get();
  std::vector<uint64_t> mine;
  {
    std::lock_guard<std::mutex> lk(pc.reg->mu);
    mine.assign(pc.reg->pending.begin(), pc.reg->pending.end());
  }
  uint64_t n = mine.size();
  c.allreduce_host(&n, 1, tw::HostReduce::kMax);
  std::vector<uint64_t> row(n + 1, UINT64_MAX), all((n + 1) * (size_t)c.nranks());
  row[0] = mine.size();
  std::copy(mine.begin(), mine.end(), row.begin() + 1);
  c.allgather_host(row.data(), all.data(), row.size() * sizeof(uint64_t));
  std::vector<uint64_t> common = mine;
  for (int q = 0; q < c.nranks(); ++q) {
    const uint64_t* r = all.data() + (size_t)q * (n + 1);
    std::set<uint64_t> theirs(r + 1, r + 1 + r[0]);
    common.erase(std::remove_if(common.begin(), common.end(), [&](uint64_t i) { return !theirs.count(i); }), common.end());
  }
  for (uint64_t i : common) {  // ascending: std::set order, the same on every rank
    std::unique_ptr<tw::Window> w;
    {
      std::lock_guard<std::mutex> lk(pc.reg->mu);
      pc.reg->pending.erase(i);
      w = std::move(pc.reg->windows[i]);
      pc.reg->windows.erase(i);
    }
    w.reset();  // collective release, outside the lock
  }
  return common.size();
}

}  // namespace

void bind_comm(nb::module_& m) {
  // A DLPack view of device memory tilewire owns (an EP buffer's outputs): `owner` (the Python
  // object that holds the memory) stays alive as long as the view.
  m.def("view",
        [](uintptr_t ptr, std::vector<size_t> shape, const std::string& dtype, int device, nb::handle owner) {
          size_t es = 0;
          const nb::dlpack::dtype dt = dlpack_dtype(dtype, &es);
          return nb::ndarray<>(reinterpret_cast<void*>(ptr), shape.size(), shape.data(), owner, nullptr, dt,
                               nb::device::cuda::value, device);
        },
        nb::arg("ptr"), nb::arg("shape"), nb::arg("dtype"), nb::arg("device"), nb::arg("owner"));
  m.def("unique_id", [] {
    const ncclUniqueId id = tw::Comm::unique_id();
    return nb::bytes(id.internal, sizeof(id.internal));
  });
  nb::class_<PyComm>(m, "Comm")
      .def("__init__",
           [](PyComm* self, nb::bytes id, int rank, int nranks, int device, size_t oneshot_max_bytes, int signal_count,
              int max_blocks, bool want_gin, int64_t timeout_ms) {
             TW_REQUIRE(id.size() == sizeof(ncclUniqueId), kInvalidArgument,
                        "unique_id must be " + std::to_string(sizeof(ncclUniqueId)) + " bytes, got " + std::to_string(id.size()));
             ncclUniqueId uid;
             std::memcpy(uid.internal, id.c_str(), sizeof(uid.internal));
             tw::CommConfig cfg;
             cfg.oneshot_max_bytes = oneshot_max_bytes, cfg.signal_count = signal_count, cfg.max_blocks = max_blocks;
             cfg.want_gin = want_gin, cfg.timeout_ms = timeout_ms;
             new (self) PyComm();
             nb::gil_scoped_release unlocked;  // creation waits for the peers
             self->comm = tw::Comm::create(uid, rank, nranks, device, cfg);
           },
           nb::arg("unique_id"), nb::arg("rank"), nb::arg("nranks"), nb::arg("device"), nb::arg("oneshot_max_bytes") = 0,
           nb::arg("signal_count") = 1024, nb::arg("max_blocks") = 0, nb::arg("want_gin") = true, nb::arg("timeout_ms") = 0)
      .def_prop_ro("rank", [](const PyComm& c) { return c.get().rank(); })
      .def_prop_ro("nranks", [](const PyComm& c) { return c.get().nranks(); })
      .def_prop_ro("device", [](const PyComm& c) { return c.get().device(); })
      .def_prop_ro("sm_count", [](const PyComm& c) { return c.get().sm_count(); })
      .def_prop_ro("closed", [](const PyComm& c) { return c.comm == nullptr; })
      .def("barrier", [](PyComm& c) {
        nb::gil_scoped_release unlocked;
        c.get().barrier();
      })
      // Collective: a symmetric window of `shape` elements of `dtype`, as a DLPack-capable array
      // on the communicator's GPU (torch.from_dlpack / cupy.from_dlpack take it).
      .def("empty",
           [](PyComm& pc, std::vector<size_t> shape, const std::string& dtype) {
             size_t es = 0;
             const nb::dlpack::dtype dt = dlpack_dtype(dtype, &es);
             size_t n = 1;
             for (size_t s : shape) n *= s;
             tw::Comm& c = pc.get();
             auto w = std::make_unique<tw::Window>();
             {
               nb::gil_scoped_release unlocked;
               *w = c.alloc_window(std::max<size_t>(n * es, 1));
             }
             void* data = w->data();
             uint64_t index;
             {
               std::lock_guard<std::mutex> lk(pc.reg->mu);
               index = pc.reg->next++;
               pc.reg->windows[index] = std::move(w);
             }
             nb::capsule owner(new Owner{pc.reg, index}, [](void* p) noexcept {
               auto* o = static_cast<Owner*>(p);
               {
                 std::lock_guard<std::mutex> lk(o->reg->mu);
                 if (!o->reg->closed) o->reg->pending.insert(o->index);
               }
               delete o;
             });
             return nb::ndarray<>(data, shape.size(), shape.data(), owner, nullptr, dt, nb::device::cuda::value, c.device());
           },
           nb::arg("shape"), nb::arg("dtype"))
      .def("collect",
           [](PyComm& pc) {
             nb::gil_scoped_release unlocked;  // host collectives: peers may take a while
             return collect(pc);
           },
           "Collective: release the windows of tensors that every rank has dropped; returns how many")
      .def("pending", [](PyComm& pc) {
        std::lock_guard<std::mutex> lk(pc.reg->mu);
        return pc.reg->pending.size();
      })
      .def("close",
           [](PyComm& pc) {
             if (!pc.comm) return;
             {
               std::lock_guard<std::mutex> lk(pc.reg->mu);
               pc.reg->closed = true;
             }
             nb::gil_scoped_release unlocked;
             std::map<uint64_t, std::unique_ptr<tw::Window>> windows;
             {
               std::lock_guard<std::mutex> lk(pc.reg->mu);
               windows.swap(pc.reg->windows);
               pc.reg->pending.clear();
             }
             windows.clear();  // collective, creation order
             pc.comm.reset();  // collective teardown
           },
           "Collective: release every window (tensors from empty() must not be used afterwards) and the communicator")
      .def("abort", [](PyComm& pc) {
        if (pc.comm) pc.comm->abort();
      });
}

}  // namespace tw_py
