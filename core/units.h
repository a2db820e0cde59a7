#pragma once
// Byte sizes and durations as people type and read them.
#include <cstdint>
#include <string>
#include <string_view>

namespace headroom::core {

// Parses "512MiB", "1.5 GiB", "64KiB" or plain bytes "1048576". Throws InputError naming the text.
std::int64_t parse_bytes(std::string_view text);

// "0 B", "812 B", "1.50 KiB", "512.0 MiB", "3.25 GiB": three significant digits, binary units.
std::string format_bytes(std::int64_t bytes);
// The same, rounded up where needed so that the text read back holds `bytes`: a least budget a user
// can type as shown ("5.09 MiB", not "5.08 MiB" for 5.083 MiB).
std::string format_bytes_at_least(std::int64_t bytes);

// "850 ns", "12.3 us", "4.56 ms", "1.23 s".
std::string format_duration_ns(std::int64_t ns);

}  // namespace headroom::core
