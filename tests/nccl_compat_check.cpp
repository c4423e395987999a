// tests/nccl_compat_check.cpp — a standalone check of src/runtime/nccl_compat.hpp, built and
// run by scripts/nccl_span.sh against each NCCL version's headers (and by the CPU tests against
// the build's): the device-communicator requirements come out the way that version wants them.
// Headers only: it links no NCCL. Exit status 0 when every check holds.
#include <cstdio>
#include <cstring>

#include "../src/runtime/nccl_compat.hpp"

int main() {
  int bad = 0;
  const auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "nccl_compat (NCCL %d): %s\n", NCCL_VERSION_CODE, what);
      ++bad;
    }
  };
  const ncclDevCommRequirements r = tw::nccl_compat::dev_comm_requirements();
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 2)
  // From 2.29.2 NCCL checks the struct's header: size, magic and the headers' version.
  check(r.size == sizeof(ncclDevCommRequirements), "size is not sizeof(ncclDevCommRequirements)");
  check(r.magic == NCCL_API_MAGIC, "magic is not NCCL_API_MAGIC");
  check(r.version == NCCL_VERSION_CODE, "version is not NCCL_VERSION_CODE");
  check(r.ginSignalCount == 0 && r.lsaBarrierCount == 0 && r.barrierCount == 0, "a requirement is set");
#else
  // Before, a zeroed struct is the documented start.
  ncclDevCommRequirements zero;
  std::memset(&zero, 0, sizeof(zero));
  check(std::memcmp(&r, &zero, sizeof(r)) == 0, "not all zero");
#endif
  // GIN to every peer outside the LSA team, with the contexts and signals asked for.
  const ncclDevCommRequirements g = tw::nccl_compat::gin_requirements(1, 7);
  check(g.ginContextCount == 1 && g.ginSignalCount == 7, "gin_requirements: contexts or signals");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 7)
  check(g.ginConnectionType == NCCL_GIN_CONNECTION_FULL, "gin_requirements: the connection is not FULL");
  check(g.size == sizeof(ncclDevCommRequirements) && g.magic == NCCL_API_MAGIC, "gin_requirements: no header");
#else
  check(g.ginForceEnable, "gin_requirements: GIN not forced on");
#endif
  // The GIN backend read off a device communicator, whichever field this version keeps it in.
  ncclDevComm c;
  std::memset(&c, 0, sizeof(c));
  check(!tw::nccl_compat::gin_is_gdaki(c), "gin_is_gdaki: a zeroed communicator is GDAKI");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 7)
  c.ginConnectionCount = 1;
  c.ginNetDeviceTypes[0] = NCCL_NET_DEVICE_GIN_GDAKI;
#elif NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  c.ginContextCount = 1;
  c.ginNetDeviceTypes[0] = NCCL_NET_DEVICE_GIN_GDAKI;
#else
  c.ginTypes[0] = NCCL_NET_DEVICE_GIN_GDAKI;
#endif
  check(tw::nccl_compat::gin_is_gdaki(c), "gin_is_gdaki: a GDAKI communicator is not");
  if (bad == 0) std::printf("nccl_compat (NCCL %d): ok\n", NCCL_VERSION_CODE);
  return bad == 0 ? 0 : 1;
}
