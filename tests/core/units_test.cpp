#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/units.h"

namespace headroom {
namespace {

TEST(Units, ParsesBinaryUnitsAndPlainBytes) {
  EXPECT_EQ(core::parse_bytes("0"), 0);
  EXPECT_EQ(core::parse_bytes("1048576"), 1048576);
  EXPECT_EQ(core::parse_bytes("512MiB"), 512LL << 20);
  EXPECT_EQ(core::parse_bytes("1.5GiB"), 3LL << 29);
  EXPECT_EQ(core::parse_bytes("64 KiB"), 64LL << 10);
  EXPECT_EQ(core::parse_bytes("2TiB"), 2LL << 40);
  EXPECT_EQ(core::parse_bytes("17B"), 17);
}

TEST(Units, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "MiB", "12MB", "1.2.3GiB", "-5", "1.5", "ten", "99999999999TiB"}) {
    EXPECT_THROW(core::parse_bytes(bad), core::InputError) << bad;
  }
  // Each says what is wrong with it.
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"12MB", "'12MB': unknown unit"}, {"-1", "'-1': a size cannot be negative"}, {"", "'': empty"},
           {"  ", "empty"}, {"MiB", "no number"}}) {
    try {
      core::parse_bytes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const core::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST(Units, FormatsBytes) {
  EXPECT_EQ(core::format_bytes(0), "0 B");
  EXPECT_EQ(core::format_bytes(812), "812 B");
  EXPECT_EQ(core::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(core::format_bytes(512LL << 20), "512 MiB");
  EXPECT_EQ(core::format_bytes(13LL << 30), "13.0 GiB");
  EXPECT_EQ(core::format_bytes(-2048), "-2.00 KiB");
}

TEST(Units, FormatsDurations) {
  EXPECT_EQ(core::format_duration_ns(850), "850 ns");
  EXPECT_EQ(core::format_duration_ns(12'300), "12.3 us");
  EXPECT_EQ(core::format_duration_ns(4'560'000), "4.56 ms");
  EXPECT_EQ(core::format_duration_ns(1'230'000'000), "1.23 s");
}

// A least budget shown to a user reads back as at least itself, so typing it as shown works.
TEST(Units, AtLeastFormattingReadsBackAsAtLeastTheBytes) {
  EXPECT_EQ(core::format_bytes_at_least(5 << 20), "5.00 MiB");
  EXPECT_EQ(core::format_bytes_at_least(5'330'000), "5.09 MiB");  // 5.083 MiB: format_bytes says 5.08
  EXPECT_EQ(core::format_bytes_at_least(0), "0 B");
  for (std::int64_t bytes = 1; bytes < (std::int64_t{1} << 42); bytes = bytes * 37 / 16 + 11) {
    const std::string text = core::format_bytes_at_least(bytes);
    EXPECT_GE(core::parse_bytes(text), bytes) << text;
    EXPECT_LE(core::parse_bytes(text), bytes + bytes / 100 + 1) << text;  // one step of the last digit at most
  }
}

}  // namespace
}  // namespace headroom
