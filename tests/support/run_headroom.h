#pragma once
// Runs the `headroom` binary as a user would, for the tests of the command line.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "core/atomic_file.h"
#include "support/build_paths.h"

namespace headroom::testing {

struct CommandResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `args` as a shell reads them; stdin is empty and `timeout_s` ends a command that would hang (a
// FIFO read) as a failure rather than a stuck test. `stderr_name` keeps parallel test binaries'
// stderr files apart, and the process id the tests of one binary, which ctest -j runs side by side.
inline CommandResult run_headroom(const std::string& args, const std::string& stderr_name, int timeout_s = 300) {
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() / (stderr_name + "." + std::to_string(::getpid()));
  const std::string command = "timeout " + std::to_string(timeout_s) + " " + std::string(HEADROOM_BINARY) + " " + args +
                              " 2>" + err_file.string() + " </dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed");
  std::string out;
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  CommandResult result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, core::read_file(err_file)};
  std::error_code ignored;
  std::filesystem::remove(err_file, ignored);
  return result;
}

}  // namespace headroom::testing
