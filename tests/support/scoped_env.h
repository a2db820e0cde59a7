#pragma once
// An environment variable set for a test's scope and put back as it was when the scope ends, also
// when an assertion ends the test early (the tests after it must not run against its cache).
#include <cstdlib>
#include <optional>
#include <string>

namespace headroom::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    set(value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (before_) {
      ::setenv(name_, before_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  void set(const std::string& value) { ::setenv(name_, value.c_str(), 1); }

 private:
  const char* name_;
  std::optional<std::string> before_;
};

}  // namespace headroom::testing
