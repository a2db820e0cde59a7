#include "cli/worker_launch.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include <utility>
#include <vector>

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

// The workers' private directory (their store, logs and worker 0's report), removed with everything
// in it when the launch ends, however it ends.
class WorkerDirectory {
 public:
  WorkerDirectory() {
    std::string pattern = (fs::temp_directory_path() / "headroom-workers-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a temporary directory for the workers");
    path_ = pattern;
  }
  ~WorkerDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  WorkerDirectory(const WorkerDirectory&) = delete;
  WorkerDirectory& operator=(const WorkerDirectory&) = delete;

  const fs::path& path() const { return path_; }
  fs::path log_of(std::size_t rank) const { return path_ / ("worker-" + std::to_string(rank) + ".log"); }
  fs::path report() const { return path_ / "report.json"; }

 private:
  fs::path path_;
};

// What worker `rank` runs: `execute` with the launch's arguments, its place in the group, and for
// worker 0 the report.
std::vector<std::string> worker_command(const std::string& executable, const WorkerLaunch& launch, int rank,
                                        const WorkerDirectory& dir) {
  std::vector<std::string> args{executable, "execute"};
  args.insert(args.end(), launch.arguments.begin(), launch.arguments.end());
  for (const std::string& a : {std::string("--rank"), std::to_string(rank), std::string("--world-size"),
                               std::to_string(launch.workers), std::string("--store"), "file:" + (dir.path() / "store").string()}) {
    args.push_back(a);
  }
  if (rank == 0 && !launch.output.empty()) {
    args.push_back("-o");
    args.push_back(dir.report().string());
  }
  return args;
}

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    throw std::runtime_error(std::string("cannot read this process's CPUs: ") + std::strerror(errno));
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// In the forked child: becomes worker `rank` on `cpus` (any of the launcher's where empty), or exits
// 127 where it cannot.
[[noreturn]] void become_worker(const std::string& executable, std::vector<std::string> args, int rank,
                                const std::string& log, const std::vector<int>& cpus) {
  // The worker: it dies with the launcher (a killed launcher leaves no worker waiting on the
  // others); its errors and progress go to its log; only worker 0 prints the report.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) ::dup2(fd, STDERR_FILENO);
  if (rank != 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
  }
  // Before exec, so that every thread the worker starts stays on its CPUs.
  if (!cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const int c : cpus) CPU_SET(c, &set);
    if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
      std::fprintf(stderr, "headroom: cannot bind worker %d to its CPUs: %s\n", rank, std::strerror(errno));
      ::_exit(127);
    }
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(executable.c_str(), argv.data());
  std::fprintf(stderr, "headroom: cannot start %s: %s\n", executable.c_str(), std::strerror(errno));
  ::_exit(127);
}

std::vector<Worker> start_workers(const WorkerLaunch& launch, const WorkerDirectory& dir) {
  const std::string executable = self_executable();
  std::vector<Worker> workers(static_cast<std::size_t>(launch.workers));
  const std::vector<std::vector<int>> cpus = worker_cpus(allowed_cpus(), launch.workers);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < launch.workers; ++rank) {
    std::vector<std::string> args = worker_command(executable, launch, rank, dir);
    const std::string log = dir.log_of(static_cast<std::size_t>(rank)).string();
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (auto& w : workers) {
        if (w.pid > 0) ::kill(w.pid, SIGKILL);
      }
      throw std::runtime_error(std::string("cannot start worker processes: ") + std::strerror(errno));
    }
    if (pid == 0) become_worker(executable, std::move(args), rank, log, cpus[static_cast<std::size_t>(rank)]);
    workers[static_cast<std::size_t>(rank)].pid = pid;
  }
  return workers;
}

// Worker 0's progress, as it writes it, for the terminal or the desktop app's progress bar.
class ProgressForwarder {
 public:
  explicit ProgressForwarder(fs::path log) : log_(std::move(log)) {}

  void operator()() {
    std::ifstream in(log_, std::ios::binary);
    if (!in) return;
    in.seekg(forwarded_);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    forwarded_ += static_cast<std::streamoff>(text.size());
    // Errors are reported once, by rank, by report_failure.
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("headroom: ", 0) == 0) continue;
      std::cerr << line << (lines.eof() ? "" : "\n");
    }
    std::cerr.flush();
  }

 private:
  fs::path log_;
  std::streamoff forwarded_ = 0;
};

int running_count(const std::vector<Worker>& workers) {
  int n = 0;
  for (const auto& w : workers) n += w.running;
  return n;
}

// Waits for every worker, forwarding progress meanwhile; returns the rank that failed first, if any.
// Once one fails the others are stopped.
std::optional<int> wait_for_workers(std::vector<Worker>& workers, ProgressForwarder& forward_progress) {
  std::optional<int> first_failed;
  std::optional<std::chrono::steady_clock::time_point> stop_at, kill_at;
  while (running_count(workers) > 0) {
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
  return first_failed;
}

// Names the failure's cause on stderr: the lowest rank that failed on its own (not because a
// collective lost its peer, not stopped by us); else the first to fail.
void report_failure(const std::vector<Worker>& workers, const WorkerDirectory& dir, const WorkerLaunch& launch,
                    int first_failed) {
  int cause = first_failed;
  std::map<int, std::string> reasons;
  for (std::size_t r = 0; r < workers.size(); ++r) {
    const Worker& w = workers[r];
    if (!failed(w.status)) continue;
    std::string reason = last_line(dir.log_of(r));
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
}

}  // namespace

std::vector<std::vector<int>> worker_cpus(const std::vector<int>& allowed, int workers) {
  const auto n = static_cast<std::size_t>(std::max(workers, 0));
  std::vector<std::vector<int>> out(n);
  if (n == 0 || allowed.size() < n) return out;
  const auto each = static_cast<std::ptrdiff_t>(allowed.size() / n);
  for (std::size_t r = 0; r < n; ++r) {
    const auto first = allowed.begin() + static_cast<std::ptrdiff_t>(r) * each;
    out[r].assign(first, first + each);
  }
  return out;
}

int launch_workers(const WorkerLaunch& launch) {
  const WorkerDirectory dir;
  std::vector<Worker> workers = start_workers(launch, dir);
  ProgressForwarder forward_progress(dir.log_of(0));
  const std::optional<int> first_failed = wait_for_workers(workers, forward_progress);
  forward_progress();
  std::cerr << "\n";

  if (!first_failed) {
    if (!launch.output.empty()) core::write_file_atomically(launch.output, core::read_file(dir.report()));
    return 0;
  }
  report_failure(workers, dir, launch, *first_failed);
  return 1;
}

}  // namespace headroom::cli
