#pragma once
// What `headroom compare` prints: terminal tables, Markdown for a pull-request comment, and JSON
// (schema headroom.compare/1) for scripts.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "report/comparison.h"

namespace headroom::report {

inline constexpr std::string_view kCompareSchema = "headroom.compare/1";

enum class CompareFormat { Text, Markdown };

// `base_name` and `next_name` are how the inputs are called (their paths).
std::string render_comparison(const TraceComparison& c, const std::string& base_name, const std::string& next_name,
                              CompareFormat format);
std::string render_comparison(const ChoiceComparison& c, const std::string& base_name, const std::string& next_name,
                              CompareFormat format);
nlohmann::json comparison_json(const TraceComparison& c, const std::string& base_name, const std::string& next_name);
nlohmann::json comparison_json(const ChoiceComparison& c, const std::string& base_name, const std::string& next_name);

}  // namespace headroom::report
