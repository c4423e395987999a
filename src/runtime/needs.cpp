// The registry of the ops' needs (needs.hpp).
#include "needs.hpp"

namespace tw {
namespace {
// Constructed on first use: registrations run during static initialization, in any order.
std::vector<Need>& registry() {
  static std::vector<Need> r;
  return r;
}
}  // namespace

int register_need(const char* owner, NeedFn fn) {
  registry().push_back(Need{owner, fn});
  return (int)registry().size() - 1;
}

const std::vector<Need>& needs() { return registry(); }

const Grant& need_grant(const Comm& comm, int index) { return NeedAccess::grant(comm, index); }

}  // namespace tw
