#pragma once
// The error types every module throws. The CLI maps them to exit codes (DESIGN.md): InputError is
// bad input or usage (exit 2); anything else from a library is a runtime failure (exit 1).
#include <stdexcept>
#include <string>

namespace headroom::core {

// Bad input: a malformed file, an unknown name, a flag out of range. The message is one line that
// names the file, field or flag.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace headroom::core
