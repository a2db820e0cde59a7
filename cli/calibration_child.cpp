#include "cli/calibration_child.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command_line.h"
#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "runtime/calibration_cache.h"
#include "runtime/host_info.h"

namespace headroom::cli {

namespace {

// How `headroom calibrate --device cuda` refuses on a machine without a CUDA device.
constexpr std::string_view kNoCudaDevice = "this libtorch sees no CUDA device";

// The child's exit status (-1 where it could not be started or waited for); its standard error
// goes to `errors`, its one-line summary nowhere (neither is this command's output).
int run_quietly(std::vector<std::string> args, const std::string& errors) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    const int log = ::open(errors.c_str(), O_WRONLY | O_TRUNC);
    if (log >= 0) ::dup2(log, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    runtime::set_passive_thread_pools();
    const std::string torch = torch_executable().string();
    ::execv(torch.c_str(), argv.data());
    std::fprintf(stderr, "cannot start %s: %s\n", torch.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::optional<core::Calibration> calibration_from_child(const core::Trace& trace) {
  const bool cuda = trace.device.is_cuda();
  const int threads = std::min(std::max(trace.profile.threads, 1), runtime::usable_cores());
  if (std::optional<core::Calibration> cached = runtime::read_cached_calibration(cuda, threads)) return cached;

  char output[] = "/tmp/headroom-calibration.XXXXXX";
  char errors[] = "/tmp/headroom-calibration-errors.XXXXXX";
  const int output_fd = ::mkstemp(output);
  const int errors_fd = output_fd < 0 ? -1 : ::mkstemp(errors);
  if (output_fd < 0 || errors_fd < 0) {
    std::cerr << "headroom: warning: cannot time this machine (no temporary file: " << std::strerror(errno)
              << "); the trace's times are used as recorded\n";
    if (output_fd >= 0) {
      ::close(output_fd);
      std::filesystem::remove(output);
    }
    return std::nullopt;
  }
  ::close(output_fd);
  ::close(errors_fd);
  const int status = run_quietly(
      {"headroom", "calibrate", "--device", cuda ? "cuda" : "cpu", "--threads", std::to_string(threads), "-o", output}, errors);
  std::optional<core::Calibration> here;
  std::string why;
  if (status == 0) {
    try {
      here = core::read_calibration(core::JsonNode(nlohmann::json::parse(core::read_file(output)), "$"));
    } catch (const std::exception& e) {
      why = e.what();
    }
  } else {
    std::string said;
    try {
      said = core::read_file(errors);
    } catch (const std::exception&) {
    }
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    if (const auto last = said.rfind('\n'); last != std::string::npos) said = said.substr(last + 1);
    why = "headroom calibrate exited " + std::to_string(status) + (said.empty() ? "" : ": " + said);
  }
  std::filesystem::remove(output);
  std::filesystem::remove(errors);
  // A CUDA trace read on a machine without one has nothing here to be compared with, as before.
  if (!why.empty() && !(cuda && why.find(kNoCudaDevice) != std::string::npos)) {
    std::cerr << "headroom: warning: cannot time this machine (" << why << "); the trace's times are used as recorded\n";
  }
  return here;
}

}  // namespace headroom::cli
