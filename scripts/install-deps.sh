#!/usr/bin/env bash
# Installs the Debian 12 packages headroom builds and runs with, then checks that they are enough:
# every find_package of the default build resolves (scripts/dependency-probe, which reads the same
# list as the build, cmake/dependencies.cmake) and every file the tests read at run time is there.
# Safe to run again: apt-get skips what is already installed. Needs root (or sudo).
# --with-fuzzing adds clang and libFuzzer's runtime for scripts/fuzz.sh (CI uses it).
# --with-pytorch adds Debian's PyTorch 1.13 and torchvision 0.14 for /usr/bin/python3: the tests that
# check headroom against PyTorch itself use them (and skip, saying why, without them), and examples/
# exports real models with them, and the Python package's tests run with them (skipping without them).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  # LLVM's linker: libtorch programs with their debug information link several times faster with it
  # than with GNU ld, which is most of an incremental rebuild (docs/guide/developing.md).
  lld
  # A compiler cache: a fresh clone or build folder takes the objects an earlier build on this
  # machine compiled from the same sources (cmake/compiler_cache.cmake).
  ccache
  libtorch-dev
  # The headers of c10d's Gloo process group (data parallel on the CPU) include gloo's own.
  libgloo-dev
  # libtorch's CPU matrix products go through BLAS; without the pthread OpenBLAS they fall back to
  # the reference BLAS, far slower (docs/results.md, "How to read these tables").
  libopenblas0-pthread
  libboost-graph-dev
  # Qt 6 Charts' CMake config needs Qt 6 OpenGL's development files, which --no-install-recommends
  # does not bring along with qt6-charts-dev.
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl-dev
  # The GUI tests run headless on the offscreen platform plugin, and draw text with a real font.
  qt6-qpa-plugins fonts-dejavu-core
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  xvfb
  zlib1g-dev
  # The Python package (python/): its bindings, Debian's interpreter's headers, and its tests.
  pybind11-dev python3-dev python3-pytest
  # Real data for the cnn model (gzipped IDX files under /usr/share/datasets/fashion-mnist).
  dataset-fashion-mnist
)

with_pytorch=0
for option in "$@"; do
  case "$option" in
    --with-fuzzing)
      # libFuzzer's runtime is only a Recommends of clang's, so --no-install-recommends needs it named.
      packages+=(clang libclang-rt-14-dev) ;;
    --with-pytorch)
      packages+=(python3 python3-torch python3-torchvision)
      with_pytorch=1 ;;
    *) echo "install-deps: unknown option '$option' (known: --with-fuzzing, --with-pytorch)" >&2; exit 2 ;;
  esac
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
else
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# What the packages must have put in place. A package list that falls short names the package here,
# not in a build error later.
problems=0
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! cmake -S scripts/dependency-probe -B "$probe" -G Ninja >"$probe/log" 2>&1; then
  grep -E "missing:|cannot configure|Error" "$probe/log" | sed 's/^-- /install-deps: /' >&2
  problems=1
fi
multiarch=$(gcc -print-multiarch)
runtime_files=(
  "libopenblas0-pthread:/usr/lib/$multiarch/openblas-pthread/libblas.so.3"
  "qt6-qpa-plugins:/usr/lib/$multiarch/qt6/plugins/platforms/libqoffscreen.so"
  "fonts-dejavu-core:/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
  "dataset-fashion-mnist:/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
  "xvfb:/usr/bin/xvfb-run"
)
for entry in "${runtime_files[@]}"; do
  if [ ! -e "${entry#*:}" ]; then
    echo "install-deps: ${entry#*:} is missing (Debian package ${entry%%:*})" >&2
    problems=1
  fi
done
if [ "$with_pytorch" -eq 1 ]; then
  # Debian's packages install into /usr/lib/python3/dist-packages, which only the system interpreter
  # reads: a python3 earlier on PATH (pyenv, a virtualenv) does not see them. Check the system one, and
  # say which to use when the first python3 on PATH is another.
  if ! versions=$(/usr/bin/python3 -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)' 2>&1); then
    echo "install-deps: /usr/bin/python3 cannot import torch and torchvision: ${versions##*$'\n'}" >&2
    problems=1
  else
    echo "install-deps: /usr/bin/python3 has torch and torchvision ${versions}"
    first=$(command -v python3 || true)
    if [ -n "$first" ] && [ "$(readlink -f "$first")" != "$(readlink -f /usr/bin/python3)" ] \
       && ! "$first" -c 'import torch' >/dev/null 2>&1; then
      echo "install-deps: note: python3 on PATH is $first, which does not see Debian's torch;" \
           "the example scripts re-run themselves with /usr/bin/python3, or call that directly"
    fi
  fi
fi
if [ "$problems" -ne 0 ]; then
  echo "install-deps: the packages above are not enough for the default build and its tests" >&2
  exit 1
fi
echo "install-deps: every package the build and tests need is there"
