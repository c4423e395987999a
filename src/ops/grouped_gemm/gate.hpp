// src/ops/grouped_gemm/gate.hpp — a gate on the grouped GEMM's rows, for a GEMM that starts
// while its A rows are still arriving (the MoE FFN's gate-up GEMM beside the EP receive).
//
// Group g's rows are laid out by source: source s owns rows [bounds[g][s], bounds[g][s + 1]) of
// the group (relative to its first row; bounds[g][0] = 0, bounds[g][S] = the group's count,
// ascending). Before a CTA loads the tile of rows [m0, m0 + tile_m) of group g, its mainloop load
// warp waits until flags[s] >= want for every source s with rows in that range, then orders its
// TMA loads after those acquires (ptx.cuh's proxy rule). Rows past the count belong to no source
// and wait for nothing. A source's flag is raised once its rows are in A (by whatever writes them;
// a counter of writers that each add 1 works with want = the writers).
//
// layout_flag, when set: the GEMM's preparation kernel waits until *layout_flag >= want before it
// reads counts, offsets and bounds, so a kernel running beside the GEMM may still be writing them
// when the GEMM is launched.
//
// The waits are bounded by ctx.timeout_ns and report through ctx.fault (device/wait.cuh). A GEMM
// that waits at a gate holds its SM: whatever raises the flags must already be resident or have SMs
// of its own (the caller's duty; moe.cpp says how the FFN keeps it).
#pragma once
#include <cstdint>

#include "tilewire/device/context.hpp"
#include "tilewire/trace/event.hpp"

#ifndef TW_HD
#if defined(__CUDACC__)
#define TW_HD __host__ __device__
#else
#define TW_HD
#endif
#endif

namespace tw::grouped_impl {

struct RowGate {
  const uint64_t* flags = nullptr;        // [sources]; null: no gate
  const int* bounds = nullptr;            // [groups][sources + 1], device
  int sources = 0;                        // S >= 1 with flags
  uint64_t want = 1;
  const uint64_t* layout_flag = nullptr;  // null: counts, offsets and bounds are ready at launch
  DevCtx ctx{};                           // timeout and fault record of the waits
  trace::Ring ring{};                     // per tile: mma_start when the load warp is past the gate

  TW_HD bool on() const { return flags != nullptr; }
};

// Whether source s has rows in rows [r0, r1) of a group with these bounds (S + 1 ascending
// entries). The load warp walks s = 0, 1, ... and stops at the first source with bounds[s] >= r1.
TW_HD inline bool source_meets_rows(const int* bounds, int s, int r0, int r1) {
  return bounds[s] < bounds[s + 1] && bounds[s] < r1 && bounds[s + 1] > r0;
}

}  // namespace tw::grouped_impl
