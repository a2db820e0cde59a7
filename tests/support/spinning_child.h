#pragma once
// A child process that keeps one core busy: another process's load, for the tests of what headroom
// does beside one.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

namespace headroom::testing {

class SpinningChild {
 public:
  // Spins for at most `for_at_most` (a test that fails before stop() leaves no spinner behind).
  explicit SpinningChild(std::chrono::seconds for_at_most) : pid_(::fork()), started_(pid_ > 0) {
    if (pid_ != 0) return;
    const auto end = std::chrono::steady_clock::now() + for_at_most;
    while (std::chrono::steady_clock::now() < end) {
    }
    ::_exit(0);
  }
  ~SpinningChild() { stop(); }
  SpinningChild(const SpinningChild&) = delete;
  SpinningChild& operator=(const SpinningChild&) = delete;

  bool started() const { return started_; }
  // Kills and reaps it.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
  bool started_;
};

}  // namespace headroom::testing
