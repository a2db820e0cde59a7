#pragma once
// The error types every module throws. The CLI maps them to exit codes (docs/design.md,
// "Exit codes"): InputError is bad input or usage (exit 2), DoesNotFitError is work too large for
// the machine (exit 3); anything else from a library is a runtime failure (exit 1).
#include <stdexcept>
#include <string>

namespace headroom::core {

// Bad input: a malformed file, an unknown name, a flag out of range. The message is one line that
// names the file, field or flag.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The work does not fit: a batch the host's memory cannot hold (exit 3, like an infeasible plan).
// The message names what does fit where that is known.
class DoesNotFitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace headroom::core
