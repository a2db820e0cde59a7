#include "runtime/calibration_cache.h"

#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>

#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "runtime/host_info.h"

namespace headroom::runtime {

std::filesystem::path calibration_cache_directory() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "headroom";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "headroom";
  }
  return {};
}

namespace {

// "v2": measured with both thread pools passive (runtime/host_info.h); the unversioned files before
// were timed inside `plan`, at half the memory bandwidth, and are not read.
std::string cache_file_name(bool cuda, int threads) {
  return "calibration-v2-" + std::string(cuda ? "cuda" : "cpu") + "-" + std::to_string(threads) + "t.json";
}

}  // namespace

std::optional<core::Calibration> read_cached_calibration(bool cuda, int threads, int max_age_s) {
  const std::filesystem::path directory = calibration_cache_directory();
  if (directory.empty()) return std::nullopt;
  const std::string here = cuda ? "cuda:0" : cpu_device_info().name;
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  try {
    std::ifstream in(directory / cache_file_name(cuda, threads));
    if (!in) return std::nullopt;
    const nlohmann::json document = nlohmann::json::parse(in);
    const std::int64_t saved = document.at("saved_at_unix").get<std::int64_t>();
    core::Calibration c = core::read_calibration(core::JsonNode(document.at("calibration"), "$.calibration"));
    if (c.device == here && c.threads == threads && now >= saved && now - saved <= max_age_s) return c;
  } catch (const std::exception&) {
    // A cache from another version, or half-written: as if there were none.
  }
  return std::nullopt;
}

void save_cached_calibration(const core::Calibration& c) {
  const std::filesystem::path directory = calibration_cache_directory();
  if (directory.empty()) return;
  const bool cuda = c.device.rfind("cuda", 0) == 0;
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  try {
    std::filesystem::create_directories(directory);
    core::write_file_atomically(directory / cache_file_name(cuda, c.threads),
                                nlohmann::json{{"saved_at_unix", now}, {"calibration", core::to_json(c)}}.dump(2) + "\n");
  } catch (const std::exception&) {
    // Not cached: the next command measures again.
  }
}

}  // namespace headroom::runtime
