// tilewire._C: the Python bindings (nanobind). The module holds no torch code: ops take device
// pointers and CUDA streams as integers, and tensors travel through DLPack, so the extension
// builds without torch and works with any framework; python/tilewire/ wraps it for torch.
//
// Errors: tw::Error becomes ValueError (kInvalidArgument), TimeoutError (kTimeout),
// NotImplementedError (kUnsupported), RuntimeError otherwise; the message is tw::Error's.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <string>

#include "bindings.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/runtime/topology.hpp"
#include "tilewire/runtime/version.hpp"

namespace nb = nanobind;

namespace {
void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const tw::Error& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.code()) {
      case tw::Errc::kInvalidArgument: type = PyExc_ValueError; break;
      case tw::Errc::kTimeout: type = PyExc_TimeoutError; break;
      case tw::Errc::kUnsupported: type = PyExc_NotImplementedError; break;
      default: break;
    }
    PyErr_SetString(type, e.what());
  }
}
}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "tilewire's C++ library (use the tilewire package, not this module)";
  nb::register_exception_translator(translate);
  m.def("info_json", [] { return tw::report_json(tw::probe_system()); },
        "`tilewire info --json`: GPUs, links, NCCL, LSA team, GIN (needs no GPU)");
  m.def("nccl_versions", [] { return std::make_tuple(tw::nccl_runtime_version(), tw::nccl_header_version()); },
        "(the NCCL loaded in this process, the NCCL tilewire was compiled for), as NCCL_VERSION_CODE integers");
  m.def("version", [] { return std::string(tw::kVersion); });
  // For the tests of the error mapping: throws tw::Error(code, message).
  m.def("_raise", [](int code, const std::string& msg) { throw tw::Error(static_cast<tw::Errc>(code), msg); });
  tw_py::bind_comm(m);
  tw_py::bind_ops(m);
  tw_py::bind_moe(m);
}
