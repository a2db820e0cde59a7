#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace headroom::core {

// Throws InputError unless `path` can name an output file: not empty, not an existing directory,
// device, FIFO or socket (writing would replace it with a file, or never end), and in a directory
// that exists.
void check_output_path(const std::filesystem::path& path);

// Writes the whole file or nothing (after check_output_path): the content goes to a temporary file in the same directory,
// is flushed to disk, and is renamed over `path`. A failure leaves any previous file untouched and
// throws std::runtime_error naming the path.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

// The outputs of one run, landing together: every file is written and flushed under a temporary
// name first, and only then renamed over its path, so a failure while writing leaves none of them
// (and every previous file untouched). Only a rename failing after that (no room for a directory
// entry) can leave the earlier ones written.
void write_files_together(const std::vector<std::pair<std::filesystem::path, std::string>>& files);

// The largest file headroom reads: a trace of thousands of layers is a few MiB; parsed JSON takes
// about ten times its text, so this keeps a bad input's parse well under a GiB.
inline constexpr std::uintmax_t kMaxInputFileBytes = std::uintmax_t{64} << 20;

// Reads a whole regular file; throws InputError naming the path when it is missing, not a regular
// file (a FIFO would block for ever, a device never end), larger than kMaxInputFileBytes or
// cannot be read.
std::string read_file(const std::filesystem::path& path, std::uintmax_t max_bytes = kMaxInputFileBytes);

}  // namespace headroom::core
