# ccache, where it is installed: a build of sources an earlier build on the machine compiled takes
# the objects from the cache instead of compiling them again. The cache is shared by every clone
# on the machine, so the keys must not depend on where a clone lies (a libtorch file still hits
# only in the build folder it was compiled in: the precompiled header differs between folders by
# a few bytes, and ccache hashes it into the key of each file that uses it):
# - base_dir makes the paths under the source folder relative before they are hashed;
# - -ffile-prefix-map writes the source folder as "." into debug information and __FILE__, so
#   the working directory need not be hashed (ccache drops it when a prefix map covers it);
# - the precompiled libtorch header (cmake/torch_pch.cmake) is cached and used from the cache only
#   with the pch_defines and time_macros sloppiness ccache's manual asks for, and the mtime/ctime
#   ones, since a clone's headers are all newer than the header built from them.
option(HEADROOM_USE_CCACHE "Compile through ccache where it is installed" ON)
if(NOT HEADROOM_USE_CCACHE OR CMAKE_CXX_COMPILER_LAUNCHER)
  return()
endif()
find_program(HEADROOM_CCACHE ccache)
if(NOT HEADROOM_CCACHE)
  message(STATUS "headroom: ccache not found, every build compiles every file: install the Debian package ccache")
  return()
endif()
set(CMAKE_CXX_COMPILER_LAUNCHER
    ${CMAKE_COMMAND} -E env
    CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
    CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
    ${HEADROOM_CCACHE})
add_compile_options(-ffile-prefix-map=${PROJECT_SOURCE_DIR}/=)
message(STATUS "headroom: compiling through ${HEADROOM_CCACHE}")
