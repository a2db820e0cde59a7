#include <gtest/gtest.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/errors.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

fs::path fresh_directory(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(AtomicFile, WritesAndReplacesWithoutLeavingTemporaries) {
  const fs::path dir = fresh_directory("headroom_atomic_ok");
  core::write_file_atomically(dir / "out.json", "first");
  core::write_file_atomically(dir / "out.json", "second");
  EXPECT_EQ(core::read_file(dir / "out.json"), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  fs::remove_all(dir);
}

TEST(AtomicFile, FailureLeavesNothingBehind) {
  const fs::path dir = fresh_directory("headroom_atomic_fail");
  // Renaming onto a directory fails after the temporary was written: it must be cleaned up.
  fs::create_directories(dir / "taken");
  fs::create_directories(dir / "taken" / "child");
  EXPECT_THROW(core::write_file_atomically(dir / "taken", "x"), std::runtime_error);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  EXPECT_THROW(core::write_file_atomically(dir / "missing" / "out.json", "x"), std::runtime_error);
  fs::remove_all(dir);
}

TEST(AtomicFile, OutputsOfOneRunLandTogetherOrNotAtAll) {
  const fs::path dir = fresh_directory("headroom_atomic_together");
  core::write_file_atomically(dir / "s.json", "old");
  // The second name is valid to check but too long for its temporary (name + 12 characters > 255):
  // writing fails after the first file was staged, and neither may land.
  const fs::path long_name = dir / (std::string(250, 'c') + ".json");
  EXPECT_THROW(core::write_files_together({{dir / "s.json", "new"}, {long_name, "chrome"}}), std::runtime_error);
  EXPECT_EQ(core::read_file(dir / "s.json"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);  // no temporaries
  // A path refused up front: nothing is written at all.
  EXPECT_THROW(core::write_files_together({{dir / "s.json", "new"}, {dir / "nodir" / "c.json", "x"}}), core::InputError);
  EXPECT_EQ(core::read_file(dir / "s.json"), "old");
  core::write_files_together({{dir / "s.json", "new"}, {dir / "c.json", "chrome"}});
  EXPECT_EQ(core::read_file(dir / "s.json"), "new");
  EXPECT_EQ(core::read_file(dir / "c.json"), "chrome");
  fs::remove_all(dir);
}

TEST(AtomicFile, ReadingAMissingFileNamesIt) {
  try {
    core::read_file("/nonexistent/headroom.json");
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/headroom.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace headroom
