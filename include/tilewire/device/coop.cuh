// tilewire/device/coop.cuh — the cooperating thread group every primitive takes.
//
// tilewire uses NCCL's Coop types unchanged (thread, warp, warp span, CTA), so a tilewire
// primitive and an NCCL device-API call can share one group. A Coop provides thread_rank(),
// size() and sync(); every thread of the group must make the call.
#pragma once
#include <nccl_device.h>

namespace tw::dev {

using Thread = ncclCoopThread;      // one thread
using Warp = ncclCoopWarp;          // the 32 lanes of a warp
using WarpSpan = ncclCoopWarpSpan;  // consecutive warps with an id in [0,15]
using Cta = ncclCoopCta;            // the whole thread block

}  // namespace tw::dev
