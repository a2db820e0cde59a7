#include <gtest/gtest.h>

#include "report/text_table.h"

namespace headroom {
namespace {

TEST(TextTable, AlignsColumns) {
  report::TextTable table({{"name", report::TextTable::Align::Left}, {"bytes"}});
  table.add_row({"fc", "1.00 KiB"});
  table.add_row({"attention", "12 B"});
  table.add_rule();
  table.add_row({"total", "1.01 KiB"});
  EXPECT_EQ(table.render(),
            "name          bytes\n"
            "-------------------\n"
            "fc         1.00 KiB\n"
            "attention      12 B\n"
            "-------------------\n"
            "total      1.01 KiB\n");
}

}  // namespace
}  // namespace headroom
