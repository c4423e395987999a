// src/runtime/needs.hpp — what an op needs of every communicator, asked when one is created.
//
// NCCL's device-communicator requirements are the model: each user of the communicator states
// what it needs, and the communicator places it. An op registers a need once, at static
// initialization (a namespace-scope constant of its source file); at every creation, on every
// rank, the communicator calls the need's function with the team's shape, then
//   * places `control_bytes` in its control window (symmetric, zeroed before any peer writes;
//     kernels reach it through DevCtx::control at the granted offset),
//   * allocates `local_bytes` of zeroed device memory,
//   * grows DevCtx::max_blocks to `grid_blocks` (the LSA barriers' slots),
//   * puts `agree` into the protocol record every rank must share (agreement.hpp),
//   * and keeps `record`, the op's own description of what it chose (its knobs).
// The op reads them back with need_grant(comm, index). The runtime knows a need by its index and
// owner name only: the op owns its layout, its knobs and their meaning.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "agreement.hpp"
#include "tilewire/runtime/comm.hpp"

namespace tw {

// What a need is sized from; every rank sees the same values (cfg's fields that matter are
// agreed through the need's `agree` entries).
struct CommShape {
  int nranks = 0;
  int lsa_size = 0;
  int sm_count = 0;  // the agreed SM budget (Comm::sm_count)
  bool is_virtual = false;
  const CommConfig* cfg = nullptr;
};

struct NeedRequest {
  size_t control_bytes = 0;
  size_t local_bytes = 0;
  int grid_blocks = 0;
  agreement::Record agree;
  std::shared_ptr<const void> record;
};

using NeedFn = NeedRequest (*)(const CommShape&);
struct Need {
  const char* owner;  // for messages and the protocol record
  NeedFn fn;
};

// What a communicator placed for a need: its control-window offset, its local device memory
// (null when it asked for none), its record.
struct Grant {
  size_t control_offset = 0;
  void* local = nullptr;
  std::shared_ptr<const void> record;
};

// Registers a need; returns its index (need_grant). At static initialization only.
int register_need(const char* owner, NeedFn fn);
// Every registered need, in registration order.
const std::vector<Need>& needs();

// `comm`'s grant for need `index` (register_need's), made when the communicator was created.
const Grant& need_grant(const Comm& comm, int index);

// Comm's side of need_grant (a friend of Comm: the grants are no public API).
struct NeedAccess {
  static const Grant& grant(const Comm& comm, int index);
};

}  // namespace tw
