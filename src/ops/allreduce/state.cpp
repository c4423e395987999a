// The all-reduce family's need of every communicator and its knobs (state.hpp).
#include "state.hpp"

#include <algorithm>
#include <memory>
#include <string>

#include "../../runtime/needs.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::ops {
namespace {

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

NeedRequest allreduce_need(const CommShape& c) {
  // One-shot and two-shot CTAs wait for their peers' CTAs of the same index: on a virtual team
  // their grids must fit the SM budget. The defaults are clamped to it; a setting beyond it is
  // refused (it could not run there without deadlocking).
  const auto within_budget = [&](const char* knob) {
    bool set = false;
    const std::string v = env::value_of(*env::find(knob), &set);
    const int64_t n = env::get_int(knob);
    TW_REQUIRE(!c.is_virtual || !set || n <= c.sm_count, kInvalidArgument,
               std::string(knob) + "=" + v + " exceeds the SM budget of a virtual rank (" + std::to_string(c.sm_count) +
                   " SMs: the GPU's SMs / " + std::to_string(c.nranks) + "); the ranks' grids must be resident together");
    return n;
  };
  auto k = std::make_shared<AllReduceKnobs>();
  k->oneshot_blocks = (int)std::clamp<int64_t>(within_budget("TILEWIRE_ONESHOT_BLOCKS"), 1,
                                               std::min(kOneShotMaxBlocks, c.sm_count));
  k->twoshot_block_cap = (int)within_budget("TILEWIRE_ALLREDUCE_BLOCKS");
  k->oneshot_threads = (int)env::get_int("TILEWIRE_ONESHOT_THREADS");
  TW_REQUIRE(k->oneshot_threads >= 32 && k->oneshot_threads <= 512 && k->oneshot_threads % 32 == 0, kInvalidArgument,
             "TILEWIRE_ONESHOT_THREADS must be a multiple of 32 in [32, 512]");
  k->twoshot_threads = (int)env::get_int("TILEWIRE_ALLREDUCE_THREADS");
  TW_REQUIRE(k->twoshot_threads >= 64 && k->twoshot_threads <= 512 && k->twoshot_threads % 32 == 0, kInvalidArgument,
             "TILEWIRE_ALLREDUCE_THREADS must be a multiple of 32 in [64, 512]");
  const std::string v = env::get_string("TILEWIRE_TWOSHOT_VARIANT");
  TW_REQUIRE(v == "auto" || v == "load" || v == "push", kInvalidArgument,
             "TILEWIRE_TWOSHOT_VARIANT='" + v + "' is not one of auto, load, push");
  k->twoshot_variant = v == "load" ? TwoShotVariant::kLoad : v == "push" ? TwoShotVariant::kPush : TwoShotVariant::kAuto;
  // Staging per (parity, source): the one-shot maximum rounded to whole 16-byte lines per block,
  // twice (an LL line carries 8 payload bytes in 16).
  size_t oneshot = c.cfg->oneshot_max_bytes ? c.cfg->oneshot_max_bytes : env::get_bytes("TILEWIRE_ONESHOT_MAX_BYTES");
  oneshot = round_up(std::max<size_t>(oneshot, 16 * (size_t)k->oneshot_blocks), 16 * (size_t)k->oneshot_blocks);
  k->staging_bytes = 2 * (size_t)c.lsa_size * 2 * oneshot;

  NeedRequest r;
  r.control_bytes = k->staging_bytes;
  r.local_bytes = sizeof(uint32_t) * kOneShotMaxBlocks;
  r.grid_blocks = k->oneshot_blocks;
  r.agree = {{"CommConfig.oneshot_max_bytes", std::to_string(c.cfg->oneshot_max_bytes)},
             {"one-shot blocks", std::to_string(k->oneshot_blocks)},
             {"one-shot staging bytes", std::to_string(k->staging_bytes)}};
  r.record = std::move(k);
  return r;
}

const int kNeed = register_need("all-reduce", allreduce_need);

}  // namespace

AllReduceState allreduce_state(const Comm& comm) {
  const Grant& g = need_grant(comm, kNeed);
  return AllReduceState{static_cast<const AllReduceKnobs*>(g.record.get()), g.control_offset,
                        static_cast<uint32_t*>(g.local)};
}

}  // namespace tw::ops
