#!/usr/bin/env bash
# Builds headroom with CUDA and CUPTI on the GPU machine, which has nvcc, CMake, ninja and PyTorch
# (whose bundled libtorch we build against) but no package registry.
#
#   scripts/gpu-build.sh fetch          here, where Debian's registry is reachable: downloads the
#                                       .deb files of the small and header-only dependencies into
#                                       .gpu-deps/ (ignored by git; carry it to the GPU machine)
#   scripts/gpu-build.sh build [DIR]    there: unpacks them into .gpu-deps/prefix, configures
#                                       against PyTorch's libtorch with -DHEADROOM_WITH_CUDA=ON (no
#                                       GUI, no benchmarks) and builds into DIR (default build/gpu)
#
# Then: ctest --test-dir build/gpu, and build/gpu/headroom profile --device cuda ...
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps="$root/.gpu-deps"
# Header-only or static: nothing here has to match the GPU machine's distribution, except zlib,
# whose runtime comes along so the link does not depend on the image having zlib's headers.
packages=(nlohmann-json3-dev libcli11-dev libboost1.74-dev libgtest-dev libgmock-dev zlib1g-dev zlib1g)

fail() {
  echo "gpu-build: $*" >&2
  exit 1
}

fetch() {
  command -v apt-get >/dev/null || fail "fetch runs on the Debian development machine (no apt-get here)"
  rm -rf "$deps/debs"
  mkdir -p "$deps/debs"
  (cd "$deps/debs" && apt-get download "${packages[@]}") || fail "apt-get download failed (is Debian's registry reachable?)"
  echo "gpu-build: $(ls "$deps/debs" | wc -l) packages in $deps/debs ($(du -sh "$deps/debs" | cut -f1)); carry .gpu-deps to the GPU machine"
}

build() {
  local build_dir=${1:-$root/build/gpu}
  [[ -d "$deps/debs" ]] || fail "no $deps/debs: run 'scripts/gpu-build.sh fetch' on the development machine and carry .gpu-deps"
  command -v nvcc >/dev/null || fail "nvcc is not on PATH (the CUDA toolkit is needed for CUPTI)"
  command -v dpkg-deb >/dev/null || fail "dpkg-deb is needed to unpack the .deb files"
  local python=${PYTHON:-python3}
  local torch_prefix
  torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') ||
    fail "$python cannot import torch (set PYTHON to the interpreter that has PyTorch)"
  "$python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' ||
    fail "this PyTorch has no CUDA: its libtorch cannot run --device cuda"

  local prefix="$deps/prefix"
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for deb in "$deps"/debs/*.deb; do dpkg-deb -x "$deb" "$prefix"; done

  local cuda_root
  cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  echo "gpu-build: libtorch from $torch_prefix, CUDA toolkit at $cuda_root, dependencies in $prefix"
  cmake -S "$root" -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" \
    -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" \
    -DCUDAToolkit_ROOT="$cuda_root" \
    -DHEADROOM_WITH_CUDA=ON -DHEADROOM_WITH_GUI=OFF -DHEADROOM_BUILD_BENCH=OFF -DHEADROOM_BUILD_TESTS=ON
  cmake --build "$build_dir" -j "$(nproc)"
  echo "gpu-build: built $build_dir/headroom"
}

case "${1:-}" in
  fetch) fetch ;;
  build) shift; build "$@" ;;
  *) fail "usage: scripts/gpu-build.sh fetch | build [BUILD_DIR]" ;;
esac
