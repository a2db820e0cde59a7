#include "report/comparison_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/units.h"
#include "report/text_table.h"

namespace headroom::report {

namespace {

std::string number(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string percent(const Change& c) {
  const double f = c.fraction();
  if (std::isinf(f)) return f > 0 ? "new" : "gone";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", 100 * f);
  return text;
}

// Bytes as whole numbers, milliseconds and samples/s with decimals.
int decimals_for(const std::string& what) {
  if (what.find("ms") != std::string::npos || what.find("(s)") != std::string::npos) return 4;
  if (what.find("samples/s") != std::string::npos) return 1;
  return 0;
}

std::vector<std::string> change_cells(const Change& c) {
  const int d = decimals_for(c.what);
  return {c.what, number(c.base, d), number(c.next, d), (c.delta() >= 0 ? "+" : "") + number(c.delta(), d), percent(c)};
}

// One table in either format: Markdown's pipes, or the aligned text table.
class Table {
 public:
  Table(CompareFormat format, std::vector<std::string> headers, std::size_t left_columns)
      : format_(format), headers_(std::move(headers)), left_(left_columns) {}
  void add(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }
  std::string render() const {
    if (format_ == CompareFormat::Markdown) {
      std::string out = "|";
      for (const auto& h : headers_) out += " " + h + " |";
      out += "\n|";
      for (std::size_t i = 0; i < headers_.size(); ++i) out += i < left_ ? "---|" : "---:|";
      out += "\n";
      for (const auto& row : rows_) {
        out += "|";
        for (const auto& cell : row) out += " " + cell + " |";
        out += "\n";
      }
      return out;
    }
    std::vector<TextTable::Column> columns;
    for (std::size_t i = 0; i < headers_.size(); ++i) {
      columns.push_back({headers_[i], i < left_ ? TextTable::Align::Left : TextTable::Align::Right});
    }
    TextTable table(columns);
    for (const auto& row : rows_) table.add_row(row);
    return table.render();
  }

 private:
  CompareFormat format_;
  std::vector<std::string> headers_;
  std::size_t left_;
  std::vector<std::vector<std::string>> rows_;
};

std::string heading(CompareFormat format, const std::string& text) {
  return format == CompareFormat::Markdown ? "\n### " + text + "\n\n" : "\n" + text + "\n";
}

std::string verdict(const std::string& failure, CompareFormat format) {
  const std::string text = failure.empty() ? "PASS: no threshold passed" : "FAIL (exit 4): " + failure;
  return format == CompareFormat::Markdown ? "\n**" + text + "**\n" : "\n" + text + "\n";
}

nlohmann::json change_json(const Change& c) {
  nlohmann::json j = {{"what", c.what}, {"base", c.base}, {"new", c.next}, {"delta", c.delta()}};
  const double f = c.fraction();
  j["fraction"] = std::isinf(f) ? nlohmann::json(nullptr) : nlohmann::json(f);
  return j;
}

nlohmann::json cost_json(const core::LayerCost& c) {
  return {{"kept_bytes", c.kept_bytes},
          {"output_bytes", c.output_bytes},
          {"fwd_transient_bytes", c.fwd_transient_bytes},
          {"bwd_transient_bytes", c.bwd_transient_bytes},
          {"fwd_ns", c.fwd_ns},
          {"bwd_ns", c.bwd_ns}};
}

}  // namespace

std::string render_comparison(const TraceComparison& c, const std::string& base_name, const std::string& next_name,
                              CompareFormat format) {
  std::string out;
  std::string batches;
  for (const auto b : c.common_batches) batches += (batches.empty() ? "" : ",") + std::to_string(b);
  out += (format == CompareFormat::Markdown ? "## headroom compare\n\n" : "") + std::string("BASE ") + base_name + " (" +
         c.base_model + ")  ->  NEW " + next_name + " (" + c.next_model + ")\nbatch sizes in common: " + batches +
         " (per sample: the slope over them)\n";
  for (const auto& w : c.warnings) out += "warning: " + w + "\n";

  // Layers that changed, largest change first: the first row is the layer to look at.
  Table layers(format, {"layer", "what", "base", "new", "change", "%"}, 2);
  for (const auto& layer : c.layers) {
    if (layer.status == "same") continue;
    for (const auto& m : layer.memory) {
      if (m.delta() == 0) continue;
      auto cells = change_cells(m);
      cells.insert(cells.begin(), layer.name + (layer.status == "changed" ? "" : " (" + layer.status + ")"));
      layers.add(cells);
    }
  }
  out += heading(format, "Memory by layer, largest change first");
  out += layers.empty() ? "no layer's memory changed\n" : layers.render();
  if (!c.added.empty() || !c.removed.empty()) {
    std::string added, removed;
    for (const auto& n : c.added) added += (added.empty() ? "" : ", ") + n;
    for (const auto& n : c.removed) removed += (removed.empty() ? "" : ", ") + n;
    if (!added.empty()) out += "added layers: " + added + "\n";
    if (!removed.empty()) out += "removed layers: " + removed + "\n";
  }

  out += heading(format, "Time by layer, largest change first");
  if (!c.times_compared) {
    out += c.times_note + "\n";
  } else {
    std::vector<std::pair<double, std::vector<std::string>>> rows;
    for (const auto& layer : c.layers) {
      for (const auto& t : layer.time) {
        if (t.delta() == 0) continue;
        auto cells = change_cells(t);
        cells.insert(cells.begin(), layer.name);
        rows.push_back({std::fabs(t.delta()), cells});
      }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    Table times(format, {"layer", "what", "base", "new", "change", "%"}, 2);
    for (std::size_t i = 0; i < rows.size() && i < 10; ++i) times.add(rows[i].second);
    out += times.empty() ? "no layer's time changed\n" : times.render();
    if (rows.size() > 10) out += "(" + std::to_string(rows.size() - 10) + " smaller changes left out; the JSON has every one)\n";
  }

  Table summary(format, {"what", "base", "new", "change", "%"}, 1);
  for (const Change* s : {&c.activations_per_sample, &c.parameters, &c.trainable_parameters, &c.static_bytes, &c.step_peak}) {
    summary.add(change_cells(*s));
  }
  if (c.times_compared) summary.add(change_cells(c.step_time));
  summary.add(change_cells(c.planned.largest_batch));
  summary.add(change_cells(c.planned.samples_per_second));
  summary.add({"chosen plan", c.planned.base_plan, c.planned.next_plan, "", ""});
  out += heading(format, "Summary (planned with budget " + core::format_bytes(c.planned.budget_bytes) + ", batch " +
                             std::to_string(c.planned.batch) + ", margin 0)");
  out += summary.render();
  out += verdict(c.failure, format);
  return out;
}

std::string render_comparison(const ChoiceComparison& c, const std::string& base_name, const std::string& next_name,
                              CompareFormat format) {
  std::string out = (format == CompareFormat::Markdown ? "## headroom compare\n\n" : "") + std::string("BASE ") + base_name +
                    "  ->  NEW " + next_name + " (" + c.kind + "s)\n";
  for (const auto& w : c.warnings) out += "warning: " + w + "\n";
  Table choices(format, {"choice", "base", "new", ""}, 4);
  for (const auto& row : c.rows) choices.add({row.what, row.base, row.next, row.changed ? "changed" : ""});
  out += heading(format, "Choices");
  out += choices.render();
  Table figures(format, {"what", "base", "new", "change", "%"}, 1);
  figures.add(change_cells(c.peak));
  figures.add(change_cells(c.samples_per_second));
  if (c.measured_peak) figures.add(change_cells(*c.measured_peak));
  if (c.measured_samples_per_second) figures.add(change_cells(*c.measured_samples_per_second));
  out += heading(format, "Predicted" + std::string(c.measured_peak ? " and measured" : ""));
  out += figures.render();
  out += verdict(c.failure, format);
  return out;
}

nlohmann::json comparison_json(const TraceComparison& c, const std::string& base_name, const std::string& next_name) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : c.layers) {
    nlohmann::json memory = nlohmann::json::array(), time = nlohmann::json::array(), at = nlohmann::json::array();
    for (const auto& m : layer.memory) memory.push_back(change_json(m));
    for (const auto& t : layer.time) time.push_back(change_json(t));
    for (const auto& b : layer.batches) at.push_back({{"batch", b.batch}, {"base", cost_json(b.base)}, {"new", cost_json(b.next)}});
    layers.push_back({{"name", layer.name}, {"status", layer.status}, {"memory", memory}, {"time", time}, {"batches", at}});
  }
  nlohmann::json summary = nlohmann::json::array();
  for (const Change* s : {&c.activations_per_sample, &c.parameters, &c.trainable_parameters, &c.static_bytes, &c.step_peak}) {
    summary.push_back(change_json(*s));
  }
  if (c.times_compared) summary.push_back(change_json(c.step_time));
  return {{"schema", kCompareSchema},
          {"kind", "trace"},
          {"base", base_name},
          {"new", next_name},
          {"base_model", c.base_model},
          {"new_model", c.next_model},
          {"common_batches", c.common_batches},
          {"times_compared", c.times_compared},
          {"times_note", c.times_note},
          {"layers", layers},
          {"added", c.added},
          {"removed", c.removed},
          {"summary", summary},
          {"planned",
           {{"budget_bytes", c.planned.budget_bytes},
            {"batch", c.planned.batch},
            {"largest_batch", change_json(c.planned.largest_batch)},
            {"samples_per_second", change_json(c.planned.samples_per_second)},
            {"base_plan", c.planned.base_plan},
            {"new_plan", c.planned.next_plan}}},
          {"warnings", c.warnings},
          {"passed", c.failure.empty()},
          {"failure", c.failure}};
}

nlohmann::json comparison_json(const ChoiceComparison& c, const std::string& base_name, const std::string& next_name) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : c.rows) rows.push_back({{"what", row.what}, {"base", row.base}, {"new", row.next}, {"changed", row.changed}});
  nlohmann::json figures = nlohmann::json::array({change_json(c.peak), change_json(c.samples_per_second)});
  if (c.measured_peak) figures.push_back(change_json(*c.measured_peak));
  if (c.measured_samples_per_second) figures.push_back(change_json(*c.measured_samples_per_second));
  return {{"schema", kCompareSchema}, {"kind", c.kind},      {"base", base_name},          {"new", next_name},
          {"choices", rows},          {"figures", figures},  {"warnings", c.warnings},     {"passed", c.failure.empty()},
          {"failure", c.failure}};
}

}  // namespace headroom::report
