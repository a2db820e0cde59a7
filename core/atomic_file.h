#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace headroom::core {

// Throws InputError unless `path` can name an output file: not empty, not an existing directory,
// device, FIFO or socket (writing would replace it with a file, or never end), and in a directory
// that exists.
void check_output_path(const std::filesystem::path& path);

// Writes the whole file or nothing (after check_output_path): the content goes to a temporary file in the same directory,
// is flushed to disk, and is renamed over `path`. A failure leaves any previous file untouched and
// throws std::runtime_error naming the path.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

// The largest file headroom reads: a trace of thousands of layers is a few MiB; parsed JSON takes
// about ten times its text, so this keeps a bad input's parse well under a GiB.
inline constexpr std::uintmax_t kMaxInputFileBytes = std::uintmax_t{64} << 20;

// Reads a whole regular file; throws InputError naming the path when it is missing, not a regular
// file (a FIFO would block for ever, a device never end), larger than kMaxInputFileBytes or
// cannot be read.
std::string read_file(const std::filesystem::path& path, std::uintmax_t max_bytes = kMaxInputFileBytes);

}  // namespace headroom::core
