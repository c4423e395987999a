// tilewire/runtime/version.hpp — NCCL version discipline.
//
// NCCL's device-API structs (ncclDevComm, windows, requirements) change between patch
// releases, so device code compiled against one NCCL and run with another misbehaves
// silently. tilewire requires the runtime library to be exactly the header version.
#pragma once
#include <string>

namespace tw {

// NCCL_VERSION_CODE of the headers tilewire was compiled against (e.g. 22809).
int nccl_header_version();
// ncclGetVersion() of the library loaded now.
int nccl_runtime_version();
// "2.28.9" from 22809.
std::string nccl_version_string(int code);
// Throws Errc::kVersionMismatch naming both versions and how to fix it unless they match.
void check_nccl_versions(int header_code, int runtime_code);
// check_nccl_versions(nccl_header_version(), nccl_runtime_version()).
void check_nccl_runtime();

inline constexpr const char* kVersion = "0.1.0";

}  // namespace tw
