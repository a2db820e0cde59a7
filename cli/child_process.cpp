#include "cli/child_process.h"

#include <sys/wait.h>

#include <cstring>
#include <fstream>

namespace headroom::cli {

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return "killed by signal " + std::to_string(signal) + " (" + (strsignal(signal) ? strsignal(signal) : "?") + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

std::string last_line(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) {
    // Progress lines end in carriage returns on a terminal; keep what follows the last one.
    const auto cr = line.rfind('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  const std::string prefix = "headroom: ";
  if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return last;
}

}  // namespace headroom::cli
