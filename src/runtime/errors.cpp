#include "tilewire/runtime/errors.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "tilewire/runtime/dtype.hpp"

namespace tw {

const char* errc_name(Errc e) {
  switch (e) {
    case Errc::kInvalidArgument: return "invalid argument";
    case Errc::kUnsupported: return "unsupported";
    case Errc::kVersionMismatch: return "version mismatch";
    case Errc::kCuda: return "CUDA error";
    case Errc::kNccl: return "NCCL error";
    case Errc::kTimeout: return "timeout";
    case Errc::kState: return "invalid state";
  }
  return "error";
}

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

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float";
    case DType::kFloat16: return "half";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "float" || s == "fp32" || s == "float32" || s == "f32") return DType::kFloat32;
  if (s == "half" || s == "fp16" || s == "float16" || s == "f16") return DType::kFloat16;
  if (s == "bfloat16" || s == "bf16") return DType::kBFloat16;
  return std::nullopt;
}

}  // namespace tw
