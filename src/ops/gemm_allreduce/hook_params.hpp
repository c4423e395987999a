// src/ops/gemm_allreduce/hook_params.hpp — what every fused epilogue hook reads per call (the
// owner, exchange and relay hooks of gemm_allreduce and gemm_reducescatter), in one struct: each
// hook derives from HookParams, and the launch copies LaunchParams::hook into it whole
// (launch.hpp hook_params). The knobs of the relay and owner kernels, read once per
// communicator (fused_gemm/engine.cpp), travel the same way. allgather_gemm's gated GEMM has no
// epilogue hook: what its prologue reads is gemm_impl::Gate (../gemm/launch.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "../gemm/scheduler.hpp"
#include "plan.hpp"
#include "tilewire/device/context.hpp"
#include "tilewire/trace/event.hpp"

namespace tw::gemm_allreduce_impl {

struct HookParams {
  DevCtx ctx{};
  Layout lay{};                    // plan.hpp; lay.P == ctx.lsa_size
  gemm_impl::TileSchedule sched{};  // the kernel's work list (what its scheduler builds from the same arguments)
  int me = 0;                      // LSA rank
  int grid_ctas = 0;               // CTAs in the grid (the per-CTA trace slots; all of them run the tail)
  DevWindow ws_win{}, c_win{};     // windows of the workspace and of C, and their offsets in them
  size_t ws_off = 0, c_off = 0;
  char* ws = nullptr;              // this rank's workspace
  void* C = nullptr;               // this rank's C [M, N] (reduce-scatter: its shard); c_typed<E>()
  long long ldc = 0;
  int M = 0, N = 0;
  trace::Ring ring{};              // per-tile events; null events: tracing off

  template <class E>
  TW_HD E* c_typed() const { return static_cast<E*>(C); }
};

// The relay kernel's knobs (TILEWIRE_RELAY_*; docs/gemm_allreduce.md has what each measured).
struct RelayKnobs {
  int consumer_rows = 16;   // rows [0, consumer_rows) of each tile the consumers push themselves; the comm warp the rest
  int poll_ns = 0;          // > 0: the comm warp and the final waits sleep this long between polls
  int pace_pct = 60;        // > 0: each tile's comm-warp pushes spread over this % of the last tile period
                            // less the consumers' wait (relay_pace_budget_ns); 0: as fast as the warp goes
  int comm_inflight = 4;    // rows in flight per comm-warp lane: 8, 4 or 2 (more pushes faster, slows the mainloop)
  bool bulk_push = true;    // the comm warp's rows go by bulk copies (TMA) rather than its lanes' 16-byte stores
                            // (TILEWIRE_RELAY_BULK_PUSH; comm_inflight applies to the stores only)
  bool no_push = false;     // measurement only (TILEWIRE_RELAY_NO_PUSH): flags without data, C wrong
  bool pull = false;        // partials stored locally (bulk copies) and bulk-loaded by the owner (TILEWIRE_RELAY_PULL);
                            // finals are pushed either way
  bool l2_evict_first = false;  // the bulk copies of partials and finals (out and in) carry the L2 evict-first
                                // hint (TILEWIRE_RELAY_L2_EVICT_FIRST): they are read again a segment later,
                                // if at all, by then out of L2 anyway
  int rounds = 0;           // all-reduce: >= 2 walks the staggered order in that many rounds (TILEWIRE_RELAY_ROUNDS;
                            // scheduler.hpp), spreading the owners' finals over the call; 0: the segments
  bool padded_slots = false;  // measurement only (TILEWIRE_RELAY_PADDED_SLOTS): the staging slots hold the
                              // shared-memory rows with their padding (plan.hpp kRelaySlotPitch; the layout's slots
                              // are padded in that build), so a batch of rows goes out, and a partial sum comes in,
                              // as one bulk copy instead of one per row
  int waves = 0;            // >= 1: the ranks walk the segments (the reduce-scatter's shards) interleaved in
                            // chunks (scheduler.hpp), hops at least that many waves of tiles apart instead of
                            // a segment (TILEWIRE_RELAY_WAVES; before `rounds`); 0: the segments
};

// The relay's pacing budget: how long a comm warp spreads one tile's pushes over, from the last
// tile's period (staged to staged) less the time the consumers waited for `ready` in it (the
// comm warp still pushing or loading). The wait is left out because it would feed back: a push
// that outlasts a short mainloop makes the consumers wait, the wait lengthens the period, and a
// budget taken from the whole period lengthens the next push by the same share (relay_hook.cuh).
// At most max_ns; pct <= 0 or no working time: 0 (unpaced).
TW_HD constexpr uint64_t relay_pace_budget_ns(uint64_t period_ns, uint64_t waited_ns, int pct, uint64_t max_ns) {
  if (pct <= 0 || period_ns <= waited_ns) return 0;
  const uint64_t b = (period_ns - waited_ns) * (uint64_t)pct / 100;
  return b < max_ns ? b : max_ns;
}

// The owner kernel's measurement knobs (measurement build only; no effect otherwise).
struct OwnerKnobs {
  bool plain = false;           // TILEWIRE_OWNER_PLAIN: tile t owned by t % P (no block rotation)
  bool final_poll_all = false;  // TILEWIRE_OWNER_FINAL_POLL_ALL: every consumer thread polls the final flags
};

}  // namespace tw::gemm_allreduce_impl
