#pragma once
// How a child process of the command (a data-parallel worker, a calibration) ended, in words.
#include <filesystem>
#include <string>

namespace headroom::cli {

// "exited with status 2", "killed by signal 9 (Killed)": from waitpid's status.
std::string describe_status(int status);

// The last non-empty line a child wrote to its log, without the "headroom: " its errors start with.
std::string last_line(const std::filesystem::path& log);

}  // namespace headroom::cli
