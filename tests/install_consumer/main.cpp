// Host side of the install check: calls into libtilewire through the installed headers.
// Prints what it found and exits 0 on a machine without a GPU; with a GPU it also runs a
// one-thread kernel that reads a tw::DevCtx (kernel.cu).
#include <cstdio>
#include <exception>

#include "tilewire/runtime/topology.hpp"
#include "tilewire/runtime/version.hpp"

int consumer_kernel_check();  // kernel.cu: 0 on success

int main() {
  try {
    std::printf("tilewire_consumer: tilewire %s, NCCL headers %s\n", tw::kVersion,
                tw::nccl_version_string(tw::nccl_header_version()).c_str());
    const tw::SystemReport r = tw::probe_system();
    std::printf("tilewire_consumer: NCCL runtime %s (%s)\n", tw::nccl_version_string(r.nccl_runtime).c_str(),
                r.nccl_match ? "matches" : "does not match the headers");
    if (!r.no_gpu_reason.empty()) {
      std::printf("tilewire_consumer: no GPU (%s); host API OK\n", r.no_gpu_reason.c_str());
      return 0;
    }
    std::printf("tilewire_consumer: %zu GPU(s); GPU 0 is %s\n", r.gpus.size(), r.gpus[0].name.c_str());
    if (consumer_kernel_check() != 0) {
      std::fprintf(stderr, "tilewire_consumer: the DevCtx kernel returned a wrong value\n");
      return 1;
    }
    std::printf("tilewire_consumer: DevCtx kernel OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilewire_consumer: %s\n", e.what());
    return 1;
  }
}
