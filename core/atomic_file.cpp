#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/errors.h"

namespace headroom::core {

void check_output_path(const std::filesystem::path& path) {
  if (path.empty()) throw InputError("expected a file path, got an empty one");
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw InputError(path.string() + " is not a regular file; an output must be one");
  }
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : ".";
  if (!std::filesystem::is_directory(directory, error)) {
    throw InputError(path.string() + ": directory " + directory.string() + " does not exist");
  }
}

namespace {

// The content written and synced under a temporary name beside `path`; returns that name.
std::string stage(const std::filesystem::path& path, std::string_view content) {
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : ".";
  std::string pattern = (directory / ("." + path.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) {
    throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
  }
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(pattern.c_str());
    throw std::runtime_error("cannot write " + path.string() + ": " + what + ": " + std::strerror(err));
  };
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    written += static_cast<std::size_t>(n);
  }
  // mkstemp creates 0600; results are ordinary files that others may read.
  if (::fchmod(fd, 0644) != 0) fail("chmod");
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    ::unlink(pattern.c_str());
    throw std::runtime_error("cannot write " + path.string() + ": close: " + std::strerror(errno));
  }
  return pattern;
}

}  // namespace

void write_files_together(const std::vector<std::pair<std::filesystem::path, std::string>>& files) {
  for (const auto& [path, content] : files) check_output_path(path);
  // Every file is written in full before any takes its name: a failure while writing (a full disk,
  // a directory gone) leaves none of them, and what remains is only renames.
  std::vector<std::string> staged;
  try {
    for (const auto& [path, content] : files) staged.push_back(stage(path, content));
  } catch (...) {
    for (const auto& name : staged) ::unlink(name.c_str());
    throw;
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (::rename(staged[i].c_str(), files[i].first.c_str()) != 0) {
      const int err = errno;
      for (std::size_t k = i; k < staged.size(); ++k) ::unlink(staged[k].c_str());
      throw std::runtime_error("cannot write " + files[i].first.string() + ": " + std::strerror(err));
    }
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  write_files_together({{path, std::string(content)}});
}

std::string read_file(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) throw InputError(path.string() + ": no such file");
  if (!std::filesystem::is_regular_file(status)) throw InputError(path.string() + ": not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (!error && size > max_bytes) {
    throw InputError(path.string() + ": " + std::to_string(size >> 20) + " MiB, more than the " +
                     std::to_string(max_bytes >> 20) + " MiB headroom reads");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw InputError(path.string() + ": read error");
  return buffer.str();
}

}  // namespace headroom::core
