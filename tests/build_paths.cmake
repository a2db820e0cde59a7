# Paths a test or benchmark program reads (support/build_paths.h): each is passed relative to the
# program's own folder, so that no compile command names the folder a clone lies in.

add_library(headroom_build_paths STATIC ${CMAKE_CURRENT_LIST_DIR}/support/build_paths.cpp)
target_include_directories(headroom_build_paths PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(headroom_build_paths PRIVATE headroom_warnings)

# headroom_build_paths(<target> <MACRO>=<path>|<MACRO>=$<TARGET_FILE:...> ...): defines each MACRO
# in <target> as the path, found beside the running program.
function(headroom_build_paths target)
  target_link_libraries(${target} PRIVATE headroom_build_paths)
  foreach(definition IN LISTS ARGN)
    string(FIND "${definition}" "=" at)
    string(SUBSTRING "${definition}" 0 ${at} macro)
    math(EXPR at "${at} + 1")
    string(SUBSTRING "${definition}" ${at} -1 path)
    set(relative "$<PATH:RELATIVE_PATH,${path},$<TARGET_FILE_DIR:${target}>>")
    target_compile_definitions(${target} PRIVATE "${macro}=headroom::test::beside_program(\"${relative}\")")
  endforeach()
endfunction()
