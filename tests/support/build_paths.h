#pragma once
// Where the repository's and the build's files are, for the tests and benchmarks. Their
// CMakeLists.txt (tests/build_paths.cmake) names each path relative to the program that uses it,
// not as an absolute path: a compile command that named the folder a clone lies in would miss the
// compiler cache in every other clone (cmake/compiler_cache.cmake).
namespace headroom::test {

// The running program's folder joined with `relative`, normalized; the text lives as long as the
// program.
const char* beside_program(const char* relative);

}  // namespace headroom::test
