#include "support/build_paths.h"

#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>

namespace headroom::test {

namespace {

std::filesystem::path program_folder() {
  std::error_code error;
  const std::filesystem::path program = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw std::runtime_error("cannot read /proc/self/exe to find the test's files: " + error.message());
  return program.parent_path();
}

}  // namespace

const char* beside_program(const char* relative) {
  static const std::filesystem::path folder = program_folder();
  static std::mutex mutex;
  static std::set<std::string> paths;  // a set's elements never move: their c_str() stays valid
  const std::string path = (folder / relative).lexically_normal().string();
  const std::lock_guard<std::mutex> lock(mutex);
  return paths.insert(path).first->c_str();
}

}  // namespace headroom::test
