#pragma once
// SHA-256 (FIPS 180-4), so a plan can name the exact trace it was made from.
#include <string>
#include <string_view>

namespace headroom::core {

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace headroom::core
