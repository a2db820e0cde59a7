#!/usr/bin/env bash
# Installs the Debian 12 packages headroom builds and runs with. Safe to run again: apt-get skips
# what is already installed. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev
  # libtorch's CPU matrix products go through BLAS; without the pthread OpenBLAS they are ~50x slower.
  libopenblas0-pthread
  libboost-graph-dev
  qt6-base-dev qt6-charts-dev libgl-dev
  # The GUI tests run headless on the offscreen platform plugin, and draw text with a real font.
  qt6-qpa-plugins fonts-dejavu-core
  nlohmann-json3-dev libcli11-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  xvfb
  zlib1g-dev
  # Real data for the cnn model (gzipped IDX files under /usr/share/datasets/fashion-mnist).
  dataset-fashion-mnist
)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
