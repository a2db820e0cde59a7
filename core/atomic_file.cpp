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

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  check_output_path(path);
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
  if (::rename(pattern.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(pattern.c_str());
    throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(err));
  }
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
