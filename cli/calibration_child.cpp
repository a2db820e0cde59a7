#include "cli/calibration_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
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

#include "cli/child_process.h"
#include "cli/command_line.h"
#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "runtime/calibration_cache.h"
#include "runtime/host_info.h"

namespace headroom::cli {

namespace {

// How `headroom calibrate --device cuda` refuses on a machine without a CUDA device.
constexpr std::string_view kNoCudaDevice = "this libtorch sees no CUDA device";

// Runs headroom-torch on `args`, its standard error to `errors` and its one-line summary nowhere
// (neither is this command's output). Empty where it exited 0, else what went wrong.
std::string run_quietly(std::vector<std::string> args, const std::filesystem::path& errors) {
  const std::string torch = torch_executable().string();
  // Waited for below, whatever the caller inherited for its children.
  ::signal(SIGCHLD, SIG_DFL);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("cannot start headroom-torch: ") + std::strerror(errno);
  if (pid == 0) {
    // It dies with this command: a plan killed mid-calibration leaves no calibration running.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    const int log = ::open(errors.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log >= 0) ::dup2(log, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    runtime::set_passive_thread_pools();
    ::execv(torch.c_str(), argv.data());
    std::fprintf(stderr, "cannot start %s: %s\n", torch.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return std::string("cannot wait for headroom calibrate: ") + std::strerror(errno);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  const std::string said = last_line(errors);
  return "headroom calibrate " + describe_status(status) + (said.empty() ? "" : ": " + said);
}

}  // namespace

runtime::MachineTiming calibration_from_child(const core::Trace& trace) {
  const bool cuda = trace.device.is_cuda();
  const int threads = std::min(std::max(trace.profile.threads, 1), runtime::usable_cores());
  if (std::optional<core::Calibration> cached = runtime::read_cached_calibration(cuda, threads)) return {cached, ""};

  std::string why, shared;
  std::optional<core::Calibration> here;
  std::error_code error;
  std::string pattern = (std::filesystem::temp_directory_path(error) / "headroom-calibration.XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    why = std::string("no temporary directory: ") + std::strerror(errno);
  } else {
    const std::filesystem::path directory = pattern, output = directory / "calibration.json";
    why = run_quietly({"headroom", "calibrate", "--device", cuda ? "cuda" : "cpu", "--threads", std::to_string(threads), "-o",
                       output.string()},
                      directory / "errors.log");
    // The child's verdict on its own timing window: one taken beside other processes' work it keeps
    // for no later command, and this one does not compare it either.
    if (why.empty()) {
      std::error_code unread;
      const std::string said = std::filesystem::exists(directory / "errors.log", unread) ? core::read_file(directory / "errors.log") : "";
      if (const auto at = said.find(runtime::kSharedWithOthers); at != std::string::npos) {
        shared = said.substr(at, said.find(':', at) - at);  // "other processes kept 1.2 cores busy on average while calibrating"
      }
    }
    if (why.empty() && shared.empty()) {
      try {
        here = core::read_calibration(core::JsonNode(nlohmann::json::parse(core::read_file(output)), "$"));
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    std::filesystem::remove_all(directory, error);
  }
  // A CUDA trace read on a machine without one has nothing here to be compared with, as before.
  if (cuda && why.find(kNoCudaDevice) != std::string::npos) return {};
  if (!why.empty()) std::cerr << "headroom: warning: cannot time this machine (" << why << "); the trace's times are used as recorded\n";
  return {here, shared.empty() ? why : shared};
}

}  // namespace headroom::cli
