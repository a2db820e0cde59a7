# headroom_unity_group(<target> <group> <file>...): the files compile as one translation unit.
#
# A file that includes libtorch costs about 20 seconds however short it is (instantiating and
# optimizing what libtorch's headers define inline; docs/results.md, "Build and test times"), so a
# folder's short libtorch files compile together and pay it once. The files of a group share one
# anonymous namespace, so none may define a name another defines. The group's file includes its
# members by their path under the project (CMake's own unity files name them by absolute path,
# which would tie each object in the compiler cache to the clone it was built in:
# cmake/compiler_cache.cmake). The members become the target's sources here (an IDE lists them),
# so the target's own list names only the files that compile alone. Paths are relative to the
# calling CMakeLists.txt's folder.
function(headroom_unity_group target group)
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  set(includes "")
  foreach(file IN LISTS ARGN)
    string(APPEND includes "#include \"${folder}/${file}\"\n")
  endforeach()
  set(unity_file ${CMAKE_CURRENT_BINARY_DIR}/unity/${target}_${group}.cpp)
  file(CONFIGURE OUTPUT ${unity_file} CONTENT "${includes}")
  target_sources(${target} PRIVATE ${ARGN} ${unity_file})
  set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES HEADER_FILE_ONLY ON)
endfunction()
