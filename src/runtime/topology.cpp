// System and communicator probing for `tilewire info`. Works with no GPU and no driver: every
// query that can fail records why instead of throwing.
#include "tilewire/runtime/topology.hpp"

#include <cuda.h>  // enum values only; the driver is reached through cudaGetDriverEntryPoint
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/version.hpp"
#include "nccl_compat.hpp"

namespace tw {
namespace {

// NVML through dlopen: the library exists only where a driver is installed. Declared here by
// hand (no nvml.h in the CUDA toolkit); layouts as documented for NVML's v2 PCI info.
struct NvmlPci {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
using NvmlDev = void*;
struct Nvml {
  bool ok = false;
  int (*init)() = nullptr;
  int (*by_pci)(const char*, NvmlDev*) = nullptr;
  int (*link_state)(NvmlDev, unsigned, int*) = nullptr;
  int (*remote_pci)(NvmlDev, unsigned, NvmlPci*) = nullptr;
};
const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    n.init = reinterpret_cast<int (*)()>(dlsym(h, "nvmlInit_v2"));
    n.by_pci = reinterpret_cast<int (*)(const char*, NvmlDev*)>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.link_state = reinterpret_cast<int (*)(NvmlDev, unsigned, int*)>(dlsym(h, "nvmlDeviceGetNvLinkState"));
    n.remote_pci = reinterpret_cast<int (*)(NvmlDev, unsigned, NvmlPci*)>(dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    n.ok = n.init && n.by_pci && n.link_state && n.remote_pci && n.init() == 0;
  });
  return n;
}

int nvlinks_between(const GpuInfo& a, const cudaDeviceProp& pb) {
  const Nvml& n = nvml();
  if (!n.ok) return 0;
  NvmlDev d = nullptr;
  if (n.by_pci(a.pci_bus_id.c_str(), &d) != 0) return 0;
  int count = 0;
  for (unsigned l = 0; l < 18; ++l) {  // NVLink4: up to 18 links
    int active = 0;
    if (n.link_state(d, l, &active) != 0 || !active) continue;
    NvmlPci p{};
    if (n.remote_pci(d, l, &p) != 0) continue;
    if ((int)p.domain == pb.pciDomainID && (int)p.bus == pb.pciBusID && (int)p.device == pb.pciDeviceID) ++count;
  }
  return count;
}

bool multicast_supported(int dev) {
  using GetAttr = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || !fn) return false;
  int v = 0;
  return reinterpret_cast<GetAttr>(fn)(&v, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev) == CUDA_SUCCESS && v;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

}  // namespace

SystemReport probe_system() {
  SystemReport r;
  r.tilewire_version = kVersion;
  r.nccl_header = nccl_header_version();
  if (ncclGetVersion(&r.nccl_runtime) != ncclSuccess) r.nccl_runtime = 0;
  r.nccl_match = r.nccl_header == r.nccl_runtime;
  Dl_info dl{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &dl) != 0 && dl.dli_fname != nullptr) r.nccl_library = dl.dli_fname;
  cudaDriverGetVersion(&r.cuda_driver);
  cudaRuntimeGetVersion(&r.cuda_runtime);
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  r.multicast_policy_off = nvls != nullptr && std::string(nvls) == "0";

  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    r.no_gpu_reason = e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)
                                       : "the driver reports 0 devices";
    cudaGetLastError();
    return r;
  }
  std::vector<cudaDeviceProp> props(n);
  for (int i = 0; i < n; ++i) {
    cudaGetDeviceProperties(&props[i], i);
    GpuInfo g;
    g.index = i;
    g.name = props[i].name;
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), i);
    g.pci_bus_id = bus;
    g.sm_count = props[i].multiProcessorCount;
    g.cc_major = props[i].major;
    g.cc_minor = props[i].minor;
    g.memory_bytes = props[i].totalGlobalMem;
    g.l2_bytes = props[i].l2CacheSize;
    cudaDeviceGetAttribute(&g.sm_clock_mhz, cudaDevAttrClockRate, i);
    cudaDeviceGetAttribute(&g.mem_clock_mhz, cudaDevAttrMemoryClockRate, i);
    g.sm_clock_mhz /= 1000;
    g.mem_clock_mhz /= 1000;
    r.gpus.push_back(g);
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      LinkInfo l;
      l.a = a;
      l.b = b;
      int can = 0;
      cudaDeviceCanAccessPeer(&can, a, b);
      l.peer_access = can != 0;
      cudaDeviceGetP2PAttribute(&l.perf_rank, cudaDevP2PAttrPerformanceRank, a, b);
      l.nvlinks = nvlinks_between(r.gpus[a], props[b]);
      r.links.push_back(l);
    }
  r.multicast_supported = multicast_supported(0);
  return r;
}

void probe_comm(SystemReport& r) {
  if (!r.no_gpu_reason.empty()) {
    r.comm.error = "no GPU";
    return;
  }
  if (!r.nccl_match) {
    r.comm.error = "NCCL runtime " + nccl_version_string(r.nccl_runtime) + " != headers " +
                   nccl_version_string(r.nccl_header);
    return;
  }
  try {
    std::mutex mu;
    Comm::run_local({}, [&](Comm& c) {
      if (c.rank() != 0) return;
      std::lock_guard<std::mutex> lk(mu);
      r.comm.probed = true;
      r.comm.nranks = c.nranks();
      r.comm.lsa_size = c.lsa_size();
      for (int i = 0; i < c.lsa_size(); ++i) r.comm.lsa_members.push_back(c.rank() - c.dev_ctx().lsa_rank + i);
      r.comm.gin_available = c.gin_available();
      if (c.all_lsa()) r.comm.gin_type = "not needed (every peer is in the LSA team)";
      else if (!c.gin_available()) r.comm.gin_type = "none";
      else r.comm.gin_type = nccl_compat::gin_is_gdaki(c.dev_ctx().comm) ? "gdaki" : "proxy";
    });
  } catch (const std::exception& ex) {
    r.comm.error = ex.what();
  }
}

std::string format_report(const SystemReport& r) {
  std::ostringstream o;
  o << "tilewire " << r.tilewire_version << "\n";
  o << "  NCCL     headers " << nccl_version_string(r.nccl_header) << ", runtime "
    << nccl_version_string(r.nccl_runtime) << (r.nccl_match ? " (match)" : "  ** MISMATCH: device API unusable **")
    << "\n";
  if (!r.nccl_library.empty()) o << "           " << r.nccl_library << "\n";
  o << "  CUDA     driver " << r.cuda_driver / 1000 << "." << (r.cuda_driver % 1000) / 10 << ", runtime "
    << r.cuda_runtime / 1000 << "." << (r.cuda_runtime % 1000) / 10 << "\n";
  if (!r.no_gpu_reason.empty()) {
    o << "  GPUs     no CUDA GPU (" << r.no_gpu_reason << ")\n";
    return o.str();
  }
  o << "  GPUs     " << r.gpus.size() << "\n";
  for (const GpuInfo& g : r.gpus)
    o << "    [" << g.index << "] " << g.name << "  sm_" << g.cc_major << g.cc_minor << "  " << g.sm_count << " SMs  "
      << (g.memory_bytes >> 30) << " GiB  L2 " << (g.l2_bytes >> 20) << " MiB  SM " << g.sm_clock_mhz << " MHz  mem "
      << g.mem_clock_mhz << " MHz  " << g.pci_bus_id << "\n";
  if (r.gpus.size() > 1) {
    o << "  Peer access (P2P / NVLink links):\n        ";
    for (const GpuInfo& g : r.gpus) o << "  GPU" << g.index << "  ";
    o << "\n";
    for (const GpuInfo& a : r.gpus) {
      o << "    GPU" << a.index;
      for (const GpuInfo& b : r.gpus) {
        if (a.index == b.index) { o << "     X   "; continue; }
        for (const LinkInfo& l : r.links)
          if (l.a == a.index && l.b == b.index) {
            std::string cell = l.peer_access ? (l.nvlinks ? "NV" + std::to_string(l.nvlinks) : "P2P") : "--";
            o << "  " << cell << std::string(7 - std::min<size_t>(7, cell.size()), ' ');
          }
      }
      o << "\n";
    }
  }
  o << "  Multicast " << (r.multicast_supported ? "present" : "absent") << ", "
    << (r.multicast_policy_off ? "disabled by policy (NCCL_NVLS_ENABLE=0); tilewire never uses it"
                               : "tilewire never uses it (set NCCL_NVLS_ENABLE=0 where policy requires)")
    << "\n";
  if (r.comm.probed) {
    o << "  LSA team  " << r.comm.lsa_size << " of " << r.comm.nranks << " ranks: {";
    for (size_t i = 0; i < r.comm.lsa_members.size(); ++i) o << (i ? "," : "") << r.comm.lsa_members[i];
    o << "}\n  GIN       " << r.comm.gin_type << "\n";
  } else {
    o << "  LSA team  not probed (" << r.comm.error << ")\n";
  }
  return o.str();
}

std::string report_json(const SystemReport& r) {
  std::ostringstream o;
  o << "{\"tilewire\":\"" << r.tilewire_version << "\",\"nccl_header\":\"" << nccl_version_string(r.nccl_header)
    << "\",\"nccl_runtime\":\"" << nccl_version_string(r.nccl_runtime) << "\",\"nccl_match\":"
    << (r.nccl_match ? "true" : "false") << ",\"nccl_library\":\"" << esc(r.nccl_library) << "\",\"cuda_driver\":" << r.cuda_driver << ",\"cuda_runtime\":" << r.cuda_runtime
    << ",\"gpu_present\":" << (r.no_gpu_reason.empty() ? "true" : "false") << ",\"no_gpu_reason\":\""
    << esc(r.no_gpu_reason) << "\",\"gpus\":[";
  for (size_t i = 0; i < r.gpus.size(); ++i) {
    const GpuInfo& g = r.gpus[i];
    o << (i ? "," : "") << "{\"index\":" << g.index << ",\"name\":\"" << esc(g.name) << "\",\"pci_bus_id\":\""
      << g.pci_bus_id << "\",\"sm_count\":" << g.sm_count << ",\"cc\":\"" << g.cc_major << "." << g.cc_minor
      << "\",\"memory_bytes\":" << g.memory_bytes << ",\"l2_bytes\":" << g.l2_bytes << ",\"sm_clock_mhz\":"
      << g.sm_clock_mhz << ",\"mem_clock_mhz\":" << g.mem_clock_mhz << "}";
  }
  o << "],\"links\":[";
  for (size_t i = 0; i < r.links.size(); ++i) {
    const LinkInfo& l = r.links[i];
    o << (i ? "," : "") << "{\"a\":" << l.a << ",\"b\":" << l.b << ",\"peer_access\":" << (l.peer_access ? "true" : "false")
      << ",\"nvlinks\":" << l.nvlinks << ",\"perf_rank\":" << l.perf_rank << "}";
  }
  o << "],\"multicast\":{\"supported\":" << (r.multicast_supported ? "true" : "false")
    << ",\"disabled_by_policy\":" << (r.multicast_policy_off ? "true" : "false") << ",\"used\":false}";
  o << ",\"comm\":{\"probed\":" << (r.comm.probed ? "true" : "false") << ",\"error\":\"" << esc(r.comm.error)
    << "\",\"nranks\":" << r.comm.nranks << ",\"lsa_size\":" << r.comm.lsa_size << ",\"lsa_members\":[";
  for (size_t i = 0; i < r.comm.lsa_members.size(); ++i) o << (i ? "," : "") << r.comm.lsa_members[i];
  o << "],\"gin_available\":" << (r.comm.gin_available ? "true" : "false") << ",\"gin_type\":\"" << esc(r.comm.gin_type)
    << "\"}}";
  return o.str();
}

std::string format_env_table() {
  std::ostringstream o;
  o << "tilewire environment variables (value in effect; * = set in the environment)\n";
  for (const env::Var& v : env::table()) {
    bool from_env = false;
    std::string val = env::value_of(v, &from_env);
    o << "  " << v.name << (from_env ? " *" : "") << "\n      type " << env::type_name(v.type) << ", default "
      << v.default_value << ", now " << val << "\n      " << v.doc << "\n";
  }
  return o.str();
}

}  // namespace tw
