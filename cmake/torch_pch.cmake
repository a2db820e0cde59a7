# One precompiled libtorch header for every translation unit that includes libtorch.
#
# Parsing <torch/torch.h> is most of what such a file costs to compile, and nearly every target
# that links libtorch includes it, directly or through our headers. One target builds the header
# once; every other libtorch target reuses it (REUSE_FROM), so the whole build parses it once
# instead of once per file. GCC accepts a precompiled header only when it is used with the flags
# it was made with: all code is compiled position-independent the same way (-fPIC, which
# executables link as well as -fPIE), and the targets share libtorch's flags through
# headroom_torch. A file that includes no libtorch header is marked SKIP_PRECOMPILE_HEADERS in
# its folder's CMakeLists.txt, so it does not pay for loading the header.

add_library(headroom_torch_pch STATIC ${CMAKE_CURRENT_LIST_DIR}/torch_pch.cpp)
target_link_libraries(headroom_torch_pch PUBLIC headroom_torch PRIVATE headroom_warnings)
target_precompile_headers(headroom_torch_pch PRIVATE <torch/torch.h>)

# True where `target` links headroom_torch, directly or through our libraries.
function(headroom_links_torch target result)
  set(pending ${target})
  set(seen "")
  set(found FALSE)
  while(pending)
    list(POP_FRONT pending current)
    if(current IN_LIST seen OR NOT TARGET ${current})
      continue()
    endif()
    list(APPEND seen ${current})
    get_target_property(type ${current} TYPE)
    set(links "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${current} LINK_LIBRARIES)
      if(direct)
        list(APPEND links ${direct})
      endif()
    endif()
    get_target_property(interface ${current} INTERFACE_LINK_LIBRARIES)
    if(interface)
      list(APPEND links ${interface})
    endif()
    if("headroom_torch" IN_LIST links)
      set(found TRUE)
      break()
    endif()
    foreach(link IN LISTS links)
      if(link MATCHES "^headroom_")
        list(APPEND pending ${link})
      endif()
    endforeach()
  endwhile()
  set(${result} ${found} PARENT_SCOPE)
endfunction()

# Every compiled target under `directory` (recursively) that links libtorch reuses the header.
function(headroom_reuse_torch_pch directory)
  get_property(targets DIRECTORY ${directory} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(target STREQUAL "headroom_torch_pch" OR type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
      continue()
    endif()
    headroom_links_torch(${target} links)
    if(links)
      target_precompile_headers(${target} REUSE_FROM headroom_torch_pch)
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY ${directory} PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    headroom_reuse_torch_pch(${subdirectory})
  endforeach()
endfunction()
