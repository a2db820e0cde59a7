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
# libgloo-dev only where PyTorch's wheel lacks gloo's headers (checked at build time).
packages=(nlohmann-json3-dev libcli11-dev libboost1.74-dev libgtest-dev libgmock-dev zlib1g-dev zlib1g libgloo-dev)

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
  rm -rf "$prefix" "$deps/gloo"
  mkdir -p "$prefix"
  # Debian's gloo headers apart: used only where the wheel has none (a second copy on the include
  # path could shadow the ones its libtorch was built with).
  for deb in "$deps"/debs/*.deb; do
    case "$(basename "$deb")" in
      libgloo-dev_*) dpkg-deb -x "$deb" "$deps/gloo" ;;
      *) dpkg-deb -x "$deb" "$prefix" ;;
    esac
  done

  local cuda_root
  cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  local torch_include
  torch_include=$("$python" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
  local gloo=()
  if [[ -f "$torch_include/gloo/allreduce_ring.h" ]]; then
    echo "gpu-build: gloo's headers from PyTorch's wheel"
  else
    echo "gpu-build: PyTorch's wheel has no gloo headers: Debian's libgloo-dev's"
    gloo=(-DHEADROOM_GLOO_INCLUDE_DIR="$deps/gloo/usr/include")
  fi
  # nccl.h comes with the wheel's nvidia-nccl package, not inside torch/include.
  local nccl=(-DHEADROOM_WITH_NCCL=OFF)
  local site nccl_header
  site=$(dirname "$(dirname "$torch_include")")
  # (torch/include has a torch/csrc/cuda/nccl.h of its own: not the library's header.)
  nccl_header=$(find "$site/nvidia" "$cuda_root/include" -name nccl.h 2>/dev/null | head -1 || true)
  if [[ -n "$nccl_header" && "${HEADROOM_WITH_NCCL:-ON}" == ON ]]; then
    nccl=(-DHEADROOM_WITH_NCCL=ON -DHEADROOM_NCCL_INCLUDE_DIR="$(dirname "$nccl_header")")
  fi
  echo "gpu-build: libtorch from $torch_prefix, CUDA toolkit at $cuda_root, dependencies in $prefix, ${nccl[*]}"
  cmake -S "$root" -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" \
    -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" \
    -DCUDAToolkit_ROOT="$cuda_root" \
    "${nccl[@]}" "${gloo[@]}" \
    -DHEADROOM_WITH_CUDA=ON -DHEADROOM_WITH_GUI=OFF -DHEADROOM_WITH_PYTHON=OFF -DHEADROOM_BUILD_BENCH=OFF \
    -DHEADROOM_BUILD_TESTS=ON
  # TARGETS="headroom ...": only those. KEEP_GOING=1: build every target that can be built and
  # show every error at once.
  local targets=() keep_going=()
  [[ -n "${TARGETS:-}" ]] && targets=(--target ${TARGETS})
  [[ "${KEEP_GOING:-0}" == 1 ]] && keep_going=(-- -k 0)
  cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}" "${keep_going[@]}"
  echo "gpu-build: built $build_dir/headroom"
}

case "${1:-}" in
  fetch) fetch ;;
  build) shift; build "$@" ;;
  *) fail "usage: scripts/gpu-build.sh fetch | build [BUILD_DIR]" ;;
esac
