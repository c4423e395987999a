// tilewire/runtime/topology.hpp — what this machine offers: GPUs, links, LSA team, GIN.
//
// tw::probe_system() needs no communicator; tw::probe_comm() adds what only a live NCCL
// communicator knows (LSA team, GIN). Both degrade gracefully: with no GPU the report says so.
#pragma once
#include <string>
#include <vector>

namespace tw {

class Comm;

struct GpuInfo {
  int index = 0;
  std::string name, pci_bus_id;
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  size_t memory_bytes = 0, l2_bytes = 0;
  int sm_clock_mhz = 0, mem_clock_mhz = 0;
};

struct LinkInfo {
  int a = 0, b = 0;
  bool peer_access = false;   // cudaDeviceCanAccessPeer
  int nvlinks = 0;            // NVLink links between a and b (NVML); 0 when unknown or none
  int perf_rank = 0;          // cudaDevP2PAttrPerformanceRank
};

struct CommInfo {
  bool probed = false;         // false: no communicator was made (no GPU, or probing failed)
  std::string error;           // why not, when !probed
  int nranks = 0, lsa_size = 0;
  std::vector<int> lsa_members;  // world ranks of rank 0's LSA team
  bool gin_available = false;
  std::string gin_type;        // "none", "proxy", "gdaki"; "not needed" when all peers are LSA
};

struct SystemReport {
  std::string tilewire_version;
  int nccl_header = 0, nccl_runtime = 0;
  bool nccl_match = false;
  std::string nccl_library;    // the file the loaded libnccl came from (which NCCL this process runs)
  int cuda_driver = 0, cuda_runtime = 0;
  std::string no_gpu_reason;   // empty when at least one CUDA GPU is visible
  std::vector<GpuInfo> gpus;
  std::vector<LinkInfo> links; // every ordered pair a != b
  bool multicast_supported = false;  // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED on GPU 0
  bool multicast_policy_off = true;  // NCCL_NVLS_ENABLE=0 (tilewire never uses multicast)
  CommInfo comm;
};

SystemReport probe_system();
// Runs a local communicator over all GPUs to fill report.comm; records failures in comm.error.
void probe_comm(SystemReport& report);

std::string format_report(const SystemReport& r);   // human-readable, for `tilewire info`
std::string report_json(const SystemReport& r);     // for `tilewire info --json`
std::string format_env_table();                      // `tilewire info --env`

}  // namespace tw
