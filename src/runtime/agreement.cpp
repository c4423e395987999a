// The protocol record and its comparison (agreement.hpp). Host-only; unit-tested without a GPU
// (tests/cpu/agreement_test.cpp).
#include "agreement.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "tilewire/runtime/env.hpp"

namespace tw::agreement {

std::string encode(const Record& r) {
  std::string s;
  for (const Knob& k : r) s += k.name + "=" + k.value + "\n";
  return s;
}

Record decode(const std::string& s) {
  Record r;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) r.push_back({line, ""});
    else r.push_back({line.substr(0, eq), line.substr(eq + 1)});
  }
  return r;
}

uint64_t hash(const Record& r) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : encode(r)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

namespace {
const std::string* value_in(const Record& r, const std::string& name) {
  for (const Knob& k : r)
    if (k.name == name) return &k.value;
  return nullptr;
}
}  // namespace

std::string first_disagreement(const std::vector<Record>& records) {
  if (records.empty()) return "";
  const Record& a = records[0];
  for (size_t q = 1; q < records.size(); ++q) {
    const Record& b = records[q];
    std::vector<std::string> names;
    for (const Knob& k : a) names.push_back(k.name);
    for (const Knob& k : b)
      if (!value_in(a, k.name)) names.push_back(k.name);
    for (const std::string& n : names) {
      const std::string* va = value_in(a, n);
      const std::string* vb = value_in(b, n);
      if (va && vb && *va == *vb) continue;
      return n + ": rank 0 has '" + (va ? *va : std::string("(absent)")) + "', rank " + std::to_string(q) +
             " has '" + (vb ? *vb : std::string("(absent)")) + "'";
    }
  }
  return "";
}

Record environment_knobs() {
  static const char* const kNotProtocol[] = {"TILEWIRE_TIMEOUT_MS", "TILEWIRE_HOST_TIMEOUT_MS", "TILEWIRE_DEBUG"};
  Record r;
  for (const env::Var& v : env::table()) {
    if (std::any_of(std::begin(kNotProtocol), std::end(kNotProtocol),
                    [&](const char* n) { return std::strcmp(n, v.name) == 0; }))
      continue;
    r.push_back({v.name, env::value_of(v)});
  }
  return r;
}

}  // namespace tw::agreement
