// tilewire/runtime/errors.hpp — how tilewire fails.
//
// Host functions throw tw::Error with a message that says what was wrong and what to do.
// The CHECK macros add file:line and the CUDA/NCCL error string. Exceptions stop at the CLI
// (and later the Python edge), which print one line and exit non-zero.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>

namespace tw {

enum class Errc {
  kInvalidArgument,  // bad shape, dtype, pointer, size: nothing was written
  kUnsupported,      // valid request this build/machine cannot serve (no GPU, no LSA path, ...)
  kVersionMismatch,  // NCCL header vs runtime
  kCuda,             // a CUDA runtime/driver call failed
  kNccl,             // an NCCL call failed
  kTimeout,          // a bounded device wait expired
  kState,            // use after destroy, wrong thread/device
};

// "invalid argument", "unsupported", "version mismatch", "CUDA error", "NCCL error", "timeout",
// "invalid state"; parse_errc accepts exactly these (src/runtime/names.cpp).
const char* errc_name(Errc e);
std::optional<Errc> parse_errc(const std::string& s);

// A check's verdict without throwing: what an op would do, or why it cannot (can_implement and
// the ops' argument checks; pure host logic, no GPU needed, except window lookups).
struct Status {
  bool ok = true;
  std::string reason;
  explicit operator bool() const { return ok; }
};

class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string msg) : std::runtime_error(std::move(msg)), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

[[noreturn]] void throw_error(Errc code, const char* file, int line, const std::string& msg);
[[noreturn]] void throw_cuda(int err, const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl(int res, const char* expr, const char* file, int line);

}  // namespace tw

// Throw tw::Error(code) with file:line unless `cond` holds. `msg` is any std::string expression.
#define TW_REQUIRE(cond, code, msg)                                                  \
  do {                                                                               \
    if (!(cond)) ::tw::throw_error(::tw::Errc::code, __FILE__, __LINE__, (msg));     \
  } while (0)

#define TW_CUDA_CHECK(expr)                                                          \
  do {                                                                               \
    int tw_e_ = static_cast<int>(expr);                                              \
    if (tw_e_ != 0) ::tw::throw_cuda(tw_e_, #expr, __FILE__, __LINE__);              \
  } while (0)

#define TW_NCCL_CHECK(expr)                                                          \
  do {                                                                               \
    int tw_r_ = static_cast<int>(expr);                                              \
    if (tw_r_ != 0) ::tw::throw_nccl(tw_r_, #expr, __FILE__, __LINE__);              \
  } while (0)
