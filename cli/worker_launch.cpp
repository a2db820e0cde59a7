#include "cli/worker_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli/child_process.h"
#include "core/atomic_file.h"

namespace headroom::cli {

namespace {

namespace fs = std::filesystem;

std::string self_executable() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) throw std::runtime_error("cannot find this program's own path to start workers: " + error.message());
  return self.string();
}

struct Worker {
  pid_t pid = -1;
  bool running = true;
  int status = 0;
  bool stopped_by_us = false;
};

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// A worker that failed because another one went away reports its collective's failure; that is a
// consequence, not the cause.
bool consequence(const std::string& reason) { return reason.find("collective failed") != std::string::npos; }

}  // namespace

int launch_workers(const WorkerLaunch& launch) {
  std::string pattern = (fs::temp_directory_path() / "headroom-workers-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a temporary directory for the workers");
  const fs::path dir = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{dir};
  const std::string executable = self_executable();
  const fs::path report = dir / "report.json";
  std::vector<Worker> workers(static_cast<std::size_t>(launch.workers));
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < launch.workers; ++rank) {
    std::vector<std::string> args{executable, "execute"};
    args.insert(args.end(), launch.arguments.begin(), launch.arguments.end());
    for (const std::string& a : {std::string("--rank"), std::to_string(rank), std::string("--world-size"),
                                 std::to_string(launch.workers), std::string("--store"), "file:" + (dir / "store").string()}) {
      args.push_back(a);
    }
    if (rank == 0 && !launch.output.empty()) {
      args.push_back("-o");
      args.push_back(report.string());
    }
    const std::string log = (dir / ("worker-" + std::to_string(rank) + ".log")).string();
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (auto& w : workers) {
        if (w.pid > 0) ::kill(w.pid, SIGKILL);
      }
      throw std::runtime_error(std::string("cannot start worker processes: ") + std::strerror(errno));
    }
    if (pid == 0) {
      // The worker: it dies with the launcher (a killed launcher leaves no worker waiting on the
      // others); its errors and progress go to its log; only worker 0 prints the report.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) ::dup2(fd, STDERR_FILENO);
      if (rank != 0) {
        const int null = ::open("/dev/null", O_WRONLY);
        if (null >= 0) ::dup2(null, STDOUT_FILENO);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(executable.c_str(), argv.data());
      std::fprintf(stderr, "headroom: cannot start %s: %s\n", executable.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    workers[static_cast<std::size_t>(rank)].pid = pid;
  }

  // Worker 0's progress, as it writes it, for the terminal or the desktop app's progress bar.
  const fs::path progress_log = dir / "worker-0.log";
  std::streamoff forwarded = 0;
  const auto forward_progress = [&] {
    std::ifstream in(progress_log, std::ios::binary);
    if (!in) return;
    in.seekg(forwarded);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    forwarded += static_cast<std::streamoff>(text.size());
    // Errors are reported once, by rank, below.
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("headroom: ", 0) == 0) continue;
      std::cerr << line << (lines.eof() ? "" : "\n");
    }
    std::cerr.flush();
  };

  std::optional<int> first_failed;
  std::optional<std::chrono::steady_clock::time_point> stop_at, kill_at;
  const auto running = [&] {
    int n = 0;
    for (const auto& w : workers) n += w.running;
    return n;
  };
  while (running() > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (std::size_t r = 0; r < workers.size(); ++r) {
        if (workers[r].pid != pid) continue;
        workers[r].running = false;
        workers[r].status = status;
        if (failed(status) && !workers[r].stopped_by_us && !first_failed) {
          first_failed = static_cast<int>(r);
          // Give the others a moment to report what they saw, then stop them.
          stop_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
        }
      }
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (stop_at && now >= *stop_at) {
      // SIGTERM first; whoever is still there five seconds later gets SIGKILL.
      const bool terminated = kill_at.has_value();
      for (auto& w : workers) {
        if (!w.running) continue;
        ::kill(w.pid, terminated ? SIGKILL : SIGTERM);
        w.stopped_by_us = true;
      }
      kill_at = now + std::chrono::seconds(5);
      stop_at = kill_at;
    }
    forward_progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  forward_progress();
  std::cerr << "\n";

  if (!first_failed) {
    if (!launch.output.empty()) core::write_file_atomically(launch.output, core::read_file(report));
    return 0;
  }
  // The cause: the lowest rank that failed on its own (not because a collective lost its peer,
  // not stopped by us); else the first to fail.
  int cause = *first_failed;
  std::map<int, std::string> reasons;
  for (std::size_t r = 0; r < workers.size(); ++r) {
    const Worker& w = workers[r];
    if (!failed(w.status)) continue;
    std::string reason = last_line(dir / ("worker-" + std::to_string(r) + ".log"));
    if (WIFSIGNALED(w.status) || reason.empty()) {
      reason = describe_status(w.status) + (reason.empty() ? "" : " (its last line: " + reason + ")");
    }
    reasons[static_cast<int>(r)] = reason;
  }
  for (const auto& [rank, reason] : reasons) {
    const Worker& w = workers[static_cast<std::size_t>(rank)];
    if (!w.stopped_by_us && !consequence(reason)) {
      cause = rank;
      break;
    }
  }
  std::string others;
  for (const auto& [rank, reason] : reasons) {
    if (rank != cause) others += (others.empty() ? "" : ", ") + std::to_string(rank);
  }
  std::cerr << "headroom: worker rank " << cause << " of " << launch.workers << " failed: " << reasons[cause]
            << (others.empty() ? "" : "; stopped the others (ranks " + others + ")")
            << (launch.output.empty() ? "" : "; no report written") << "\n";
  return 1;
}

}  // namespace headroom::cli
