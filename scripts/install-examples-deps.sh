#!/usr/bin/env bash
# Installs what examples/ needs: Debian 12's PyTorch 1.13 and torchvision 0.14 for /usr/bin/python3.
# Kept out of scripts/install-deps.sh on purpose: building and testing headroom needs no Python; the
# tests that check headroom against PyTorch itself skip (saying why) when these are absent, and the
# CI test setup calls this script to run them.
# Safe to run again: packages already installed are not fetched. Needs root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(python3 python3-torch python3-torchvision)

case "${1:-}" in
  "") ;;
  *) echo "install-examples-deps: unknown option '$1' (it takes none)" >&2; exit 2 ;;
esac

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-examples-deps: all ${#packages[@]} packages already installed"
else
  echo "install-examples-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Debian's packages install into /usr/lib/python3/dist-packages, which only the system interpreter
# reads: a python3 earlier on PATH (pyenv, a virtualenv) does not see them. Check the system one, and
# say which to use when the first python3 on PATH is another.
if ! versions=$(/usr/bin/python3 -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)' 2>&1); then
  echo "install-examples-deps: /usr/bin/python3 cannot import torch and torchvision: ${versions##*$'\n'}" >&2
  exit 1
fi
echo "install-examples-deps: /usr/bin/python3 has torch and torchvision ${versions}"
first=$(command -v python3 || true)
if [ -n "$first" ] && [ "$(readlink -f "$first")" != "$(readlink -f /usr/bin/python3)" ] \
   && ! "$first" -c 'import torch' >/dev/null 2>&1; then
  echo "install-examples-deps: note: python3 on PATH is $first, which does not see Debian's torch;" \
       "the example scripts re-run themselves with /usr/bin/python3, or call that directly"
fi
