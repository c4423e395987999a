// src/ops/allreduce/state.hpp — what the all-reduce family keeps per communicator: its knobs,
// read once when the communicator is made, and its one-shot state, which it asks of every
// communicator as a need (src/runtime/needs.hpp):
//   control window  one-shot staging: 2 parities x P sources x 2 (LL lines) x the one-shot
//                   maximum, per block; zeroed at creation
//   local memory    the one-shot epoch of each block (kOneShotMaxBlocks uint32)
#pragma once
#include <cstddef>
#include <cstdint>

#include "tilewire/runtime/comm.hpp"

namespace tw::ops {

inline constexpr int kOneShotMaxBlocks = 128;  // the one-shot grid's bound: staging regions and epochs are per block

enum class TwoShotVariant { kAuto, kLoad, kPush };

struct AllReduceKnobs {
  int oneshot_blocks = 1;      // TILEWIRE_ONESHOT_BLOCKS, within min(kOneShotMaxBlocks, SM budget)
  int oneshot_threads = 256;   // TILEWIRE_ONESHOT_THREADS
  int twoshot_threads = 512;   // TILEWIRE_ALLREDUCE_THREADS
  int twoshot_block_cap = 0;   // TILEWIRE_ALLREDUCE_BLOCKS (0: the SM budget)
  TwoShotVariant twoshot_variant = TwoShotVariant::kAuto;  // TILEWIRE_TWOSHOT_VARIANT
  size_t staging_bytes = 0;    // the one-shot staging's size in the control window
};

struct AllReduceState {
  const AllReduceKnobs* knobs = nullptr;
  size_t staging_offset = 0;   // in the control window (DevCtx::control)
  uint32_t* epochs = nullptr;  // [kOneShotMaxBlocks], device memory
};

// This communicator's (its need's grant).
AllReduceState allreduce_state(const Comm& comm);

}  // namespace tw::ops
