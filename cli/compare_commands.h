#pragma once
// `headroom compare`: two traces, plans or reports side by side, with CI thresholds. Torch-free.
#include <cstdint>
#include <string>

namespace headroom::cli {

struct CompareArgs {
  std::string base;
  std::string next;
  std::string budget;                    // empty: BASE's peak at the largest common batch
  std::int64_t batch = 0;                // 0: the largest common batch
  std::string max_memory_growth = "1%";  // per sample
  std::string max_slowdown;              // empty: not checked
  std::string format = "text";           // text or markdown
  std::string output;                    // JSON, schema headroom.compare/1
};

// Exit 0 when no threshold is passed, kExitThresholdPassed when one is.
int run_compare(const CompareArgs& args);

inline constexpr int kExitThresholdPassed = 4;

}  // namespace headroom::cli
