// src/runtime/agreement.hpp — the protocol every rank of a communicator must agree on.
//
// Everything that shapes a kernel's protocol or grid — the environment knobs, the agreed SM
// count, grid and block sizes, what each op asked of the communicator (needs.hpp), versions — is written into a record
// of (name, value) pairs when the communicator is created. The ranks compare a hash of it in one
// host all-reduce (min and max); only when they differ are the records gathered, to name the
// first knob that differs and both values, and every rank fails with that message. A rank can
// then never run a kernel whose protocol its peers do not share (silently wrong or a deadlock).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tw::agreement {

struct Knob {
  std::string name, value;
};
using Record = std::vector<Knob>;

// "name=value\n" per knob, in order.
std::string encode(const Record& r);
Record decode(const std::string& s);
// FNV-1a over encode(r).
uint64_t hash(const Record& r);
// "" when every record equals records[0]; else, for the first rank q whose record differs, the
// first knob that differs: "<name>: rank 0 has '<a>', rank q has '<b>'" (a knob present on one
// rank only reads as '(absent)').
std::string first_disagreement(const std::vector<Record>& records);

// The environment knobs that shape kernels: every TILEWIRE_* variable of the table except
// those that only bound waits or print (timeouts, debug printing).
Record environment_knobs();

}  // namespace tw::agreement
