#include "cli/compare_commands.h"

#include <filesystem>
#include <iostream>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/json_reader.h"
#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"
#include "core/units.h"
#include "report/comparison.h"
#include "report/comparison_output.h"

namespace headroom::cli {

namespace {

// "2%", "0.5%" or "2" (percent either way), 0 to 1000%.
double parse_percent(const std::string& flag, const std::string& text) {
  std::string digits = text;
  if (!digits.empty() && digits.back() == '%') digits.pop_back();
  std::size_t used = 0;
  double value = -1;
  try {
    value = std::stod(digits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (digits.empty() || used != digits.size() || !(value >= 0 && value <= 1000)) {
    throw core::InputError(flag + ": expected a percentage from 0% to 1000%, e.g. 2%, got '" + text + "'");
  }
  return value / 100;
}

// "trace", "plan" or "report", from the file's schema.
std::string kind_of(const std::string& path, const nlohmann::json& document) {
  const std::string schema = document.is_object() && document.contains("schema") && document["schema"].is_string()
                                 ? document["schema"].get<std::string>()
                                 : "";
  if (schema == core::kTraceSchema) return "trace";
  if (schema == core::kPlanSchema) return "plan";
  if (schema == core::kReportSchema) return "report";
  throw core::InputError(path + ": $.schema: expected " + std::string(core::kTraceSchema) + ", " +
                         std::string(core::kPlanSchema) + " or " + std::string(core::kReportSchema) +
                         (schema.empty() ? std::string(", got none") : ", got '" + schema + "'"));
}

}  // namespace

int run_compare(const CompareArgs& args) {
  report::CompareOptions options;
  options.thresholds.max_memory_growth = parse_percent("--max-memory-growth", args.max_memory_growth);
  if (!args.max_slowdown.empty()) options.thresholds.max_slowdown = parse_percent("--max-slowdown", args.max_slowdown);
  if (args.format != "text" && args.format != "markdown") {
    throw core::InputError("--format: expected text or markdown, got '" + args.format + "'");
  }
  if (!args.budget.empty()) {
    try {
      options.budget_bytes = core::parse_bytes(args.budget);
    } catch (const core::InputError& e) {
      throw core::InputError(std::string("--budget: ") + e.what());
    }
    if (options.budget_bytes <= 0) throw core::InputError("--budget: expected a positive size");
  }
  if (args.batch < 0 || args.batch > core::kMaxTraceBatch) {
    throw core::InputError("--batch: expected 1 to " + std::to_string(core::kMaxTraceBatch) + " samples, got " +
                           std::to_string(args.batch));
  }
  const auto format = args.format == "markdown" ? report::CompareFormat::Markdown : report::CompareFormat::Text;

  const nlohmann::json base_doc = core::parse_json(core::read_file(args.base), args.base);
  const nlohmann::json next_doc = core::parse_json(core::read_file(args.next), args.next);
  const std::string base_kind = kind_of(args.base, base_doc), next_kind = kind_of(args.next, next_doc);
  if (base_kind != next_kind) {
    throw core::InputError(args.next + ": a " + next_kind + ", but " + args.base + " is a " + base_kind +
                           ": compare two traces, two plans or two reports");
  }
  if (base_kind != "trace" && (!args.budget.empty() || args.batch != 0)) {
    throw core::InputError(std::string(args.budget.empty() ? "--batch" : "--budget") + ": applies to comparing traces only");
  }
  std::error_code error;
  const bool same_file = std::filesystem::equivalent(args.base, args.next, error);

  std::string text;
  nlohmann::json json;
  bool passed = true;
  if (base_kind == "trace") {
    const auto c = report::compare_traces(core::trace_from_json(base_doc, args.base), core::trace_from_json(next_doc, args.next), options);
    text = report::render_comparison(c, args.base, args.next, format);
    json = report::comparison_json(c, args.base, args.next);
    passed = c.failure.empty();
  } else {
    const auto c = base_kind == "plan"
                       ? report::compare_plans(core::plan_from_json(base_doc, args.base), core::plan_from_json(next_doc, args.next),
                                               options.thresholds)
                       : report::compare_reports(core::report_from_json(base_doc, args.base),
                                                 core::report_from_json(next_doc, args.next), options.thresholds);
    text = report::render_comparison(c, args.base, args.next, format);
    json = report::comparison_json(c, args.base, args.next);
    passed = c.failure.empty();
  }
  if (same_file) text = "note: BASE and NEW are the same file: nothing can differ\n" + text;
  if (!args.output.empty()) core::write_file_atomically(args.output, json.dump(1) + "\n");
  std::cout << text;
  return passed ? 0 : kExitThresholdPassed;
}

}  // namespace headroom::cli
