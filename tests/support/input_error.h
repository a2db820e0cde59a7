#pragma once
// What a call refuses: the InputError's one line, or "(no error)".
#include <functional>
#include <string>

#include "core/errors.h"

namespace headroom::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace headroom::testing
