# Lists a QtTest binary's test functions (it prints them with -functions) and writes a CTest file
# that adds one test per function, named <PREFIX><function>. Run after each build of the binary,
# so the tests CTest knows are the functions the source has, whatever they are.
#
#   cmake -DTEST_EXECUTABLE=... -DCTEST_FILE=... -DPREFIX=Gui. -DTIMEOUT=300 -P cmake/qtest_discover.cmake
cmake_minimum_required(VERSION 3.25)
set(ENV{QT_QPA_PLATFORM} offscreen)
execute_process(COMMAND "${TEST_EXECUTABLE}" -functions
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE result TIMEOUT 60)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} -functions failed (${result}):\n${listing}${errors}")
endif()
string(REGEX MATCHALL "[A-Za-z_][A-Za-z0-9_]*\\(\\)" functions "${listing}")
if(NOT functions)
  message(FATAL_ERROR "${TEST_EXECUTABLE} -functions listed no test functions:\n${listing}${errors}")
endif()
set(content "# Written by cmake/qtest_discover.cmake from ${TEST_EXECUTABLE} -functions\n")
foreach(function IN LISTS functions)
  string(REPLACE "()" "" function "${function}")
  string(APPEND content "add_test([=[${PREFIX}${function}]=] \"${TEST_EXECUTABLE}\" ${function})\n"
                        "set_tests_properties([=[${PREFIX}${function}]=] PROPERTIES ENVIRONMENT QT_QPA_PLATFORM=offscreen TIMEOUT ${TIMEOUT})\n")
endforeach()
file(WRITE "${CTEST_FILE}.new" "${content}")
file(COPY_FILE "${CTEST_FILE}.new" "${CTEST_FILE}" ONLY_IF_DIFFERENT)
file(REMOVE "${CTEST_FILE}.new")
