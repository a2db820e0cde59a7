#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace headroom::core {

// Writes the whole file or nothing: the content goes to a temporary file in the same directory,
// is flushed to disk, and is renamed over `path`. A failure leaves any previous file untouched and
// throws std::runtime_error naming the path.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

// Reads a whole file; throws InputError naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

}  // namespace headroom::core
