#include "report/text_table.h"

#include <algorithm>
#include <stdexcept>

namespace headroom::report {

void TextTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size()) throw std::invalid_argument("TextTable: row has the wrong number of cells");
  rows_.push_back(std::move(cells));
}

void TextTable::add_rule() { rows_.emplace_back(); }

std::string TextTable::render() const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) width[c] = columns_[c].header.size();
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::size_t total = 0;
  for (const auto w : width) total += w + 2;
  const std::string rule(total > 2 ? total - 2 : 0, '-');

  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::size_t pad = width[c] - cells[c].size();
      const bool left = columns_[c].align == Align::Left;
      if (c > 0) out += "  ";
      if (left) out += cells[c] + (c + 1 < cells.size() ? std::string(pad, ' ') : "");
      else out += std::string(pad, ' ') + cells[c];
    }
    return out + "\n";
  };

  std::vector<std::string> headers;
  for (const auto& column : columns_) headers.push_back(column.header);
  std::string out = line(headers) + rule + "\n";
  for (const auto& row : rows_) out += row.empty() ? rule + "\n" : line(row);
  return out;
}

}  // namespace headroom::report
