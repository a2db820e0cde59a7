# Read by ctest, after the files that add the tests each test binary lists: its labels for each
# test. tests/CMakeLists.txt writes the calls (headroom_test_labels.cmake in the build tree), since
# the tests exist only once their binaries are built and listed.

# Labels every test of `tests` with `labels`, and those named in `slow` or `extended` with that too.
function(headroom_label tests labels slow extended)
  foreach(test IN LISTS tests)
    set(test_labels ${labels})
    list(FIND slow "${test}" at)
    if(NOT at EQUAL -1)
      list(APPEND test_labels slow)
    endif()
    list(FIND extended "${test}" at)
    if(NOT at EQUAL -1)
      list(APPEND test_labels extended)
    endif()
    set_tests_properties("${test}" PROPERTIES LABELS "${test_labels}")
  endforeach()
endfunction()

# The names of the tests a file written by cmake/qtest_discover.cmake adds, in `out`.
function(headroom_qtest_names ctest_file out)
  set(names "")
  if(EXISTS "${ctest_file}")
    file(STRINGS "${ctest_file}" added REGEX "^add_test")
    foreach(line IN LISTS added)
      if(line MATCHES "^add_test\\(\\[=\\[([^]]*)\\]=\\]")
        list(APPEND names "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endif()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()
