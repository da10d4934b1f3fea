#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages. Idempotent; run as root
# (or with sudo available). The CUDA Toolkit is expected at /usr/local/cuda when present.
set -euo pipefail
PKGS=(cmake ninja-build g++ ccache git
      libcli11-dev libfmt-dev libtomlplusplus-dev libeigen3-dev
      libbenchmark-dev libgtest-dev libgmock-dev libfccp-dev
      python3 python3-matplotlib slurm-wlm munge)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: dependencies present"
