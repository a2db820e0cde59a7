# Every package the build finds, with the Debian packages that provide it: one list, read by the
# top-level CMakeLists.txt and by scripts/install-deps.sh (through scripts/dependency-probe), so a
# package missing from the setup script names itself instead of failing later in some folder.
#
# headroom_require(<find_package arguments> DEBIAN <packages...> [WHAT <text>] [ELSE <text>])
#   WHAT: what the package is for, shown in the error; ELSE: how to do without it (an option to turn off).
# Outside the probe a missing package stops configuration with one message; in the probe
# (HEADROOM_DEPENDENCY_PROBE) every missing package is collected and reported together.

# A macro, not a function: find_package's result variables (TORCH_LIBRARIES, ...) must reach the caller.
macro(headroom_require)
  cmake_parse_arguments(_req "" "WHAT;ELSE" "DEBIAN" ${ARGN})
  list(GET _req_UNPARSED_ARGUMENTS 0 _req_name)
  find_package(${_req_UNPARSED_ARGUMENTS} QUIET)
  if(NOT ${_req_name}_FOUND)
    set(_req_what "${_req_name}")
    if(_req_WHAT)
      set(_req_what "${_req_name} (${_req_WHAT})")
    endif()
    list(JOIN _req_DEBIAN " " _req_debian)
    set(_req_message "${_req_what} not found: install the Debian package(s) ${_req_debian} (scripts/install-deps.sh installs them)")
    if(_req_ELSE)
      string(APPEND _req_message ", or ${_req_ELSE}")
    endif()
    if(HEADROOM_DEPENDENCY_PROBE)
      set_property(GLOBAL APPEND PROPERTY HEADROOM_MISSING "${_req_message}")
      set_property(GLOBAL APPEND PROPERTY HEADROOM_MISSING_DEBIAN ${_req_DEBIAN})
    else()
      message(FATAL_ERROR "${_req_message}.")
    endif()
  endif()
endmacro()

# The packages the build needs with the options it was configured with.
macro(headroom_find_dependencies)
  headroom_require(nlohmann_json 3.10 DEBIAN nlohmann-json3-dev WHAT "JSON")
  headroom_require(Torch DEBIAN libtorch-dev WHAT "libtorch"
                   ELSE "point CMAKE_PREFIX_PATH at a libtorch install (PyTorch's torch.utils.cmake_prefix_path)")
  headroom_require(Boost 1.74 DEBIAN libboost-graph-dev WHAT "Boost.Graph, for the planner")
  headroom_require(ZLIB DEBIAN zlib1g-dev WHAT "zlib: Fashion-MNIST is gzipped")
  headroom_require(CLI11 DEBIAN libcli11-dev WHAT "the command line")
  if(HEADROOM_WITH_GUI)
    # Each Qt module on its own, so the one missing names itself. Charts' own CMake config needs
    # Qt6OpenGL, whose development files --no-install-recommends does not bring with qt6-charts-dev.
    headroom_require(Qt6 COMPONENTS Core Gui Widgets DEBIAN qt6-base-dev libgl-dev WHAT "Qt 6 Widgets, for the desktop app"
                     ELSE "configure with -DHEADROOM_WITH_GUI=OFF")
    headroom_require(Qt6OpenGL DEBIAN libqt6opengl6-dev WHAT "Qt 6 OpenGL, which Qt 6 Charts needs"
                     ELSE "configure with -DHEADROOM_WITH_GUI=OFF")
    headroom_require(Qt6Charts DEBIAN qt6-charts-dev libqt6opengl6-dev WHAT "Qt 6 Charts, for the desktop app"
                     ELSE "configure with -DHEADROOM_WITH_GUI=OFF")
    if(HEADROOM_BUILD_TESTS)
      headroom_require(Qt6Test DEBIAN qt6-base-dev WHAT "Qt 6 Test, for the desktop app's tests"
                       ELSE "configure with -DHEADROOM_WITH_GUI=OFF or -DHEADROOM_BUILD_TESTS=OFF")
    endif()
  endif()
  if(HEADROOM_WITH_PYTHON)
    # Debian's interpreter, the one python3-torch is installed for: a python3 earlier on PATH (pyenv,
    # a virtualenv) would build a module that imports another torch, or none.
    if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
      set(Python3_EXECUTABLE /usr/bin/python3)
    endif()
    headroom_require(Python3 COMPONENTS Interpreter Development.Module DEBIAN python3-dev
                     WHAT "Python's headers, for the Python package" ELSE "configure with -DHEADROOM_WITH_PYTHON=OFF")
    set(PYBIND11_FINDPYTHON ON)
    headroom_require(pybind11 CONFIG DEBIAN pybind11-dev WHAT "the Python package's bindings"
                     ELSE "configure with -DHEADROOM_WITH_PYTHON=OFF")
  endif()
  if(HEADROOM_BUILD_TESTS)
    headroom_require(GTest DEBIAN libgtest-dev libgmock-dev WHAT "GoogleTest" ELSE "configure with -DHEADROOM_BUILD_TESTS=OFF")
  endif()
  if(HEADROOM_BUILD_BENCH)
    headroom_require(benchmark DEBIAN libbenchmark-dev WHAT "Google Benchmark" ELSE "configure with -DHEADROOM_BUILD_BENCH=OFF")
  endif()
endmacro()

# What the torch-free libraries need: all a fuzz build (HEADROOM_BUILD_FUZZERS) compiles.
macro(headroom_find_fuzz_dependencies)
  headroom_require(nlohmann_json 3.10 DEBIAN nlohmann-json3-dev WHAT "JSON")
  headroom_require(Boost 1.74 DEBIAN libboost-graph-dev WHAT "Boost.Graph, for the planner")
endmacro()
