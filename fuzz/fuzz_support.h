#pragma once
// What every fuzz target shares: the input as text, and the rule that an input the readers reject
// with core::InputError (the documented bad-input error, exit code 2) is a correct answer, while
// any other exception is a finding. libFuzzer reports an abort as a crash and saves the input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <typeinfo>

#include "core/errors.h"

namespace headroom::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void finding(const char* what) {
  std::fprintf(stderr, "headroom fuzz finding: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// Runs `body`; returns true if it finished, false if it rejected its input with InputError.
// Anything else thrown aborts.
template <class Body>
bool accepts(Body&& body) {
  try {
    body();
    return true;
  } catch (const core::InputError&) {
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headroom fuzz finding: %s: %s\n", typeid(e).name(), e.what());
    finding("an exception other than core::InputError");
  } catch (...) {
    finding("a non-standard exception");
  }
}

// Runs `body`, which must not throw at all (a document headroom wrote must read back).
template <class Body>
void must_succeed(const char* step, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headroom fuzz finding: %s failed: %s: %s\n", step, typeid(e).name(), e.what());
    finding(step);
  }
}

}  // namespace headroom::fuzz
