#include "tilewire/runtime/errors.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace tw {

static std::string where(const char* file, int line) {
  std::string f(file);
  auto p = f.rfind("/src/");
  if (p == std::string::npos) p = f.rfind("/include/");
  if (p != std::string::npos) f = f.substr(p + 1);
  return " [" + f + ":" + std::to_string(line) + "]";
}

void throw_error(Errc code, const char* file, int line, const std::string& msg) {
  throw Error(code, "tilewire: " + msg + where(file, line));
}

void throw_cuda(int err, const char* expr, const char* file, int line) {
  auto e = static_cast<cudaError_t>(err);
  throw Error(Errc::kCuda, std::string("tilewire: CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                               ") in " + expr + where(file, line));
}

void throw_nccl(int res, const char* expr, const char* file, int line) {
  auto r = static_cast<ncclResult_t>(res);
  throw Error(Errc::kNccl, std::string("tilewire: NCCL error ") + std::to_string(res) + " (" + ncclGetErrorString(r) +
                               ") in " + expr + where(file, line) + "; NCCL_DEBUG=WARN says more");
}

}  // namespace tw
