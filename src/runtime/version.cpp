#include "tilewire/runtime/version.hpp"

#include <nccl.h>

#include "tilewire/runtime/errors.hpp"

namespace tw {

int nccl_header_version() { return NCCL_VERSION_CODE; }

int nccl_runtime_version() {
  int v = 0;
  TW_NCCL_CHECK(ncclGetVersion(&v));
  return v;
}

std::string nccl_version_string(int code) {
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z for X.Y >= 2.9.
  if (code <= 0) return "unknown";
  return std::to_string(code / 10000) + "." + std::to_string((code / 100) % 100) + "." + std::to_string(code % 100);
}

void check_nccl_versions(int header_code, int runtime_code) {
  if (header_code == runtime_code) return;
  throw_error(Errc::kVersionMismatch, __FILE__, __LINE__,
              "NCCL runtime " + nccl_version_string(runtime_code) + " does not match the NCCL " +
                  nccl_version_string(header_code) +
                  " headers tilewire was compiled against. Device-API structs change between patch releases, so "
                  "they must match exactly: put the matching libnccl.so.2 first on LD_LIBRARY_PATH (e.g. "
                  "site-packages/nvidia/nccl/lib of nvidia-nccl-cu13==" +
                  nccl_version_string(header_code) + ") or rebuild tilewire with TILEWIRE_NCCL_ROOT pointing at the "
                  "NCCL you run with.");
}

void check_nccl_runtime() { check_nccl_versions(nccl_header_version(), nccl_runtime_version()); }

}  // namespace tw
