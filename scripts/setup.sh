#!/usr/bin/env bash
# Installs everything Kestrel needs to build and test on a fresh Debian 12 machine: Debian packages
# (only the missing ones, so a second run is instant) and the Python test venv (.venv, pinned).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake make pkg-config git
  patch                                    # Kestrel's changes to xgrammar (scripts/fetch_xgrammar.sh)
  clang libclang-rt-14-dev                 # libFuzzer target for the GGUF reader
  g++-aarch64-linux-gnu                    # scripts/check_portable.sh: the portable sources build for ARM
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libxxhash-dev
  libicu-dev                               # Unicode categories and NFD for the WordPiece tokenizer
  libboost1.74-dev                         # Boost.Beast/Asio: the server's HTTP layer (headers only)
  libeigen3-dev                            # dense linear algebra for GPTQ (src/calib)
  openmpi-bin libopenmpi-dev               # one model over several processes/machines (src/dist, --tp/--pp)
  iproute2                                 # tests/dist: two "hosts" as network namespaces
  python3 python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python is for tests and tooling only; the engine never needs it.
if [ -f requirements-test.txt ]; then
  stamp=.venv/.requirements-test.sha256
  want=$(sha256sum requirements-test.txt | cut -d' ' -f1)
  if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: creating .venv from requirements-test.txt"
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -r requirements-test.txt
    echo "$want" > "$stamp"
  fi
fi

# xgrammar's C++ sources (structured output's grammar engine), pinned, from PyPI.
scripts/fetch_xgrammar.sh > /dev/null
