#!/usr/bin/env bash
# Installs what building and testing a4w4 needs on Debian 12, skipping what is already there.
# Usage: scripts/install-deps.sh [--fuzz]   (--fuzz adds clang + libFuzzer for the fuzz targets)
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libfmt-dev libcli11-dev libgtest-dev
          libgmock-dev libbenchmark-dev libopenblas-dev python3-venv python3-dev)
if [[ "${1:-}" == "--fuzz" ]]; then
  packages+=(clang libclang-rt-dev libomp-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi
