// src/runtime/nccl_compat.hpp — what differs between the NCCL versions tilewire builds against,
// in one place, keyed on NCCL_VERSION_CODE / the headers' own macros. Built and tested on 2.28.9
// (torch 2.11's); compiled against 2.30.7 (torch 2.15's) and the newest 2.32.x in CI.
//
//   2.29.2   ncclDevCommRequirements carries a size, magic and version header and must start from
//            NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER: a zeroed struct is refused. Before, there is
//            no initializer and a zeroed struct is the documented start.
//   2.29     the device communicator's GIN backends: ginTypes[] became ginNetDeviceTypes[],
//            per context, then per connection from 2.29.7 (gin_is_gdaki).
//   2.29.7   ginConnectionType, NONE by default: GIN to every peer must ask for FULL
//            (gin_requirements); before, ginForceEnable.
//   2.30     device-side barrier timeouts, explicit strong/weak GIN signals (not used yet).
//   2.31     timeouts on GIN waits (not used yet).
//   2.32.3   socket-based GIN without an RDMA NIC (not used yet).
// The runtime check that the loaded NCCL is the one compiled against stays (version.cpp): the
// device-API structs change between patch releases.
#pragma once
#include <nccl.h>
#include <nccl_device.h>

#include <cstring>

namespace tw::nccl_compat {

// An ncclDevCommRequirements with nothing required, the way this NCCL wants it made.
inline ncclDevCommRequirements dev_comm_requirements() {
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER
  ncclDevCommRequirements r = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
  ncclDevCommRequirements r;
  std::memset(&r, 0, sizeof(r));
#endif
  return r;
}

// The requirements of a device communicator whose GIN reaches every peer outside the LSA team
// (tilewire puts to any world rank): `contexts` GIN contexts and `signals` GIN signals. From
// 2.29.7 that is ginConnectionType = FULL (NONE, the initializer's default, connects nobody);
// before, ginForceEnable, which makes ncclDevCommCreate set GIN up whatever NCCL would choose.
inline ncclDevCommRequirements gin_requirements(int contexts, int signals) {
  ncclDevCommRequirements r = dev_comm_requirements();
  r.ginContextCount = contexts;
  r.ginSignalCount = signals;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 7)
  r.ginConnectionType = NCCL_GIN_CONNECTION_FULL;
#else
  r.ginForceEnable = true;
#endif
  return r;
}

// Whether the device communicator's GIN backend is GDAKI (the GPU drives the NIC), else the proxy
// (a host thread does). The backends sit in ginTypes[] per context up to 2.28.x, in
// ginNetDeviceTypes[] per context in 2.29.2-2.29.6, and per connection (ginConnectionCount of
// them) from 2.29.7 (read off each version's nccl_device/impl/comm__types.h).
inline bool gin_is_gdaki(const ncclDevComm& c) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 7)
  return c.ginConnectionCount > 0 && c.ginNetDeviceTypes[0] == NCCL_NET_DEVICE_GIN_GDAKI;
#elif NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  return c.ginContextCount > 0 && c.ginNetDeviceTypes[0] == NCCL_NET_DEVICE_GIN_GDAKI;
#else
  return c.ginTypes[0] == NCCL_NET_DEVICE_GIN_GDAKI;
#endif
}

}  // namespace tw::nccl_compat
