// The sm_90a device check every GEMM-based op makes (sm90.hpp).
#include "sm90.hpp"

#include <cuda_runtime.h>

#include <string>

namespace tw::ops {

Status sm90_device(const char* op, const char* what, int* device, int* sms) {
  int dev = 0, major = 0, minor = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev)) {
    cudaGetLastError();
    return Status{false, std::string(op) + ": cannot query the current CUDA device"};
  }
  if (device) *device = dev;
  if (sms) *sms = n;
  if (major != 9 || minor != 0)
    return Status{false, std::string(op) + ": device " + std::to_string(dev) + " is sm_" + std::to_string(major * 10 + minor) +
                             "; " + what + " is built for sm_90a (Hopper) only"};
  return Status{};
}

}  // namespace tw::ops
