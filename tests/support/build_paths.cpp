#include "support/build_paths.h"

#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace headroom::test {

const char* beside_program(const char* relative) {
  static std::mutex mutex;
  static std::set<std::string> paths;  // a set's elements never move: their c_str() stays valid
  std::error_code error;
  const std::filesystem::path program = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    throw std::runtime_error("cannot read /proc/self/exe to find " + std::string(relative) + ": " + error.message());
  }
  const std::string path = (program.parent_path() / relative).lexically_normal().string();
  const std::lock_guard<std::mutex> lock(mutex);
  return paths.insert(path).first->c_str();
}

}  // namespace headroom::test
