#pragma once
// Aligned plain-text tables for the terminal.
#include <string>
#include <vector>

namespace headroom::report {

class TextTable {
 public:
  enum class Align { Left, Right };
  struct Column {
    std::string header;
    Align align = Align::Right;
  };

  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<std::string> cells);
  // A horizontal rule before the next row (e.g. before a totals row).
  void add_rule();
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a rule
};

}  // namespace headroom::report
