// tools/ep_timeline.hpp — where one traced dispatch + combine spent its time, per rank, from the
// kernels' events (`tilewire bench ep --trace`, either mode; ids in tilewire/ops/ep.hpp). The
// high-throughput kernels mark no layout and no count exchange: there the first and last row
// out bracket the count wait (a CTA stores rows once it has every rank's counts). Host only;
// tests/cpu/ep_timeline_test.cpp.
#pragma once
#include <string>
#include <vector>

#include "tilewire/trace/event.hpp"

namespace tw::cli {

// Microseconds after the rank's first send CTA started (its kernel_start); -1 where the trace
// has no such event.
struct EpTimeline {
  int rank = 0;
  double layout_us = -1;       // the slowest CTA's layout (mma_end - mma_start)
  double layout_end_us = -1;   // the last CTA's layout done
  double counts_out_us = -1;   // CTA 0's counts gone to every rank
  double counts_in_us = -1;    // the last CTA with every rank's counts
  double first_row_us = -1;    // the first row store issued
  double last_row_us = -1;     // the last CTA's first row store issued (it had every rank's counts)
  double rows_in_us = -1;      // the last source's rows landed (receive)
  double dispatch_end_us = -1; // the receive's last CTA done
  double combine_start_us = -1;
  double combine_end_us = -1;
};

// One entry per rank with events, in rank order. `aligned`: Trace::align()'s events.
std::vector<EpTimeline> ep_timeline(const std::vector<trace::Event>& aligned, int nranks);
// A few comment lines (each starting with "# ") for the bench's output.
std::string format_ep_timeline(const std::vector<EpTimeline>& t);

}  // namespace tw::cli
