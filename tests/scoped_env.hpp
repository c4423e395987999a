// tests/scoped_env.hpp — set or unset one environment variable for the length of a scope.
// Shared by the CPU and GPU suites. Not thread-safe (setenv never is): use it on the test's
// main thread, before any rank threads start.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace tw_test {

class ScopedEnv {
 public:
  // value == nullptr: unset the variable.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace tw_test
